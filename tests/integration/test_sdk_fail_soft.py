"""The recorder and the research client SDKs against a loopback API that answers 503 or stops answering.

Neither may raise into the agent or hang past its timeout; each logs the first failure once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.credentials import Credentials

from flowledger.reasoning.recorder import AsyncReasoningFlowRecorder, HttpTransport, ReasoningFlowRecorder
from flowledger.research.client import MemoryClient

TIMEOUT_SECONDS = 0.2
THROTTLED = {"status": 503, "body": {"error": "throttled", "message": "busy", "request_id": "r-1"}}
SILENT = {"delay": 1.0}  # longer than the SDK's timeout
STARTED = {"status": 201, "body": {"flow_id": "fl_1"}}
BATCH = "POST /api/reasoning/flows/fl_1/steps:batch"


class ScriptedApi:
    """Answers each request with the next script entry (the last one repeats); records the requests."""

    def __init__(self) -> None:
        self.script: list[dict[str, Any]] = []
        self.requests: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                owner.requests.append(f"{self.command} {self.path}")
                entry = owner.script[min(len(owner.requests), len(owner.script)) - 1]
                time.sleep(entry.get("delay", 0))
                body = json.dumps(entry.get("body", {})).encode()
                with_retry_after = entry.get("status") == 503
                try:
                    self.send_response(entry.get("status", 200))
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    if with_retry_after:
                        self.send_header("Retry-After", "1")
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting, as it should

            do_GET = do_POST = do_PATCH = _answer

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def api() -> Iterator[ScriptedApi]:
    server = ScriptedApi()
    yield server
    server.stop()


def warnings(caplog: pytest.LogCaptureFixture, logger: str) -> int:
    return len([record for record in caplog.records if record.name == logger])


@pytest.mark.parametrize(
    ("script", "sent"),
    [
        ([THROTTLED], ["POST /api/reasoning/flows"]),
        ([SILENT], ["POST /api/reasoning/flows"]),
        # A batch is sent once more when its answer is lost or busy (the route skips what it holds), then no more.
        ([STARTED, THROTTLED], ["POST /api/reasoning/flows", *[BATCH] * 2]),
        ([STARTED, SILENT], ["POST /api/reasoning/flows", *[BATCH] * 2]),
    ],
    ids=["start-503", "start-timeout", "step-503", "step-timeout"],
)
def test_the_recorder_survives_a_503_or_a_timeout_and_stops_sending(
    api: ScriptedApi, caplog: pytest.LogCaptureFixture, script: list[dict[str, Any]], sent: list[str]
) -> None:
    api.script = script
    recorder = ReasoningFlowRecorder(HttpTransport(api.url, "token", timeout_seconds=TIMEOUT_SECONDS))
    began = time.monotonic()
    with (
        caplog.at_level(logging.WARNING, logger="flowledger.recorder"),
        recorder.flow("user_question", "chat/run-1", "Question about a lab trend") as flow,
    ):
        first = flow.step("retrieval", "researcher", "Retrieved passages")
        flow.step("verdict", "critic", "Checked the claim", parents=[first] if first else None)
        flow.outcome("no_action", "Nothing to do")
    assert flow.step("retrieval", "researcher", "Too late") is None  # the failure turned the flow into no-ops
    assert api.requests == sent  # after the failure the flow sends nothing, not even its close
    assert warnings(caplog, "flowledger.recorder") == 1
    assert time.monotonic() - began < 2 * TIMEOUT_SECONDS * len(sent) + 0.5


@pytest.mark.anyio
@pytest.mark.parametrize("script", [[THROTTLED], [SILENT]], ids=["503", "timeout"])
async def test_the_async_recorder_survives_a_503_or_a_timeout(
    api: ScriptedApi, caplog: pytest.LogCaptureFixture, script: list[dict[str, Any]]
) -> None:
    api.script = script
    recorder = AsyncReasoningFlowRecorder(HttpTransport(api.url, "token", timeout_seconds=TIMEOUT_SECONDS))
    with caplog.at_level(logging.WARNING, logger="flowledger.recorder"):
        async with recorder.flow("user_question", "chat/run-1", "Question about a lab trend") as flow:
            await flow.step("retrieval", "researcher", "Retrieved passages")  # queued: the open may not be answered yet
        assert await flow.step("verdict", "critic", "Too late") is None
    assert flow.flow_id is None
    assert api.requests == ["POST /api/reasoning/flows"]
    assert warnings(caplog, "flowledger.recorder") == 1


@pytest.mark.anyio
@pytest.mark.parametrize("script", [[THROTTLED], [SILENT]], ids=["503", "timeout"])
async def test_the_research_client_answers_none_under_a_503_or_a_timeout(
    api: ScriptedApi, caplog: pytest.LogCaptureFixture, script: list[dict[str, Any]]
) -> None:
    api.script = script
    client = MemoryClient(api.url, "us-east-1", Credentials("key", "secret"), timeout_seconds=TIMEOUT_SECONDS)
    began = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="flowledger.research.client"):
            pulled = await client.pull_next_research_request()
            queued = await client.enqueue_deeper_research(
                idempotency_key="key-sdk-0001",
                trigger_type="user_question",
                trigger_ref="ref/sdk",
                reason="weak_composite_k",
                question_framing="Find stronger evidence for the claim.",
            )
    finally:
        await client.aclose()
    assert (pulled, queued) == (None, None)
    assert len(api.requests) == 2  # one request each: the client does not retry in a loop
    assert warnings(caplog, "flowledger.research.client") == 1
    assert time.monotonic() - began < 4 * TIMEOUT_SECONDS + 0.5
