"""How ``flowledger chat`` prints a turn: the streamed events, tables, sources and the flow's console link."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

from flowledger.cli.failures import CommandFailed, error_line
from flowledger.cli.text import shorten

MAX_SOURCES_SHOWN = 5  # the sources line stays one line; the rest is counted
MAX_CLI_CELL_CHARS = 40


def sources_line(context: dict[str, Any]) -> str:
    """One line for an answer's source context: each source, how it came in and what became of it.

    ``  sources: demo-sales.csv v1 (selected, tabular, read) · decision tabular``; a partial or
    failed read and a coverage under 100 % are shown with the source, so a stale answer is visible.
    """
    shown = []
    used = list(context.get("sources") or [])
    for source in used[:MAX_SOURCES_SHOWN]:
        name = str(source.get("file_name") or source.get("document_id"))
        if source.get("version") is not None:
            name += f" v{source['version']}"
        notes = [source.get("how"), source.get("engine"), source.get("outcome")]
        if source.get("evidence_status") not in (None, "completed"):
            notes.append(source["evidence_status"])
        coverage = source.get("coverage")
        if isinstance(coverage, int | float) and coverage < 1:
            notes.append(f"coverage {coverage:.0%}")
        # An answer from the conversation says "history" once, not as both its basis and its engine.
        shown.append(f"{name} ({', '.join(dict.fromkeys(str(n) for n in notes if n))})")
    if len(used) > MAX_SOURCES_SHOWN:
        shown.append(f"+{len(used) - MAX_SOURCES_SHOWN} more")
    return f"  sources: {', '.join(shown) or 'none'} · decision {context.get('decision')}"


def flow_line(flow_id: object, base_url: str | None) -> str:
    """The turn's flow and where the console shows it; says so when the turn was not recorded."""
    if not isinstance(flow_id, str):
        return "  flow: not recorded (flow capture is off here, or recording failed)"
    link = f"  {base_url.rstrip('/')}/console/flows/{flow_id}" if base_url else ""
    return f"  flow: {flow_id}{link}"


def table_lines(table: dict[str, Any]) -> list[str]:
    """A table answer as aligned text: a header, a rule, its rows (numbers right-aligned), and how many
    of how many rows when they were cut."""
    columns = [str(name) for name in table.get("columns") or []]
    rows = [["" if cell is None else shorten(str(cell), MAX_CLI_CELL_CHARS) for cell in row] for row in table["rows"]]
    numeric = [all(_is_number(row[i]) for row in table["rows"] if row[i] is not None) for i in range(len(columns))]
    widths = [max([len(name), *(len(row[i]) for row in rows)]) for i, name in enumerate(columns)]

    def line(cells: list[str]) -> str:
        padded = [c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  " + "  ".join(padded).rstrip()

    lines = [line(columns), "  " + "  ".join("-" * w for w in widths), *(line(row) for row in rows)]
    shown, total = table.get("rows_shown", len(rows)), table.get("total_rows", len(rows))
    if shown < total:
        lines.append(f"  ({shown} of {total} rows shown)")
    return lines


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def print_chat_stream(lines: Iterable[str], base_url: str | None = None) -> int:
    """Print a turn's events as they arrive; 1 unless the stream ends with ``done``.

    ``base_url``: the server's, for the console link of the turn's flow (``<base>/console/flows/<id>``).
    """
    kind, outcome = "", None
    for line in lines:
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            try:
                data = json.loads(line[6:])
            except ValueError:
                raise CommandFailed(f"the server sent an unreadable {kind or 'event'} frame") from None
            if kind == "error":
                error_line(f"{data.get('code')}: {data.get('message')}")
            else:
                _print_chat_event(kind, data)
            if kind in ("done", "error") and "flow_id" in data:
                print(flow_line(data.get("flow_id"), base_url), file=sys.stderr)
            outcome = kind if kind in ("done", "error") else outcome
    if outcome is None:
        error_line("the stream ended before the answer was done")
    return 0 if outcome == "done" else 1


def _print_chat_event(kind: str, data: dict[str, object]) -> None:
    if kind == "start":
        print(f"[session {data['session_id']}  run {data['run_id']}]", file=sys.stderr)
    elif kind == "status":
        print(f"  … {data['code']}", file=sys.stderr)
    elif kind == "content":
        content = data["content"]
        assert isinstance(content, dict)
        print(content["text"])
        for table in content.get("tables") or []:
            print("\n".join(table_lines(table)))
        for reference in content.get("references") or []:
            version = f" v{reference['version']}" if reference.get("version") is not None else ""
            print(f"  [{reference['document_id']}{version}] {reference['title']}")
        if content.get("limitations"):
            print(f"  ({content['limitations']})")
        if isinstance(content.get("source_context"), dict):
            sys.stdout.flush()  # after the references, also when both streams go to one terminal
            print(sources_line(content["source_context"]), file=sys.stderr)
    elif kind == "done":
        print(f"[{data['status']} {data['intent']} via {data['model']}]", file=sys.stderr)
