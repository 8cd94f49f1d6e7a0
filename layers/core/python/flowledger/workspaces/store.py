"""Keys and items of the ``workspaces`` and ``documents`` tables, and the session owner lookup.

``workspaces``: ``(workspace_id, "#workspace")`` is the header (kind, name, owner, visibility,
``owner_count``; ``listing = "public"`` only while listed), ``(workspace_id, "member#<user>")`` one
member (``member_id``, ``role``). ``documents``: ``(document_id, "#family")`` the revision family
(``live_scope`` while not deleted; ``subject_id`` when a patient created it), ``(document_id, "v#00001")``...
its versions, ``("count#<scope>", "#count")`` a scope's live-document count.
"""

from __future__ import annotations

import hashlib
from typing import Any

from flowledger.chat.runs import SESSION_HEADER
from flowledger.services import Services

HEADER = "#workspace"
FAMILY = "#family"
COUNTER = "#count"
LISTED = "public"  # the one partition of the by_listing index


def member_sk(user_id: str) -> str:
    return f"member#{user_id}"


def version_sk(version: int) -> str:
    # Zero-padded, so a family's versions sort in order under its id.
    return f"v#{version:05d}"


def workspace_key(workspace_id: str, sk: str = HEADER) -> dict[str, Any]:
    return {"workspace_id": {"S": workspace_id}, "sk": {"S": sk}}


def document_key(document_id: str, sk: str = FAMILY) -> dict[str, Any]:
    return {"document_id": {"S": document_id}, "sk": {"S": sk}}


def counter_key(scope: str) -> dict[str, Any]:
    return document_key(f"count#{scope}", COUNTER)


def count_update(services: Services, scope: str, delta: int, most: int | None = None) -> dict[str, Any]:
    """A transaction entry that moves a scope's live-document count by ``delta``; with ``most``, only while
    the count is below it (so an addition cannot pass the bound)."""
    update: dict[str, Any] = {
        "TableName": services.aws.table_name("documents"),
        "Key": counter_key(scope),
        "UpdateExpression": "SET documents = if_not_exists(documents, :zero) + :d",
        "ExpressionAttributeValues": {":zero": {"N": "0"}, ":d": {"N": str(delta)}},
    }
    if most is not None:
        update["ConditionExpression"] = "attribute_not_exists(documents) OR documents < :max"
        update["ExpressionAttributeValues"][":max"] = {"N": str(most)}
    return {"Update": update}


def personal_workspace_id(user_id: str) -> str:
    """The id of a user's personal workspace: derived from the user, so a second one cannot be made."""
    return "ws_" + hashlib.sha256(f"personal:{user_id}".encode()).hexdigest()[:26].upper()


def workspace_scope(workspace_id: str) -> str:
    return f"workspace:{workspace_id}"


def conversation_scope(session_id: str) -> str:
    return f"conversation:{session_id}"


def session_owner(services: Services, session_id: str) -> str | None:
    """The owner a chat session's header item names (``chat/runs.py``), or None for an unused session."""
    item = services.aws.dynamodb.get_item(
        TableName=services.aws.table_name("runs"),
        ConsistentRead=True,
        Key={"session_id": {"S": session_id}, "run_id": {"S": SESSION_HEADER}},
        ProjectionExpression="#o",
        ExpressionAttributeNames={"#o": "owner"},
    ).get("Item")
    owner = (item or {}).get("owner", {}).get("S")
    return str(owner) if owner else None


def claim_session(services: Services, session_id: str, owner: str, now: str) -> dict[str, Any]:
    """A transaction entry that makes ``owner`` the session's owner, or holds only if they are already.

    The same rule as a chat turn's (``RunStore.create``): whoever first uses a session id owns it, so a
    conversation upload may come before the first turn.
    """
    return {
        "Update": {
            "TableName": services.aws.table_name("runs"),
            "Key": {"session_id": {"S": session_id}, "run_id": {"S": SESSION_HEADER}},
            "UpdateExpression": "SET #o = :owner, created_at = if_not_exists(created_at, :now)",
            "ConditionExpression": "attribute_not_exists(session_id) OR #o = :owner",
            "ExpressionAttributeNames": {"#o": "owner"},
            "ExpressionAttributeValues": {":owner": {"S": owner}, ":now": {"S": now}},
        }
    }
