"""Workspaces: who may read and write what, members with roles, public visibility and listing.

Every write is one transaction with its audit event, conditional on the state it was decided on (the
caller still an owner, the member's role unchanged, at least one owner left), so a concurrent
revocation can never be overtaken by a write it should have stopped. A workspace the caller may not
read does not exist for them (404); one they may read but not change is a 403.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from flowledger.errors import ConditionFailed, Conflict, Forbidden, InvalidInput, NotFound
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.ledger.events import AuditEntry, timestamp
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.cursors import decode_cursor, encode_cursor
from flowledger.store.decoding import decoded
from flowledger.workspaces.models import (
    RANK,
    WORKSPACE_PATTERN,
    MemberChange,
    MemberView,
    Revoked,
    Role,
    VisibilityChange,
    WorkspaceCreate,
    WorkspacePage,
    WorkspaceView,
)
from flowledger.workspaces.store import (
    HEADER,
    LISTED,
    conversation_scope,
    member_sk,
    personal_workspace_id,
    session_owner,
    workspace_key,
    workspace_scope,
)

# readable_scopes reads at most this many workspaces (memberships, then listed public ones): the
# continuity code searches within them, and a bound keeps that search bounded too.
MAX_READABLE_WORKSPACES = 500


@dataclass(frozen=True)
class Access:
    """A workspace as one caller sees it: its header and their role (None: a reader of a public one)."""

    workspace: WorkspaceView
    role: Role | None

    def at_least(self, minimum: Role) -> bool:
        return self.role is not None and RANK[self.role] >= RANK[minimum]


class WorkspaceService:
    """Workspace lifecycle, membership and the read rules the documents and the continuity code use."""

    def __init__(self, services: Services) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._table = services.aws.table_name("workspaces")

    # ---- reads -----------------------------------------------------------------------------------

    def access(self, principal: Principal, workspace_id: str) -> Access:
        """The caller's view of a workspace they may read; 404 when they may not (or it does not exist)."""
        header = self._header(workspace_id)
        role = self._role(workspace_id, principal.id) if header else None
        if header is None or (role is None and not (header.kind == "public" and header.visible)):
            raise NotFound(f"no workspace {workspace_id}")
        return Access(header.model_copy(update={"role": role}), role)

    def require(self, principal: Principal, workspace_id: str, minimum: Role) -> Access:
        """:meth:`access`, and 403 unless the caller's role is at least ``minimum``."""
        found = self.access(principal, workspace_id)
        if not found.at_least(minimum):
            raise Forbidden(f"this needs the {minimum} role in workspace {workspace_id}")
        return found

    def get(self, principal: Principal, workspace_id: str) -> WorkspaceView:
        """One workspace the caller may read."""
        return self.access(principal, workspace_id).workspace

    def may_read(self, principal: Principal, scope: str) -> bool:
        """Whether the caller may read what is stored under ``scope`` right now.

        ``workspace:<id>``: a member of any role, or anyone when the workspace is public and visible;
        ``conversation:<session id>``: the chat session's owner. Any other scope: no.
        """
        kind, _, ident = scope.partition(":")
        if kind == "workspace" and _is_workspace_id(ident):
            try:
                self.access(principal, ident)
            except NotFound:
                return False
            return True
        if kind == "conversation" and ident.startswith("ses_"):
            return session_owner(self._s, ident) == principal.id
        return False

    def readable_scopes(self, principal: Principal, session_ids: Sequence[str] = ()) -> list[str]:
        """The scopes the caller may search: their workspaces, the listed public ones, their own sessions.

        Public workspaces that are visible but not listed are readable (``may_read``) yet not
        enumerated here: whoever holds their id names them. At most ``MAX_READABLE_WORKSPACES``
        workspaces; sessions of another user (or unused ones) are left out.
        """
        scopes: list[str] = []
        seen: set[str] = set()
        for workspace_id in self._member_ids(principal.id, MAX_READABLE_WORKSPACES):
            seen.add(workspace_id)
            scopes.append(workspace_scope(workspace_id))
        if len(seen) < MAX_READABLE_WORKSPACES:
            for item in self._listed_items(MAX_READABLE_WORKSPACES):
                workspace_id = item["workspace_id"]["S"]
                if workspace_id not in seen and len(seen) < MAX_READABLE_WORKSPACES:
                    seen.add(workspace_id)
                    scopes.append(workspace_scope(workspace_id))
        for session_id in dict.fromkeys(session_ids):
            if session_id.startswith("ses_") and session_owner(self._s, session_id) == principal.id:
                scopes.append(conversation_scope(session_id))
        return scopes

    def page(self, principal: Principal, limit: int, cursor: str | None) -> WorkspacePage:
        """The caller's workspaces (by id), then the listed public ones they are not a member of (newest first)."""
        phase, after = _list_position(cursor)
        views: list[WorkspaceView] = []
        if phase == "member":
            response = self._db.query(**self._member_query(principal.id, limit, after))
            found = response.get("Items", [])
            ids = [item["workspace_id"]["S"] for item in found]
            roles = {item["workspace_id"]["S"]: item.get("role", {}).get("S") for item in found}
            views = [w.model_copy(update={"role": roles[w.workspace_id]}) for w in self._headers(ids)]
            if "LastEvaluatedKey" in response and ids:
                return WorkspacePage(workspaces=views, next_cursor=encode_cursor(["member", ids[-1]]))
            if len(views) >= limit:
                return WorkspacePage(workspaces=views, next_cursor=encode_cursor(["listed", None]))
            after = None  # the memberships are done: the rest of this page comes from the listed ones
        listed, resume = self._listed_page(principal, limit - len(views), after)
        next_cursor = encode_cursor(["listed", resume]) if resume else None
        return WorkspacePage(workspaces=views + listed, next_cursor=next_cursor)

    def _listed_page(
        self, principal: Principal, limit: int, after: list[str] | None
    ) -> tuple[list[WorkspaceView], list[str] | None]:
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "by_listing",
            "KeyConditionExpression": "listing = :l",
            "ExpressionAttributeValues": {":l": {"S": LISTED}},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if after is not None:
            request["ExclusiveStartKey"] = {
                "listing": {"S": LISTED},
                "created_at": {"S": after[0]},
                **workspace_key(after[1]),
            }
        response = self._db.query(**request)
        found = response.get("Items", [])
        ids = [item["workspace_id"]["S"] for item in found]
        mine = self._memberships(principal.id, ids)
        views = [w for w in self._headers(ids) if w.workspace_id not in mine]  # listed already, as a member
        if "LastEvaluatedKey" not in response or not found:
            return views, None
        return views, [found[-1]["created_at"]["S"], found[-1]["workspace_id"]["S"]]

    # ---- writes ----------------------------------------------------------------------------------

    def create(self, principal: Principal, body: WorkspaceCreate) -> WorkspaceView:
        """Make a workspace owned by the caller (``documents.workspace.created``); one personal one each."""
        now = timestamp(self._s.clock())
        workspace_id = personal_workspace_id(principal.id) if body.kind == "personal" else new_id("ws_")
        visible = bool(body.visible if body.visible is not None else body.kind == "public")
        listed = bool(body.listed) if body.kind == "public" else False
        view = WorkspaceView(
            workspace_id=workspace_id,
            kind=body.kind,
            name=body.name,
            owner=principal.id,
            visible=visible,
            listed=listed,
            created_at=now,
            role="owner",
        )
        header = {
            **view.model_dump(exclude={"role"}),
            "sk": HEADER,
            "owner_count": 1,
            "listing": LISTED if listed else None,
        }
        member = _member_item(workspace_id, principal.id, "owner", now, principal.id)
        try:
            self._s.ledger.append(
                AuditEntry(
                    action="documents.workspace.created",
                    actor=principal.actor,
                    subject=f"workspace:{workspace_id}",
                    payload={"kind": body.kind, "visible": visible, "listed": listed},
                ),
                [
                    self._put(header, "attribute_not_exists(workspace_id)"),
                    self._put(member, "attribute_not_exists(workspace_id)"),
                ],
            )
        except ConditionFailed:
            raise Conflict(f"you have a personal workspace already: {workspace_id}") from None
        return view

    def set_member(self, principal: Principal, workspace_id: str, user_id: str, body: MemberChange) -> MemberView:
        """Add a member or change their role; owners only (``documents.workspace.member_added``)."""
        found = self.require(principal, workspace_id, "owner")
        if found.workspace.kind == "personal":
            raise Conflict("a personal workspace has one member, its owner")
        previous = self._role(workspace_id, user_id)
        now = timestamp(self._s.clock())
        member = _member_item(workspace_id, user_id, body.role, now, principal.id)
        write: list[dict[str, Any]] = []
        if previous == "owner" and body.role != "owner":
            write.append(self._owner_count(workspace_id, -1))
        elif previous != "owner" and body.role == "owner":
            write.append(self._owner_count(workspace_id, +1))
        if previous is None:
            write.append(self._put(member, "attribute_not_exists(workspace_id)"))
        else:
            write.append(self._put(member, "#r = :prev", {":prev": previous}))
        if user_id != principal.id:  # the target's own condition covers an owner changing themself
            write.append(self._still_owner(workspace_id, principal.id))
        self._audit(
            "documents.workspace.member_added",
            principal,
            workspace_id,
            write,
            refs={"user_id": user_id},
            payload={"role": body.role, "previous_role": previous},
        )
        return MemberView.model_validate(member)

    def revoke(self, principal: Principal, workspace_id: str, user_id: str) -> Revoked:
        """Remove a member; owners only, never the last owner (``documents.workspace.member_revoked``)."""
        self.require(principal, workspace_id, "owner")
        previous = self._role(workspace_id, user_id)
        if previous is None:
            raise NotFound(f"{user_id} is not a member of workspace {workspace_id}")
        write: list[dict[str, Any]] = []
        if previous == "owner":
            write.append(self._owner_count(workspace_id, -1))
        write.append(
            {
                "Delete": {
                    "TableName": self._table,
                    "Key": workspace_key(workspace_id, member_sk(user_id)),
                    "ConditionExpression": "#r = :prev",
                    "ExpressionAttributeNames": {"#r": "role"},
                    "ExpressionAttributeValues": {":prev": {"S": previous}},
                }
            }
        )
        if user_id != principal.id:
            write.append(self._still_owner(workspace_id, principal.id))
        self._audit(
            "documents.workspace.member_revoked",
            principal,
            workspace_id,
            write,
            refs={"user_id": user_id},
            payload={"previous_role": previous},
        )
        return Revoked(workspace_id=workspace_id, user_id=user_id)

    def set_visibility(self, principal: Principal, workspace_id: str, body: VisibilityChange) -> WorkspaceView:
        """Change a public workspace's visibility and listing; owners only (``.visibility_changed``).

        Hiding a workspace (``visible: false``) also unlists it; listing one needs it visible.
        """
        workspace = self.require(principal, workspace_id, "owner").workspace
        if workspace.kind != "public":
            raise Conflict("only a public workspace has visibility; personal and group ones are members-only")
        visible = workspace.visible if body.visible is None else body.visible
        listed = workspace.listed if body.listed is None else body.listed
        if body.visible is False and body.listed is None:
            listed = False
        if listed and not visible:
            raise InvalidInput("a listed workspace must be visible")
        values = items.to_item({":v": visible, ":l": listed, ":kind": "public"})
        update = "SET visible = :v, listed = :l"
        if listed:
            update += ", listing = :listing"
            values[":listing"] = {"S": LISTED}
        else:
            update += " REMOVE listing"
        header = {
            "Update": {
                "TableName": self._table,
                "Key": workspace_key(workspace_id),
                "UpdateExpression": update,
                "ConditionExpression": "kind = :kind",
                "ExpressionAttributeValues": values,
            }
        }
        self._audit(
            "documents.workspace.visibility_changed",
            principal,
            workspace_id,
            [header, self._still_owner(workspace_id, principal.id)],
            payload={"visible": visible, "listed": listed},
        )
        return workspace.model_copy(update={"visible": visible, "listed": listed})

    def member_guard(self, workspace_id: str, user_id: str, minimum: Role) -> dict[str, Any]:
        """A transaction entry that holds only while ``user_id`` has at least ``minimum`` in the workspace."""
        allowed = [role for role, rank in RANK.items() if rank >= RANK[minimum]]
        names = {f":r{n}": {"S": role} for n, role in enumerate(allowed)}
        return {
            "ConditionCheck": {
                "TableName": self._table,
                "Key": workspace_key(workspace_id, member_sk(user_id)),
                "ConditionExpression": f"#r IN ({', '.join(names)})",
                "ExpressionAttributeNames": {"#r": "role"},
                "ExpressionAttributeValues": names,
            }
        }

    # ---- helpers ---------------------------------------------------------------------------------

    def _audit(
        self,
        action: str,
        principal: Principal,
        workspace_id: str,
        write: list[dict[str, Any]],
        refs: dict[str, str] | None = None,
        payload: dict[str, Any] | None = None,
    ) -> None:
        try:
            self._s.ledger.append(
                AuditEntry(
                    action=action,
                    actor=principal.actor,
                    subject=f"workspace:{workspace_id}",
                    refs=refs or {},
                    payload=payload or {},
                ),
                write,
            )
        except ConditionFailed as exc:
            entry = next(iter(write[exc.index]))
            if entry == "Update" and "owner_count" in str(write[exc.index]["Update"]["UpdateExpression"]):
                raise Conflict("a workspace keeps at least one owner") from None
            raise Conflict("the workspace changed while this was decided; read it again and retry") from None

    def _put(self, item: dict[str, Any], condition: str, values: dict[str, Any] | None = None) -> dict[str, Any]:
        put: dict[str, Any] = {"TableName": self._table, "Item": items.to_item(item), "ConditionExpression": condition}
        if values:
            put["ExpressionAttributeNames"] = {"#r": "role"}
            put["ExpressionAttributeValues"] = items.to_item(values)
        return {"Put": put}

    def _owner_count(self, workspace_id: str, delta: int) -> dict[str, Any]:
        update: dict[str, Any] = {
            "TableName": self._table,
            "Key": workspace_key(workspace_id),
            "UpdateExpression": "SET owner_count = owner_count + :d",
            "ExpressionAttributeValues": {":d": {"N": str(delta)}},
        }
        if delta < 0:
            # Never the last owner: a workspace nobody can manage could never be cleaned up.
            update["ConditionExpression"] = "owner_count > :one"
            update["ExpressionAttributeValues"][":one"] = {"N": "1"}
        return {"Update": update}

    def _still_owner(self, workspace_id: str, user_id: str) -> dict[str, Any]:
        return self.member_guard(workspace_id, user_id, "owner")

    def _header(self, workspace_id: str) -> WorkspaceView | None:
        item = self._db.get_item(TableName=self._table, ConsistentRead=True, Key=workspace_key(workspace_id)).get(
            "Item"
        )
        return _view(item) if item else None

    def _headers(self, workspace_ids: list[str]) -> list[WorkspaceView]:
        """The headers of these workspaces, in the order given (one batch read)."""
        if not workspace_ids:
            return []
        found = self._batch_get([workspace_key(w) for w in workspace_ids])
        by_id = {item["workspace_id"]["S"]: _view(item) for item in found}
        return [by_id[w] for w in workspace_ids if w in by_id]

    def _memberships(self, user_id: str, workspace_ids: list[str]) -> set[str]:
        if not workspace_ids:
            return set()
        found = self._batch_get([workspace_key(w, member_sk(user_id)) for w in workspace_ids])
        return {item["workspace_id"]["S"] for item in found}

    def _batch_get(self, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        pending: dict[str, Any] = {self._table: {"Keys": keys, "ConsistentRead": True}}
        while pending:
            response = self._db.batch_get_item(RequestItems=pending)
            found += response.get("Responses", {}).get(self._table, [])
            pending = response.get("UnprocessedKeys") or {}
        return found

    def _role(self, workspace_id: str, user_id: str) -> Role | None:
        item = self._db.get_item(
            TableName=self._table,
            ConsistentRead=True,
            Key=workspace_key(workspace_id, member_sk(user_id)),
            ProjectionExpression="#r",
            ExpressionAttributeNames={"#r": "role"},
        ).get("Item")
        role = (item or {}).get("role", {}).get("S")
        return role if role in RANK else None

    def _member_query(self, user_id: str, limit: int, after: str | None) -> dict[str, Any]:
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "by_member",
            "KeyConditionExpression": "member_id = :m",
            "ExpressionAttributeValues": {":m": {"S": user_id}},
            "Limit": limit,
        }
        if after is not None:
            request["ExclusiveStartKey"] = {"member_id": {"S": user_id}, **workspace_key(after, member_sk(user_id))}
        return request

    def _member_ids(self, user_id: str, bound: int) -> Iterable[str]:
        after: str | None = None
        count = 0
        while count < bound:
            response = self._db.query(**self._member_query(user_id, min(100, bound - count), after))
            for item in response.get("Items", []):
                count += 1
                yield item["workspace_id"]["S"]
            if "LastEvaluatedKey" not in response:
                return
            after = response["LastEvaluatedKey"]["workspace_id"]["S"]

    def _listed_items(self, bound: int) -> Iterable[dict[str, Any]]:
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "by_listing",
            "KeyConditionExpression": "listing = :l",
            "ExpressionAttributeValues": {":l": {"S": LISTED}},
            "ScanIndexForward": False,
            "Limit": min(100, bound),
        }
        count = 0
        while count < bound:
            response = self._db.query(**request)
            for item in response.get("Items", []):
                count += 1
                yield item
            if "LastEvaluatedKey" not in response:
                return
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def _is_workspace_id(value: str) -> bool:
    return re.fullmatch(WORKSPACE_PATTERN, value) is not None


def _member_item(workspace_id: str, user_id: str, role: Role, now: str, added_by: str) -> dict[str, Any]:
    return {
        "workspace_id": workspace_id,
        "sk": member_sk(user_id),
        "member_id": user_id,
        "user_id": user_id,
        "role": role,
        "added_at": now,
        "added_by": added_by,
    }


def _view(item: dict[str, Any]) -> WorkspaceView:
    workspace_id = item.get("workspace_id", {}).get("S", "?")
    return decoded(
        item,
        lambda v: WorkspaceView.model_validate({k: v[k] for k in WorkspaceView.model_fields if k in v and k != "role"}),
        "workspace",
        workspace_id,
    )


def _list_position(cursor: str | None) -> tuple[str, Any]:
    """Where a listing resumes: ``("member", last workspace id | None)`` or ``("listed", [created_at, id] | None)``."""
    if cursor is None:
        return "member", None
    position = decode_cursor(cursor)
    if isinstance(position, list) and len(position) == 2:
        phase, after = position
        if phase == "member" and isinstance(after, str) and _is_workspace_id(after):
            return "member", after
        if phase == "listed" and after is None:
            return "listed", None
        if (
            phase == "listed"
            and isinstance(after, list)
            and len(after) == 2
            and all(isinstance(a, str) for a in after)
            and _is_workspace_id(after[1])
        ):
            return "listed", after
    raise InvalidInput("cursor is not one this API returned")
