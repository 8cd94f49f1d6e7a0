"""Runs the card's turns through the real chat path: a private ``flowledger serve`` on a temporary data
directory (the demo documents, incident and table, as every new store has them), asked over HTTP as any
client asks, each run then read back from the run history (status, intent, reason code, tokens).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from flowledger.errors import FlowledgerError
from flowledger.llm.output_checks import degenerate_loop, template_token
from flowledger.modelcard.card import TurnResult
from flowledger.modelcard.turns import Turn

START_SECONDS = 180  # the first start builds the demo store and warms a worker
TURN_SECONDS = 600  # a small model on one core can take minutes for a diagnosis
STOP_SECONDS = 15
CARD_USER = "model-card"
_DEMO_TABLE = re.compile(r"demo table\s+\S+ (dc_[0-9A-Z]{26})")


class CardFailed(FlowledgerError):
    """The card could not be made: the private server did not start, or stopped answering."""

    code = "command_failed"


class PrivateServer:
    """``flowledger serve`` of the card's own, on a free port and a data directory deleted afterwards."""

    def __init__(self, base_url: str, data_dir: Path, log: Path, process: subprocess.Popen[bytes]) -> None:
        self.base_url, self.data_dir, self.log, self.process = base_url, data_dir, log, process

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def token(self) -> str:
        from flowledger.local.datadir import DataDir

        return DataDir(self.data_dir).token(CARD_USER, ["chat", "documents"], ttl_seconds=6 * 3600)

    def demo_table(self) -> str | None:
        found = _DEMO_TABLE.findall(self.output())
        return found[-1] if found else None


@contextmanager
def private_server(model_environment: dict[str, str]) -> Iterator[PrivateServer]:
    """A started ``flowledger serve`` whose model settings are ``model_environment`` (none: the offline model)."""
    scratch = Path(tempfile.mkdtemp(prefix="flowledger-card-"))
    port = _free_port()
    # The machine's AWS and model settings stay out: the store is the embedded one, the model the card's.
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OPENAI_"))}
    environment.pop("FLOWLEDGER_CHAT_MODEL", None)
    command = [sys.executable, "-m", "flowledger.cli", "serve", "--data-dir", str(scratch / "data")]
    command += ["--port", str(port), "--workers", "1"]
    log = scratch / "serve.log"
    with log.open("wb") as sink:
        # The command is this interpreter and fixed arguments; only the environment carries the user's settings.
        process = subprocess.Popen(  # noqa: S603
            command, stdout=sink, stderr=subprocess.STDOUT, env=environment | model_environment
        )
    server = PrivateServer(f"http://127.0.0.1:{port}", scratch / "data", log, process)
    try:
        _wait_ready(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(scratch, ignore_errors=True)


def _wait_ready(server: PrivateServer) -> None:
    deadline = time.monotonic() + START_SECONDS
    while "\nready in " not in server.output():
        if server.process.poll() is not None or time.monotonic() > deadline:
            last = " | ".join(server.output().strip().splitlines()[-3:])
            raise CardFailed(f"the card's private flowledger serve did not start: {last or 'no output'}")
        time.sleep(0.2)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_turns(
    server: PrivateServer, turns: list[Turn], progress: Callable[[int, TurnResult], None] = lambda n, r: None
) -> list[TurnResult]:
    """Every turn in order (a follow-up continues its turn's session); ``progress`` hears of each as it ends."""
    sessions: dict[str, str] = {}
    results: list[TurnResult] = []
    headers = {"Authorization": f"Bearer {server.token()}"}
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=TURN_SECONDS) as client:
        for number, turn in enumerate(turns, 1):
            try:
                result = _cancelled(client, turn) if turn.cancel else _asked(client, turn, sessions, server)
            except httpx.TransportError as exc:
                raise CardFailed(f"the card's private server stopped answering at turn {turn.id}: {exc}") from None
            results.append(result)
            progress(number, result)
    return results


def _asked(client: httpx.Client, turn: Turn, sessions: dict[str, str], server: PrivateServer) -> TurnResult:
    body: dict[str, Any] = {"query": turn.query}
    if turn.select == "demo_table":
        table = server.demo_table()
        if table is None:
            return _failed(turn, "no demo table", "the private server has no demo table to select")
        body |= {"selection_mode": "selected", "document_ids": [table]}
    if turn.follows is not None:
        if turn.follows not in sessions:
            return _failed(turn, "skipped", f"turn {turn.follows}, which this one follows, made no session")
        body["session_id"] = sessions[turn.follows]
    started = time.monotonic()
    response = client.post("/api/chat", json=body, headers={"Accept": "application/json"})
    seconds = round(time.monotonic() - started, 3)
    outcome = _json(response)
    if response.status_code != 200:
        return _failed(turn, f"HTTP {response.status_code}", _error(outcome), seconds)
    if outcome.get("session_id"):
        sessions[turn.id] = str(outcome["session_id"])
    run = _stored_run(client, outcome)
    return _judged(turn, outcome, run, seconds)


def _judged(turn: Turn, outcome: dict[str, Any], run: dict[str, Any], seconds: float) -> TurnResult:
    status = str(run.get("status") or outcome.get("status") or "unknown")
    intent = run.get("intent") or outcome.get("intent")
    reason = run.get("reason_code")
    content = outcome.get("content") or {}
    published = json.dumps(content)
    # The adapter refuses junk before anything is published; junk in a published answer would be a defect.
    leaked = bool(template_token(published) or degenerate_loop(str(content.get("text") or "")))
    junk = reason == "model_degenerate_output" or leaked
    why = ""
    if turn.capability == "routing":
        if intent != turn.intent:
            why = f"routed to {intent or 'nothing'} ({_ended(status, outcome, reason)}), not {turn.intent}"
    elif leaked:
        why = "published a template token or a loop"
    elif status != "SUCCESS":
        why = _ended(status, outcome, reason)
    elif turn.intent is not None and intent != turn.intent:
        why = f"routed to {intent}, not {turn.intent}"
    elif not str(content.get("text") or "").strip():
        why = "answered nothing"
    elif turn.references and not content.get("references"):
        why = "cited no document"
    elif turn.capability == "table" and not _read_the_table(content):
        why = "answered without the table (no table result, no answer from the conversation's)"
    return _result(turn, run | {"intent": intent}, status, why, seconds, junk=junk, published_junk=leaked)


def _read_the_table(content: dict[str, Any]) -> bool:
    """A table turn's answer computed on the table, or (a follow-up) answered from the conversation that did."""
    decision = (content.get("source_context") or {}).get("decision")
    return bool(content.get("tables")) or decision in ("tabular", "both", "history")


def _cancelled(client: httpx.Client, turn: Turn) -> TurnResult:
    """The turn streamed and cancelled once it started: the stream and the stored run must tell one story
    (cancelled both, or, when the turn ended before the cancel arrived, a 409 and that ending)."""
    events: list[dict[str, Any]] = []
    started_at = time.monotonic()
    answered: list[int] = []

    def cancel(run_id: str) -> None:
        answered.append(client.post(f"/api/chat/runs/{run_id}/cancel").status_code)

    canceller: threading.Thread | None = None
    with client.stream("POST", "/api/chat", json={"query": turn.query}) as response:
        if response.status_code != 200:
            response.read()
            return _failed(turn, f"HTTP {response.status_code}", _error(_json(response)))
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line.removeprefix("data: "))
            events.append(event)
            if event.get("type") == "start" and canceller is None:
                canceller = threading.Thread(target=cancel, args=(str(event["run_id"]),))
                canceller.start()
    if canceller is not None:
        canceller.join(STOP_SECONDS)
    seconds = round(time.monotonic() - started_at, 3)
    if not events or events[0].get("type") != "start":
        return _failed(turn, "no start", "the stream did not begin with its start event", seconds)
    start, last = events[0], events[-1]
    run = _stored_run(client, start)
    status = str(run.get("status") or "unknown")
    code = answered[0] if answered else None
    if code == 200:
        ok = status == "CANCELLED" and (last.get("type"), last.get("code")) == ("error", "CANCELLED")
        why = "" if ok else f"cancel answered 200 but the run ended {status} and the stream with {last.get('type')}"
    elif code == 409:
        ok = status != "CANCELLED"
        why = "" if ok else "cancel answered 409 but the run is CANCELLED"
    else:
        why = f"cancel answered {code}"
    return _result(turn, run, status, why, seconds, junk=run.get("reason_code") == "model_degenerate_output")


def _result(
    turn: Turn, run: dict[str, Any], status: str, why: str, seconds: float, *, junk: bool, published_junk: bool = False
) -> TurnResult:
    """The turn's result from its stored run: passed unless ``why`` says what failed."""
    return TurnResult(
        turn_id=turn.id,
        capability=turn.capability,
        passed=not why,
        status=status,
        why=why,
        junk=junk,
        published_junk=published_junk,
        refused=run.get("reason_code") == "model_refused_request",
        seconds=seconds,
        tokens=int((run.get("budget_usage") or {}).get("tokens") or 0),
        intent=run.get("intent"),
        label=turn.label,
    )


def _stored_run(client: httpx.Client, outcome: dict[str, Any]) -> dict[str, Any]:
    """The run as its owner's history has it (empty when the turn made none)."""
    session_id, run_id = outcome.get("session_id"), outcome.get("run_id")
    if not session_id or not run_id:
        return {}
    response = client.get(f"/api/chat/sessions/{session_id}/runs", params={"limit": "10"})
    runs = _json(response).get("runs") or []
    return next((run for run in runs if run.get("run_id") == run_id), {})


def _failed(turn: Turn, status: str, why: str, seconds: float = 0.0) -> TurnResult:
    return TurnResult(turn.id, turn.capability, False, status, why, seconds=seconds, label=turn.label)


def _ended(status: str, outcome: dict[str, Any], reason: str | None) -> str:
    code = (outcome.get("error") or {}).get("code")
    return f"ended {status}" + (f" {code}" if code else "") + (f", {reason}" if reason else "")


def _error(outcome: dict[str, Any]) -> str:
    return str(outcome.get("message") or outcome.get("error") or "no error message")[:200]


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
