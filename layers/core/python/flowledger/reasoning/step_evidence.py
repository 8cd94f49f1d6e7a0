"""What a recorded step may carry as evidence, and the helpers that keep it within bounds.

Agents record what a step did in its ``inputs`` (the SQL text, the log query and window, the knowledge
query, the table plan) and ``outputs`` (row counts and first rows, matched log lines, document ids and
excerpts, a model call's token usage and finish reason). Every recorded value is bounded here, in one
place, so a step always fits the API's ``MAX_STEP_PAYLOAD_BYTES`` (64 KB) with room to spare; a value
that was cut says so beside it (``rows_truncated`` with ``total_rows``, ``lines_truncated`` with
``total_lines``, ``sql_truncated``). Summaries never carry any of it: they stay fixed texts with names
and counts, so they pass the summary guard.

Which fields are sealed is the agent's decision (``pii_fields``), made where the step is built.
"""

from __future__ import annotations

import json
import re
from typing import Any

from flowledger.reasoning.models import MAX_STEP_PAYLOAD_BYTES

MAX_RECORDED_ROWS = 20  # first rows of a SQL result or a table answer
MAX_RECORDED_LINES = 20  # matched log lines
MAX_RECORDED_DOCUMENTS = 10  # documents (ids, titles, excerpts) of a lookup or an answer
MAX_RECORDED_CELL_CHARS = 300  # one cell, one log line, one excerpt, one title
MAX_RECORDED_SQL_CHARS = 4096  # the SQL text (4 KB)
MAX_RECORDED_TEXT_CHARS = 1000  # a query, a refusal's reason, a plan's rendering
# What one step's inputs and outputs may hold together: half the API's bound, so sealing (base64 of
# AES-GCM, about a third more) and the step's other attributes never reach it.
MAX_STEP_EVIDENCE_BYTES = MAX_STEP_PAYLOAD_BYTES // 2
ELLIPSIS = "…"
# DynamoDB's number type (store/storable.py refuses anything else); a cell outside it is recorded as text.
_MAX_NUMBER_DIGITS = 38
_MIN_NUMBER, _MAX_NUMBER = 1e-130, 9.99e125

_STRING_LITERAL = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
_NUMBER_LITERAL = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?(?![A-Za-z0-9_])")


def clip(text: str, limit: int = MAX_RECORDED_CELL_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, ending with an ellipsis when it was cut.

    A lone surrogate (which DynamoDB cannot hold, so the whole step would be refused) becomes ``?``.
    """
    text = text if len(text) <= limit else text[: limit - 1] + ELLIPSIS
    return text.encode("utf-8", "replace").decode("utf-8")


def clipped_value(value: Any, limit: int = MAX_RECORDED_CELL_CHARS) -> Any:
    """A cell as recorded: null, booleans and numbers DynamoDB holds exactly as they are; anything else as
    text of at most ``limit`` characters (so a database's odd value never gets the step refused)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and len(str(abs(value))) <= _MAX_NUMBER_DIGITS:
        return value
    if isinstance(value, float) and (value == 0 or _MIN_NUMBER <= abs(value) <= _MAX_NUMBER):
        return value
    if isinstance(value, list | tuple | dict):
        return clip(json.dumps(value, default=str, ensure_ascii=False), limit)
    return clip(str(value), limit)


def first_rows(rows: list[list[Any]], total: int | None = None) -> dict[str, Any]:
    """The first :data:`MAX_RECORDED_ROWS` rows, every cell clipped, with how many there were and whether cut."""
    total = len(rows) if total is None else total
    kept = [[clipped_value(cell) for cell in row] for row in rows[:MAX_RECORDED_ROWS]]
    return {"first_rows": kept, "total_rows": total, "rows_truncated": total > len(kept)}


def first_lines(lines: list[dict[str, Any]], total: int | None = None) -> dict[str, Any]:
    """The first :data:`MAX_RECORDED_LINES` log lines (each value clipped), with the count and whether cut."""
    total = len(lines) if total is None else total
    kept = [{key: clipped_value(value) for key, value in line.items()} for line in lines[:MAX_RECORDED_LINES]]
    return {"matched_lines": kept, "total_lines": total, "lines_truncated": total > len(kept)}


def documents(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Documents as recorded: id, title and excerpt, each clipped, at most :data:`MAX_RECORDED_DOCUMENTS`."""
    return [
        {key: clip(str(document.get(key, ""))) for key in ("document_id", "title", "excerpt") if key in document}
        for document in found[:MAX_RECORDED_DOCUMENTS]
    ]


def sql_text(sql: str) -> dict[str, Any]:
    """The SQL text (at most 4 KB) and whether it was cut."""
    return {"sql": clip(sql, MAX_RECORDED_SQL_CHARS), "sql_truncated": len(sql) > MAX_RECORDED_SQL_CHARS}


def sql_shape(sql: str) -> str:
    """The statement with every string and number literal replaced by ``?``: its shape, without the values.

    A literal may be what the user asked about (a name, a patient's number); the shape is what an
    operator needs to see what ran, without opening a sealed field.
    """
    masked = _NUMBER_LITERAL.sub("?", _STRING_LITERAL.sub("'?'", sql))
    return clip(" ".join(masked.split()), MAX_RECORDED_SQL_CHARS)


def model_call_outputs(reply: Any) -> dict[str, Any]:
    """A model call's token usage, finish reason and model name, as its step records them.

    ``usage_source``: ``server`` when the server reported usage, ``estimated`` when it did not (characters
    over 4), ``none`` when no tokens were counted (the offline model generates none).
    """
    usage = reply.usage
    if getattr(usage, "estimated", False):
        source = "estimated"
    elif usage.total:
        source = "server"
    else:
        source = "none"
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total,
        "usage_source": source,
        "finish_reason": reply.finish_reason or "unknown",
        "model": clip(reply.model or "unknown", 128),
    }


def payload_bytes(inputs: dict[str, Any], outputs: dict[str, Any]) -> int:
    """The size the API measures a step's inputs and outputs by (compact JSON, as ``service.payload_bytes``)."""
    return len(json.dumps({"inputs": inputs, "outputs": outputs}, default=str).encode())


def fitted(inputs: dict[str, Any], outputs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``inputs`` and ``outputs`` within :data:`MAX_STEP_EVIDENCE_BYTES`: the longest lists are halved until they fit.

    The per-value bounds above already keep a step far under it; this is the last guard, so no step is
    refused (413) for its evidence. A halved list is marked ``<name>_truncated`` beside it. It never
    raises: recording must not fail the agent.
    """
    while payload_bytes(inputs, outputs) > MAX_STEP_EVIDENCE_BYTES:
        side, name, values = max(
            ((s, n, v) for s in (inputs, outputs) for n, v in s.items() if isinstance(v, list) and v),
            key=lambda found: len(json.dumps(found[2], default=str)),
            default=(None, "", []),
        )
        if side is None:  # only scalars left, each bounded above: cannot happen; never fail the agent over it
            break
        side[name] = values[: len(values) // 2]
        side[f"{name}_truncated"] = True
    return inputs, outputs
