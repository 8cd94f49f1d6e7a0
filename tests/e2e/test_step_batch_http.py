"""The recorder over HTTP through `flowledger serve`: the batch route is served, every step is stored and
audited when the block ends, and a batch whose answer is lost is retried without a second write."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from flowledger.reasoning.recorder import HttpTransport, ReasoningFlowRecorder
from tests.signing import sigv4_headers

LOST_FOR_SECONDS = 3.0  # how long the proxy sits on the first batch's answer: past the client's timeout
CLIENT_TIMEOUT_SECONDS = 1.5


def token(server: Any, *args: str) -> str:
    result = server.cli("token", "--data-dir", str(server.data_dir.path), *args)
    assert result.returncode == 0, result.stderr
    return str(result.stdout).strip()


def admin_get(server: Any, path: str, **query: str) -> Any:
    url = str(httpx.URL(f"{server.base_url}{path}", params=query or None))
    headers = sigv4_headers(server.data_dir.admin_credentials(), "GET", url)
    response = httpx.get(url, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def step_events(server: Any, flow_id: str) -> list[dict[str, Any]]:
    page = admin_get(
        server, "/admin/v1/audit/events", subject=f"flow:{flow_id}", action="reasoning.step.created", limit="200"
    )
    return list(page["events"])


class LosingProxy:
    """Forwards every request to the server; the first batch's answer reaches the client only after it gave up."""

    def __init__(self, upstream: str) -> None:
        self.batches: list[bytes] = []
        owner = self
        lost_one = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                answer = httpx.request(self.command, upstream + self.path, content=body, headers=headers, timeout=30)
                if self.path.endswith("/steps:batch"):
                    owner.batches.append(body)
                    if not lost_one.is_set():
                        lost_one.set()
                        threading.Event().wait(LOST_FOR_SECONDS)  # stored upstream; the answer comes too late
                try:
                    self.send_response(answer.status_code)
                    self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
                    self.send_header("Content-Length", str(len(answer.content)))
                    self.end_headers()
                    self.wfile.write(answer.content)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out, as intended

            do_POST = do_PATCH = do_GET = _forward

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
def proxy(server: Any) -> Iterator[LosingProxy]:
    running = LosingProxy(server.base_url)
    yield running
    running.stop()


def test_every_step_is_stored_and_audited_when_the_block_ends(server: Any) -> None:
    writer = token(server, "--sub", "agent-batch", "--scopes", "reasoning.write")
    recorder = ReasoningFlowRecorder(HttpTransport(server.base_url, writer))
    with recorder.flow("user_question", "e2e/batch-1", "Question about a lab trend") as flow:
        ids: list[str] = []
        previous: str | None = None
        for n in range(120):  # three batches at least
            previous = flow.step("retrieval", "researcher", f"Step {n}", parents=[previous] if previous else None)
            ids.append(str(previous))
        flow.outcome("no_action", "Nothing to do")
    stored = admin_get(server, f"/admin/v1/reasoning/flows/{flow.flow_id}")
    page = admin_get(server, f"/admin/v1/reasoning/flows/{flow.flow_id}/steps", limit="1000")
    assert [s["step_id"] for s in page["steps"]] == ids
    assert (stored["flow"]["flow_state"], stored["flow"]["step_count"]) == ("completed", 120)
    assert sorted(e["refs"]["step_id"] for e in step_events(server, str(flow.flow_id))) == sorted(ids)


def test_a_batch_whose_answer_was_lost_is_sent_again_and_written_once(server: Any, proxy: LosingProxy) -> None:
    writer = token(server, "--sub", "agent-lossy", "--scopes", "reasoning.write")
    recorder = ReasoningFlowRecorder(HttpTransport(proxy.url, writer, timeout_seconds=CLIENT_TIMEOUT_SECONDS))
    with recorder.flow("user_question", "e2e/batch-2", "Question about a lab trend") as flow:
        ids = [flow.step("retrieval", "researcher", f"Step {n}") for n in range(5)]
        flow.outcome("no_action", "Nothing to do")
    assert proxy.batches[0] == proxy.batches[1]  # the same batch, sent twice
    stored = admin_get(server, f"/admin/v1/reasoning/flows/{flow.flow_id}")
    page = admin_get(server, f"/admin/v1/reasoning/flows/{flow.flow_id}/steps", limit="1000")
    assert [s["step_id"] for s in page["steps"]] == ids
    assert (stored["flow"]["flow_state"], stored["flow"]["step_count"]) == ("completed", 5)
    assert len(step_events(server, str(flow.flow_id))) == 5


def test_without_the_write_scope_a_bad_batch_is_403_not_a_validation_error(server: Any) -> None:
    writer = {"Authorization": "Bearer " + token(server, "--sub", "agent-s", "--scopes", "reasoning.write")}
    reader = {"Authorization": "Bearer " + token(server, "--sub", "ann", "--scopes", "reasoning.read")}
    opened = httpx.post(
        f"{server.base_url}/api/reasoning/flows",
        json={"trigger_type": "user_question", "trigger_ref": "e2e/s", "trigger_summary": "Question"},
        headers=writer,
    )
    assert opened.status_code == 201
    path = f"{server.base_url}/api/reasoning/flows/{opened.json()['flow_id']}/steps:batch"
    assert httpx.post(path, json={"steps": 7}, headers=reader).status_code == 403
    assert httpx.post(path, json={"steps": 7}, headers=writer).status_code == 422


ANSI_LOG_LINE = "\x1b[31mERROR\x1b[0m db-1: connection refused\r\n\tretrying"


def test_a_diagnosis_step_whose_log_output_holds_ansi_colour_codes_is_recorded(server: Any) -> None:
    # The API refuses control characters in text (422) and a batch with one whole: the recorder escapes them.
    writer = token(server, "--sub", "agent-logs", "--scopes", "reasoning.write")
    recorder = ReasoningFlowRecorder(HttpTransport(server.base_url, writer))
    with recorder.flow("incident", "e2e/ansi-1", "Why is db-1 down?") as flow:
        first = flow.step("tool", "diagnosis", "Read the service log", outputs={"log": ANSI_LOG_LINE})
        second = flow.step("verdict", "diagnosis", "\x1b[1mdb-1 refuses connections", parents=[str(first)])
        flow.outcome("recommendation_delivered", "Restart db-1")
    page = admin_get(server, f"/admin/v1/reasoning/flows/{flow.flow_id}/steps", limit="10")
    stored = admin_get(server, f"/admin/v1/reasoning/flows/{flow.flow_id}")
    assert [s["step_id"] for s in page["steps"]] == [first, second]
    assert page["steps"][0]["outputs"]["log"] == "\\u001b[31mERROR\\u001b[0m db-1: connection refused\r\n\tretrying"
    assert page["steps"][1]["summary_text"] == "\\u001b[1mdb-1 refuses connections"
    assert (stored["flow"]["flow_state"], stored["flow"]["step_count"]) == ("completed", 2)
