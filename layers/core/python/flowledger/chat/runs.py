"""The ``runs`` table: one item per turn, plus one header item per session naming its owner.

Run ids are ULIDs, so a session's runs sort by creation time under ``session_id``. A run is
created RUNNING and finished exactly once, conditionally on still being RUNNING: a cancelled run
can never be completed by a late executor result. The header also carries the session's title (its
first query) and its last turn's time, which list the owner's sessions through the sparse ``by_owner``
index.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from flowledger.chat.models import (
    MAX_TITLE_CHARS,
    SESSION_PATTERN,
    Intent,
    ReleaseOutcome,
    RunPage,
    RunStatus,
    RunView,
    SessionPage,
    SessionView,
)
from flowledger.errors import Conflict, Forbidden, InvalidInput, NotFound, SubjectErased
from flowledger.ledger.events import parse_timestamp, timestamp
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.cursors import decode_cursor, encode_cursor
from flowledger.store.envelope import FieldRef, is_sealed

SESSION_HEADER = "#session"
# What a patient's run (and its session's header) holds of their words: sealed under their own key.
SEALED_RUN_FIELDS = ("query", "title", "content", "grounding")


@dataclass(frozen=True)
class LastTurn:
    intent: Intent | None
    query: str


class RunStore:
    def __init__(self, services: Services) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._table = services.aws.table_name("runs")

    def create(
        self,
        session_id: str,
        run_id: str,
        owner: str,
        query: str,
        model: str,
        offline: bool,
        flow_id: str | None = None,
        subject_id: str | None = None,
    ) -> str:
        """Persist the RUNNING run (and the session's owner on its first run) in one request.

        ``flow_id``: the reasoning flow that will record the turn (written when the turn ends).
        ``subject_id``: the patient the owner is (their token named one): the session is theirs to erase, and
        an erased patient's turn is refused (``SubjectErased``) with nothing written.
        """
        now = timestamp(self._s.clock())
        title: Any = session_title(query)
        stored_query: Any = query
        if subject_id:  # a patient's words, sealed under their own key: erasing them leaves nothing readable
            title = self._seal(subject_id, title, session_id, SESSION_HEADER, "title")
            stored_query = self._seal(subject_id, query, session_id, run_id, "query")
        # An update, not a put: the header keeps when the session began and its first question (its
        # title), and session_owner/last_active_at put it in the owner's session list (by_owner).
        header = {
            "Update": {
                "TableName": self._table,
                "Key": {"session_id": {"S": session_id}, "run_id": {"S": SESSION_HEADER}},
                "UpdateExpression": "SET #o = :owner, session_owner = :owner, last_active_at = :now, "
                "created_at = if_not_exists(created_at, :now), title = if_not_exists(title, :title)"
                + (", session_subject = :subject" if subject_id else ""),
                "ConditionExpression": "attribute_not_exists(session_id) OR #o = :owner",
                "ExpressionAttributeNames": {"#o": "owner"},
                "ExpressionAttributeValues": items.to_item(
                    {":owner": owner, ":now": now, ":title": title} | ({":subject": subject_id} if subject_id else {})
                ),
            }
        }
        run = {
            "Put": {
                "TableName": self._table,
                "Item": items.to_item(
                    {
                        "session_id": session_id,
                        "run_id": run_id,
                        "owner": owner,
                        "query": stored_query,
                        **({"subject": subject_id} if subject_id else {}),
                        "status": RunStatus.RUNNING.value,
                        "created_at": now,
                        "model": model,
                        "offline_model": offline,
                        **({"flow_id": flow_id} if flow_id else {}),
                    }
                ),
                "ConditionExpression": "attribute_not_exists(run_id)",
            }
        }
        fence = [self._s.subject_keys.fence(subject_id)] if subject_id else []
        try:
            self._db.transact_write_items(TransactItems=[header, run, *fence])
        except ClientError as exc:
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if reasons[:1] == ["ConditionalCheckFailed"]:
                raise Forbidden("this session belongs to another user") from None
            if reasons[2:3] == ["ConditionalCheckFailed"]:
                raise SubjectErased("your data was erased") from None
            raise
        return now

    def finish(
        self,
        session_id: str,
        run_id: str,
        *,
        status: RunStatus,
        release: ReleaseOutcome,
        intent: Intent | None,
        published_result: dict[str, Any] | None,
        content: dict[str, Any] | None,
        started: str,
        budget_usage: dict[str, Any],
        grounding: dict[str, Any] | None = None,
        reason_code: str | None = None,
        model_modes: dict[str, str] | None = None,
        subject_id: str | None = None,
    ) -> bool:
        """Record the one terminal outcome; False if the run had already ended (cancelled).

        ``grounding``: the continuity decision (its basis, reasons, per-source outcomes, table plans).
        ``reason_code``: a model failure's code, for operators; ``model_modes``: how the model was asked.
        ``subject_id``: the patient whose turn it is: the answer and the grounding are sealed under their key.
        """
        if subject_id:
            content = self._seal(subject_id, content, session_id, run_id, "content") if content else content
            grounding = self._seal(subject_id, grounding, session_id, run_id, "grounding") if grounding else grounding
        now = self._s.clock()
        values: dict[str, Any] = {
            ":status": status.value,
            ":release": release.value,
            ":finished": timestamp(now),
            ":duration": int((now - parse_timestamp(started)).total_seconds() * 1000),
            ":budget": budget_usage,
            ":running": RunStatus.RUNNING.value,
        }
        update = (
            "SET #s = :status, release_outcome = :release, finished_at = :finished, duration_ms = :duration, "
            "budget_usage = :budget"
        )
        if intent is not None:
            update += ", intent = :intent"
            values[":intent"] = intent.value
        if content is not None:
            update += ", content = :content"
            values[":content"] = content
        if grounding is not None:
            update += ", grounding = :grounding"
            values[":grounding"] = grounding
        if reason_code is not None:
            update += ", reason_code = :reason"
            values[":reason"] = reason_code
        if model_modes is not None:
            update += ", model_modes = :modes"
            values[":modes"] = model_modes
        if published_result is not None:
            # Only a safe, published diagnosis enters the sparse PreviousTurn index.
            update += ", published_result = :published, safe_diagnosis_session_id = :session"
            values[":published"] = json.dumps(published_result, sort_keys=True)
            values[":session"] = session_id
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"session_id": {"S": session_id}, "run_id": {"S": run_id}},
                UpdateExpression=update,
                ConditionExpression="#s = :running",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues=items.to_item(values),
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def forget_flow(self, session_id: str, run_id: str) -> None:
        """Drop the run's flow id: its flow could not be recorded, and the history must not name it."""
        self._db.update_item(
            TableName=self._table,
            Key={"session_id": {"S": session_id}, "run_id": {"S": run_id}},
            UpdateExpression="REMOVE flow_id",
            ConditionExpression="attribute_exists(run_id)",
        )

    def cancel(self, owner: str, run_id: str) -> RunView:
        """Cancel a RUNNING run of the caller's; 409 when it already ended."""
        found = self._db.query(
            TableName=self._table,
            IndexName="by_run",
            KeyConditionExpression="run_id = :r",
            ExpressionAttributeValues={":r": {"S": run_id}},
        ).get("Items", [])
        if not found:
            raise NotFound(f"no run {run_id}")
        session_id = found[0]["session_id"]["S"]
        run = self.get(session_id, run_id)
        if run is None or self._owner(session_id) != owner:
            raise NotFound(f"no run {run_id}")  # another user's run does not exist for this caller
        if not self.finish(
            session_id,
            run_id,
            status=RunStatus.CANCELLED,
            release=ReleaseOutcome.CANCELLED,
            intent=run.intent,
            published_result=None,
            content=None,
            started=run.created_at,
            budget_usage=run.budget_usage or {},
        ):
            raise Conflict(f"run {run_id} already ended")
        cancelled = self.get(session_id, run_id)
        assert cancelled is not None
        return cancelled

    def status(self, session_id: str, run_id: str) -> RunStatus:
        item = self._db.get_item(
            TableName=self._table,
            ConsistentRead=True,
            ProjectionExpression="#s",
            ExpressionAttributeNames={"#s": "status"},
            Key={"session_id": {"S": session_id}, "run_id": {"S": run_id}},
        ).get("Item")
        return RunStatus(item["status"]["S"]) if item else RunStatus.RUNNING

    def is_cancelled(self, session_id: str, run_id: str) -> bool:
        """Whether the run was cancelled (through the cancel route): one consistent read of its status."""
        item = self._db.get_item(
            TableName=self._table,
            ConsistentRead=True,
            Key={"session_id": {"S": session_id}, "run_id": {"S": run_id}},
            ProjectionExpression="#s",
            ExpressionAttributeNames={"#s": "status"},
        ).get("Item")
        return bool(item) and item["status"]["S"] == RunStatus.CANCELLED.value

    def get(self, session_id: str, run_id: str) -> RunView | None:
        item = self._db.get_item(
            TableName=self._table, ConsistentRead=True, Key={"session_id": {"S": session_id}, "run_id": {"S": run_id}}
        ).get("Item")
        return RunView.model_validate(self._opened(items.from_item(item))) if item else None

    def _seal(self, subject_id: str, value: Any, session_id: str, run_id: str, field: str) -> dict[str, str]:
        return self._s.sealer.seal_for(subject_id, value, FieldRef(session_id, run_id, "run", field))

    def _opened(self, values: dict[str, Any]) -> dict[str, Any]:
        """A run or header item's values with a patient's sealed texts opened (``SubjectErased`` once erased)."""
        session_id, run_id = values["session_id"], values["run_id"]
        for field in SEALED_RUN_FIELDS:
            sealed = values.get(field)
            if isinstance(sealed, dict) and is_sealed(sealed) and isinstance(sealed.get("subject"), str):
                ref = FieldRef(session_id, run_id, "run", field)
                values[field] = self._s.sealer.open_for(sealed["subject"], sealed, ref)
        return values

    def last_turn(self, session_id: str, before_run: str) -> LastTurn | None:
        """The session's run before ``before_run`` (any outcome): the router's optional context."""
        response = self._db.query(
            TableName=self._table,
            KeyConditionExpression="session_id = :s AND run_id < :r",
            ExpressionAttributeValues={":s": {"S": session_id}, ":r": {"S": before_run}},
            ScanIndexForward=False,
            Limit=2,
            ProjectionExpression="run_id, intent, #q",
            ExpressionAttributeNames={"#q": "query"},
        )
        for item in response.get("Items", []):
            if item["run_id"]["S"] != SESSION_HEADER and "query" in item:
                values = self._opened({"session_id": session_id, **items.from_item(item)})
                intent = values.get("intent")
                return LastTurn(Intent(intent) if intent else None, values["query"])
        return None

    def latest_safe_diagnosis(self, session_id: str) -> str | None:
        """The raw published_result of the session's latest safe diagnosis run (one indexed query)."""
        response = self._db.query(
            TableName=self._table,
            IndexName="safe_diagnosis",
            KeyConditionExpression="safe_diagnosis_session_id = :s",
            ExpressionAttributeValues={":s": {"S": session_id}},
            ScanIndexForward=False,
            Limit=1,
        )
        found = response.get("Items", [])
        return found[0].get("published_result", {}).get("S") if found else None

    def list_runs(self, owner: str, session_id: str, limit: int, cursor: str | None) -> RunPage:
        if self._owner(session_id) != owner:
            raise NotFound(f"no session {session_id}")
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "session_id = :s AND begins_with(run_id, :run)",
            "ExpressionAttributeValues": {":s": {"S": session_id}, ":run": {"S": "run_"}},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if cursor:
            request["ExclusiveStartKey"] = {"session_id": {"S": session_id}, "run_id": {"S": _run_from(cursor)}}
        response = self._db.query(**request)
        runs = [
            RunView.model_validate(self._opened(items.from_item(i)))
            for i in response.get("Items", [])
            if i["run_id"]["S"] != SESSION_HEADER
        ]
        last = response.get("LastEvaluatedKey")
        return RunPage(
            runs=runs, next_cursor=base64.urlsafe_b64encode(last["run_id"]["S"].encode()).decode() if last else None
        )

    def list_sessions(self, owner: str, limit: int, cursor: str | None) -> SessionPage:
        """The owner's sessions, most recently active first: one query on the sparse by_owner index."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "by_owner",
            "KeyConditionExpression": "session_owner = :o",
            "ExpressionAttributeValues": {":o": {"S": owner}},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if cursor:
            session_id, last_active_at = _session_position(cursor)
            # The partition is always the caller's: a cursor cannot lead into another user's sessions.
            request["ExclusiveStartKey"] = {
                "session_owner": {"S": owner},
                "last_active_at": {"S": last_active_at},
                "session_id": {"S": session_id},
                "run_id": {"S": SESSION_HEADER},
            }
        response = self._db.query(**request)
        sessions = [
            SessionView(
                session_id=item["session_id"],
                title=item.get("title", ""),
                created_at=item.get("created_at", item["last_active_at"]),
                last_active_at=item["last_active_at"],
            )
            for item in (self._opened(items.from_item(i)) for i in response.get("Items", []))
        ]
        last = response.get("LastEvaluatedKey")
        next_cursor = encode_cursor([last["session_id"]["S"], last["last_active_at"]["S"]]) if last else None
        return SessionPage(sessions=sessions, next_cursor=next_cursor)

    def _owner(self, session_id: str) -> str | None:
        item = self._db.get_item(
            TableName=self._table,
            ConsistentRead=True,
            Key={"session_id": {"S": session_id}, "run_id": {"S": SESSION_HEADER}},
        ).get("Item")
        return item["owner"]["S"] if item else None


def session_title(query: str) -> str:
    """A session's title: its first query on one line, cut to ``MAX_TITLE_CHARS``."""
    return " ".join(query.split())[:MAX_TITLE_CHARS]


def _session_position(cursor: str) -> tuple[str, str]:
    position = decode_cursor(cursor)
    if (
        not isinstance(position, list)
        or len(position) != 2
        or not all(isinstance(part, str) for part in position)
        or re.fullmatch(SESSION_PATTERN, position[0]) is None
        or not position[1]
    ):
        raise InvalidInput("cursor is not one this API returned")
    return position[0], position[1]


def _run_from(cursor: str) -> str:
    try:
        run_id = base64.urlsafe_b64decode(cursor.encode()).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidInput("cursor is not one this API returned") from None
    if not run_id.startswith("run_"):
        raise InvalidInput("cursor is not one this API returned")
    return run_id
