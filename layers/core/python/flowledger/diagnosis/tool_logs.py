"""``query_logs``: a bounded CloudWatch Logs search (``FilterLogEvents``) for the diagnosis agent.

The model names a log group from the allow-list, a window of at most 24 hours, a few terms and a
limit; anything else is refused before a request is made, with a reason the model can act on.

Terms are matched the way CloudWatch matches quoted terms: case-sensitive, verbatim, all of them.
Only one term (the longest safe one) is sent to the service, as a single quoted phrase; every
returned event is then checked here for every term. That keeps the pattern free of anything a term
could smuggle in (``?`` alternatives, ``-`` exclusions, ``{ $.json }`` selectors, regex), and it
matches identically in AWS and in the embedded moto Logs, whose pattern parser understands one
quoted phrase but not several.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, ReadTimeoutError

from flowledger.diagnosis.tools import (
    MAX_OBSERVATION_CHARS,
    MAX_OBSERVATION_ROWS,
    ToolOutcome,
    ToolResult,
    bounded_text,
)
from flowledger.llm.ports import ToolSpec

NAME = "query_logs"
MAX_WINDOW = timedelta(hours=24)
# How far past the server's clock ``end`` may be: clocks disagree a little, a model rounds up.
CLOCK_SKEW = timedelta(minutes=5)
MAX_TERMS = 5
MAX_TERM_CHARS = 100
MAX_LIMIT = MAX_OBSERVATION_ROWS
DEFAULT_LIMIT = 50
# FilterLogEvents may answer pages with few or no events while it scans; never follow more than this.
MAX_PAGES = 10
# One long line must not crowd every other event out of the observation.
MAX_MESSAGE_CHARS = 400
_THROTTLED = frozenset({"ThrottlingException", "LimitExceededException", "ServiceUnavailableException"})
_DENIED = frozenset({"AccessDeniedException", "UnrecognizedClientException"})


class _Refused(Exception):
    """The request was not run; the message is the reason the model reads."""


@dataclass(frozen=True)
class LogQuery:
    """A checked request: an allowed group, a window of at most 24 hours, bounded terms and limit."""

    log_group: str
    start: datetime
    end: datetime
    terms: tuple[str, ...]
    limit: int


def service_filter_pattern(terms: Sequence[str]) -> str:
    """The pattern sent to FilterLogEvents: the longest term as one quoted phrase, or ``""`` (every event).

    A term holding a double quote or a backslash is never sent (no escaping rule is relied on);
    it is still matched here, on the events the service returns.
    """
    sendable = [term for term in terms if '"' not in term and "\\" not in term]
    if not sendable:
        return ""
    return '"' + max(sendable, key=len) + '"'


def matches_every_term(message: str, terms: Sequence[str]) -> bool:
    """True when every term appears in ``message`` verbatim (case-sensitive, as CloudWatch matches)."""
    return all(term in message for term in terms)


class QueryLogsTool:
    """The ``query_logs`` tool over a boto3 CloudWatch Logs client (``AwsClients.logs``)."""

    def __init__(self, logs_client: Any, allowed_groups: Sequence[str], clock: Callable[[], datetime]) -> None:
        self._logs = logs_client
        self._allowed = tuple(dict.fromkeys(allowed_groups))
        self._clock = clock

    @property
    def spec(self) -> ToolSpec:
        group: dict[str, Any] = {
            "type": "string",
            "description": "The log group to search: one of the allowed groups.",
        }
        if self._allowed:  # an empty enum is not a valid schema
            group["enum"] = list(self._allowed)
        return ToolSpec(
            name=NAME,
            description=(
                "Search one CloudWatch Logs group for events in a time window of at most 24 hours. "
                "Returns the matching events (UTC timestamp, log stream, message), oldest first, and whether "
                "more matched than were returned. Terms are matched verbatim and case-sensitively; an event "
                "must contain every term. Allowed log groups: "
                + (", ".join(self._allowed) if self._allowed else "none in this deployment")
                + "."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "log_group": group,
                    "start": {
                        "type": "string",
                        "description": "Start of the window, ISO-8601 in UTC, e.g. 2026-11-30T22:00:00Z.",
                    },
                    "end": {
                        "type": ["string", "null"],
                        "description": "End of the window, ISO-8601 in UTC, at most 24 hours after start; "
                        "null for now.",
                    },
                    "terms": {
                        "type": "array",
                        "items": {"type": "string"},
                        "maxItems": MAX_TERMS,
                        "description": f"Up to {MAX_TERMS} terms of at most {MAX_TERM_CHARS} characters each, "
                        "e.g. an error code or an order id; an empty list matches every event.",
                    },
                    "limit": {
                        "type": ["integer", "null"],
                        "minimum": 1,
                        "maximum": MAX_LIMIT,
                        "description": f"How many events at most (1 to {MAX_LIMIT}); null for {DEFAULT_LIMIT}.",
                    },
                },
                "required": ["log_group", "start", "end", "terms", "limit"],
                "additionalProperties": False,
            },
        )

    def run(self, arguments: dict[str, Any], *, timeout_seconds: float) -> ToolResult:
        """Search the logs; REFUSED for a request outside the bounds (nothing is sent), FAILED when
        CloudWatch Logs does not answer, EMPTY when nothing matched."""
        try:
            query = self._check(arguments)
        except _Refused as refused:
            return ToolResult(ToolOutcome.REFUSED, str(refused))
        deadline = time.monotonic() + timeout_seconds
        events: list[dict[str, Any]] = []
        more = False
        token: str | None = None
        for _ in range(MAX_PAGES):
            try:
                page = self._page(query, token)
            except (ClientError, BotoCoreError) as exc:
                if not events:
                    return ToolResult(ToolOutcome.FAILED, _failure(exc, query.log_group))
                more = True  # what came back before the failure is real; say there may be more
                break
            events += [e for e in page.get("events", []) if matches_every_term(e.get("message", ""), query.terms)]
            token = page.get("nextToken")
            if len(events) > query.limit or not token:
                break
            if time.monotonic() >= deadline:
                more = True
                break
        else:
            more = token is not None  # the page bound ended the search, not the service
        return _result(query, events, more)

    def _check(self, arguments: dict[str, Any]) -> LogQuery:
        """The request as a :class:`LogQuery`, or ``_Refused`` with the reason."""
        group = arguments.get("log_group")
        if not self._allowed:
            raise _Refused("no log group may be searched in this deployment")
        if not isinstance(group, str) or group not in self._allowed:
            shown = repr(group[:80]) if isinstance(group, str) else "missing"
            raise _Refused(f"log group {shown} is not allowed; allowed: {', '.join(self._allowed)}")
        now = self._clock().astimezone(UTC)
        end = now if arguments.get("end") is None else _instant(arguments["end"], "end")
        start = _instant(arguments.get("start"), "start")
        if end > now + CLOCK_SKEW:
            raise _Refused(f"end {_iso(end)} is in the future; it is now {_iso(now)}")
        if start >= end:
            raise _Refused(f"start {_iso(start)} is not before end {_iso(end)}")
        if end - start > MAX_WINDOW:
            hours = (end - start).total_seconds() / 3600
            raise _Refused(f"the window is {hours:.1f} hours; at most 24 hours: move start or end closer")
        return LogQuery(group, start, end, _terms(arguments.get("terms")), _limit(arguments.get("limit")))

    def _page(self, query: LogQuery, token: str | None) -> dict[str, Any]:
        request: dict[str, Any] = {
            "logGroupName": query.log_group,
            "startTime": _millis(query.start),
            "endTime": _millis(query.end),
            # One more than asked for tells whether more matched than were returned.
            "limit": query.limit + 1,
        }
        pattern = service_filter_pattern(query.terms)
        if pattern:
            request["filterPattern"] = pattern
        if token:
            request["nextToken"] = token
        page: dict[str, Any] = self._logs.filter_log_events(**request)
        return page


def _instant(value: Any, name: str) -> datetime:
    if not isinstance(value, str) or not value.strip():
        raise _Refused(f"{name} must be an ISO-8601 UTC time such as 2026-11-30T22:00:00Z")
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise _Refused(f"{name} {value[:40]!r} is not an ISO-8601 time such as 2026-11-30T22:00:00Z") from None
    # A time without an offset is read as UTC, which the schema asks for.
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _terms(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(term, str) for term in value):
        raise _Refused("terms must be a list of strings")
    terms = tuple(dict.fromkeys(term.strip() for term in value if term.strip()))
    if len(terms) > MAX_TERMS:
        raise _Refused(f"{len(terms)} terms; at most {MAX_TERMS}")
    for term in terms:
        if len(term) > MAX_TERM_CHARS:
            raise _Refused(f"a term has {len(term)} characters; at most {MAX_TERM_CHARS}")
        if not term.isprintable():
            raise _Refused("a term holds a control character; a log message is matched on one line")
    return terms


def _limit(value: Any) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise _Refused(f"limit must be an integer from 1 to {MAX_LIMIT}")
    return value


def _millis(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def _iso(instant: datetime) -> str:
    spec = "milliseconds" if instant.microsecond // 1000 else "seconds"
    return instant.astimezone(UTC).replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def _result(query: LogQuery, events: list[dict[str, Any]], more: bool) -> ToolResult:
    # Oldest first across streams, whatever order the pages came in.
    events.sort(key=lambda e: (e.get("timestamp", 0), e.get("logStreamName", ""), e.get("eventId", "")))
    truncated = more or len(events) > query.limit
    rows = [
        {
            "timestamp": _iso(datetime.fromtimestamp(e.get("timestamp", 0) / 1000, UTC)),
            "stream": e.get("logStreamName", ""),
            "message": _message(e.get("message", "")),
        }
        for e in events[: query.limit]
    ]
    # The query as it ran and every event matched, for the flow's step to bound.
    details = {
        "log_group": query.log_group,
        "start": _iso(query.start),
        "end": _iso(query.end),
        "terms": list(query.terms),
        "limit": query.limit,
        "events": list(rows),
        "more_matched": truncated,
    }
    if not rows:
        text = json.dumps({"log_group": query.log_group, "events": [], "truncated": truncated})
        return ToolResult(ToolOutcome.EMPTY, text, rows=0, truncated=truncated, details=details)
    text = _render(query.log_group, rows, truncated)
    # Drop the newest events until the observation fits: whole events, never half a JSON document.
    while len(text) > MAX_OBSERVATION_CHARS and len(rows) > 1:
        rows = rows[: min(len(rows) - 1, max(1, len(rows) * MAX_OBSERVATION_CHARS // len(text)))]
        truncated = True
        text = _render(query.log_group, rows, truncated)
    text, cut = bounded_text(text)
    return ToolResult(ToolOutcome.OK, text, rows=len(rows), truncated=truncated or cut, details=details)


def _render(log_group: str, rows: list[dict[str, str]], truncated: bool) -> str:
    return json.dumps(
        {"log_group": log_group, "events": rows, "truncated": truncated}, ensure_ascii=False, separators=(",", ":")
    )


def _message(message: str) -> str:
    message = message.rstrip("\n")
    return message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 1] + "…"


def _failure(exc: Exception, log_group: str) -> str:
    """One line for the model: which dependency failed and how, never a traceback."""
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", "error"))
        if code in _THROTTLED:
            return f"CloudWatch Logs is throttling requests ({code}); try again later or narrow the window"
        if code == "ResourceNotFoundException":
            return f"log group {log_group} does not exist in CloudWatch Logs (ResourceNotFoundException)"
        if code in _DENIED:
            return f"this deployment may not read log group {log_group} ({code})"
        return f"CloudWatch Logs refused the search ({code})"
    if isinstance(exc, ConnectTimeoutError | ReadTimeoutError):
        return "CloudWatch Logs did not answer in time (timeout)"
    return f"CloudWatch Logs could not be reached ({type(exc).__name__})"
