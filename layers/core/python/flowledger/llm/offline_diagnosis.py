"""The offline model as a diagnosis agent: a fixed, explainable investigation plan over the tools offered.

No reasoning happens here; the plan is the one an on-call engineer would start with, and every fact
the draft quotes is copied from an observation, so the release guards can check it:

1. the database, when ``query_sql`` describes ``orders`` and ``deployments`` tables: failed orders by
   failure code with their first and last time, and the latest deployments (one parallel batch);
2. the logs, when ``query_logs`` is offered: ERROR events of the log group that names the latest
   deployed service, in the window of the failures (else the last 24 hours);
3. the knowledge base: the query and the error code found;
4. a draft whose claims cite the observations they copy from, or ``missing_context`` when neither the
   database nor the logs could be read.

The semantic judgement (``semantic_judgement``) accepts a draft when every claim has evidence and
every number it quotes is in that evidence.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from flowledger.llm.ports import Message, Reply, ToolCall, ToolSpec

NAME = "flowledger-offline-v1"
FAILURES_SQL = (
    "SELECT failure_code, COUNT(*) AS failed_orders, MIN(created_at) AS first_failure, "
    "MAX(created_at) AS last_failure FROM orders WHERE status = 'failed' "
    "GROUP BY failure_code ORDER BY failed_orders DESC"
)
DEPLOYMENTS_SQL = "SELECT service, version, deployed_at, change FROM deployments ORDER BY deployed_at DESC LIMIT 3"
_CODE = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
_NUMBER = re.compile(r"\d+")
WINDOW_MARGIN = timedelta(minutes=10)


def next_agent_turn(messages: list[Message], tools: list[ToolSpec]) -> Reply:
    """The next step of the fixed plan, given the conversation so far and the tools offered."""
    offered = {tool.name: tool for tool in tools}
    query = _query(messages)
    seen = _observations(messages)
    done = {(o["tool"], o["step"]) for o in seen}
    sql = offered.get("query_sql")
    if sql and _describes(sql, "orders", "deployments") and ("query_sql", "failures") not in done:
        return _calls(
            ("query_sql", {"sql": FAILURES_SQL}, "failures"),
            ("query_sql", {"sql": DEPLOYMENTS_SQL}, "deployments"),
        )
    if "query_logs" in offered and ("query_logs", "errors") not in done:
        return _calls(("query_logs", _log_arguments(offered["query_logs"], seen), "errors"))
    if "lookup_knowledge" in offered and ("lookup_knowledge", "runbook") not in done:
        code = next(iter(_error_codes(seen)), "")
        return _calls(("lookup_knowledge", {"query": f"{query} {code}".strip()[:500]}, "runbook"))
    return Reply(data=_draft(seen), model=NAME)


def judge(request: dict[str, Any]) -> dict[str, Any]:
    """Supported when every claim has evidence and every number it quotes appears in that evidence."""
    claims = request.get("claims") or []
    supported = bool(claims)
    for claim in claims:
        evidence = " ".join(str(e) for e in claim.get("evidence") or [])
        numbers = _NUMBER.findall(str(claim.get("text", "")))
        supported = supported and bool(evidence) and all(n in evidence for n in numbers)
    return {"supported": supported, "reasons": "offline check: numbers quoted against the cited evidence"}


# ---- reading the conversation ------------------------------------------------------------------


def _query(messages: list[Message]) -> str:
    for message in messages:
        if message.role == "user":
            try:
                return str(json.loads(message.content).get("query", ""))
            except (ValueError, AttributeError):
                return message.content
    return ""


def _observations(messages: list[Message]) -> list[dict[str, Any]]:
    """Each tool result so far, with the call that asked for it and the plan step it answered."""
    calls = {call.id: call for message in messages for call in message.tool_calls}
    seen = []
    for message in messages:
        if message.role != "tool" or message.tool_call_id not in calls:
            continue
        call = calls[message.tool_call_id]
        try:
            body = json.loads(message.content)
            result = json.loads(body["result"]) if body.get("outcome") in ("ok", "empty") else None
        except (ValueError, KeyError, TypeError):
            body, result = {}, None
        seen.append(
            {
                "tool": call.name,
                "step": call.id.rsplit("-", 1)[-1],
                "arguments": call.arguments,
                "id": body.get("observation_id"),
                "result": result if isinstance(result, dict) else None,
            }
        )
    return seen


def _describes(tool: ToolSpec, *tables: str) -> bool:
    text = tool.description.lower()
    return all(re.search(rf"\b{t}\b", text) for t in tables)


def _calls(*planned: tuple[str, dict[str, Any], str]) -> Reply:
    # The plan step rides in the call id, so the next turn knows which steps were answered.
    calls = tuple(ToolCall(f"call_offline_{i}-{step}", name, args) for i, (name, args, step) in enumerate(planned))
    return Reply(tool_calls=calls, model=NAME)


def _rows(seen: list[dict[str, Any]], step: str) -> tuple[str | None, list[dict[str, Any]]]:
    for o in seen:
        if o["step"] == step and o["result"]:
            result = o["result"]
            rows = result.get("rows") or result.get("events") or result.get("documents") or []
            columns = result.get("columns")
            if isinstance(columns, list):  # query_sql: rows are lists in the order of their columns
                rows = [dict(zip(columns, row, strict=False)) for row in rows if isinstance(row, list)]
            return o["id"], [r for r in rows if isinstance(r, dict)]
    return None, []


def _error_codes(seen: list[dict[str, Any]]) -> list[str]:
    _, events = _rows(seen, "errors")
    counts = Counter(code for e in events for code in _CODE.findall(str(e.get("message", ""))))
    return [code for code, _ in counts.most_common()]


def _parse_time(value: Any) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _log_arguments(tool: ToolSpec, seen: list[dict[str, Any]]) -> dict[str, Any]:
    properties = tool.parameters.get("properties", {})
    groups = list(properties.get("log_group", {}).get("enum", []))
    _, deployments = _rows(seen, "deployments")
    service = str(deployments[0].get("service", "")) if deployments else ""
    group = next((g for g in groups if g.rsplit("/", 1)[-1] and g.rsplit("/", 1)[-1] in service), None)
    _, failures = _rows(seen, "failures")
    times = [
        t for row in failures for t in (_parse_time(row.get("first_failure")), _parse_time(row.get("last_failure")))
    ]
    known = [t for t in times if t is not None]
    end = datetime.now(UTC)
    start = end - timedelta(hours=24)
    if known:
        start, end = min(known) - WINDOW_MARGIN, min(max(known) + WINDOW_MARGIN, end)
    arguments: dict[str, Any] = {
        "log_group": group or (groups[0] if groups else ""),
        "start": start.isoformat().replace("+00:00", "Z"),
        "end": end.isoformat().replace("+00:00", "Z"),
        "terms": ["ERROR"],
        "limit": 50,
    }
    return {name: arguments.get(name) for name in properties} if properties else arguments


# ---- the draft ---------------------------------------------------------------------------------


def _draft(seen: list[dict[str, Any]]) -> dict[str, Any]:
    claims: list[dict[str, Any]] = []
    sentences: list[str] = []
    failures_id, failures = _rows(seen, "failures")
    first_failure = None
    if failures:
        top = failures[0]
        first_failure = _parse_time(top.get("first_failure"))
        text = (
            f"Between {top.get('first_failure')} and {top.get('last_failure')}, "
            f"{top.get('failed_orders')} orders failed with {top.get('failure_code')}."
        )
        claims.append({"text": text, "observation_ids": [failures_id]})
        sentences.append(text)
    errors_id, events = _rows(seen, "errors")
    codes = _error_codes(seen)
    if events and codes:
        first = next(e for e in events if codes[0] in str(e.get("message", "")))
        group = next((o["arguments"].get("log_group") for o in seen if o["step"] == "errors"), "the logs")
        text = f"In the same window {group} logged {codes[0]}, first at {first.get('timestamp')}."
        claims.append({"text": text, "observation_ids": [errors_id]})
        sentences.append(text)
    deployments_id, deployments = _rows(seen, "deployments")
    before = [d for d in deployments if _before(d.get("deployed_at"), first_failure)]
    if before and (failures or events):
        latest = before[0]
        text = (
            f"The last deployment before the failures was {latest.get('service')} {latest.get('version')} "
            f"at {latest.get('deployed_at')}: {latest.get('change')}."
        )
        claims.append({"text": text, "observation_ids": [deployments_id]})
        sentences.append(text)
    runbook_id, documents = _rows(seen, "runbook")
    if documents and claims:
        title = documents[0].get("title")
        claims.append({"text": f'The runbook to follow is "{title}".', "observation_ids": [runbook_id]})
    if not claims:
        # Nothing to cite: say which sources gave nothing (not offered, refused or empty).
        missing = [name for name, rows in (("database", failures), ("logs", events)) if not rows]
        return {
            "status": "missing_context",
            "conclusion": None,
            "claims": [],
            "scope": "",
            "limitations": "",
            "missing": missing,
        }
    return {
        "status": "concluded",
        "conclusion": " ".join(sentences),
        "claims": claims,
        "scope": "Failed orders, recent deployments and error logs around the failures",
        "limitations": "Composed by the offline model from what the tools returned: correlation, not a proven cause.",
        "missing": [],
    }


def _before(value: Any, moment: datetime | None) -> bool:
    """True when ``value`` is a time at or before ``moment`` (any time counts when ``moment`` is unknown)."""
    parsed = _parse_time(value)
    return parsed is not None and (moment is None or parsed <= moment)
