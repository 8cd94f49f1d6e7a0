"""The dev server under concurrent use over HTTP: many signed consumers, chats, polls and writes at once."""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowledger.config import load_settings
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.research.backlog import Backlog
from flowledger.research.synthetic import enqueue_synthetic
from flowledger.services import build_services
from tests.signing import sigv4_headers

pytestmark = pytest.mark.e2e
CONSUMERS = 16
# Two rows a consumer: with the ticket take made a read and a write back and the flip's "still pending"
# condition dropped, 32 rows went out twice in 5 runs of 5 (1,000 took 50 s; `make bench` runs them).
ROWS = 32
# The SIGTERM test's clients: one keeps a chat in flight, one a signed pull. Eight stopped no differently
# (0.8 s against 0.5 s): with the graceful-shutdown bound removed, or a stop that waits for the workers'
# calls in flight, both passed, so the count guards nothing; `make bench` (bench/full_size.py) runs 8.
BUSY_CLIENTS = 2
PULL = "/admin/v1/reasoning/research/backlog/next"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory: pytest.TempPathFactory, launch: Callable[..., Any]) -> Iterator[Any]:
    """A server of its own: these tests drain its backlog (so its own scheduled consumer stays off)."""
    # Four execution environments, as the server's default: four pulls at once race in the store.
    running = launch(
        tmp_path_factory.mktemp("busy") / "data", "--workers", "4", env={"BACKLOG_CONSUMER_ENABLED": "false"}
    )
    yield running
    running.stop()


class Signer:
    """Signs admin calls with the server's local admin credentials, as any SigV4 client would."""

    def __init__(self, server: Any) -> None:
        self._credentials = server.data_dir.admin_credentials()
        self._base = server.base_url

    def headers(self, method: str, path: str, body: bytes = b"") -> dict[str, str]:
        signed = sigv4_headers(self._credentials, method, f"{self._base}{path}", body)
        return {**signed, "Content-Type": "application/json"}


def enqueue_rows(server: Any, count: int) -> dict[str, str]:
    """Rows enqueued through the real enqueue against the server's embedded store: request id -> created_at."""
    endpoints = server.data_dir.endpoints()
    settings = load_settings(aws_endpoint_url=endpoints.aws_endpoint_url, aws_region=endpoints.region)
    producer = build_services(settings, EMBEDDED_CREDENTIALS)
    ticks = itertools.count()
    producer.clock = lambda: T0 + timedelta(milliseconds=next(ticks))  # distinct, ordered creation times
    return enqueue_synthetic(Backlog(producer), count, "http-conc")


def test_sixteen_signed_consumers_drain_the_backlog_over_http(busy_server: Any) -> None:
    created = enqueue_rows(busy_server, ROWS)
    signer = Signer(busy_server)
    start_line = threading.Barrier(CONSUMERS)
    timeouts: list[int] = []

    def consume(number: int) -> list[str]:
        pulled = []
        body = b"{}"
        with httpx.Client(base_url=busy_server.base_url, timeout=30) as client:
            start_line.wait()
            while True:
                try:
                    response = client.post(PULL, content=body, headers=signer.headers("POST", PULL, body))
                except httpx.TimeoutException:
                    timeouts.append(number)
                    continue
                assert response.status_code == 200, response.text
                row = response.json()["request"]
                if row is None:
                    return pulled
                pulled.append(row["request_id"])

    with ThreadPoolExecutor(CONSUMERS) as pool:
        per_consumer = list(pool.map(consume, range(CONSUMERS)))
    everything = Counter(rid for pulls in per_consumer for rid in pulls)
    assert timeouts == []
    assert set(everything) == set(created)  # none lost
    assert set(everything.values()) == {1}  # none dispatched twice
    for pulls in per_consumer:  # each consumer sees its rows in enqueue order
        assert [created[rid] for rid in pulls] == sorted(created[rid] for rid in pulls)
    assert sum(1 for pulls in per_consumer if pulls) > CONSUMERS // 2  # the work really was shared
    assert httpx.get(f"{busy_server.base_url}/health", timeout=5).status_code == 200


def test_chat_streams_polls_and_writes_at_once_all_finish(busy_server: Any) -> None:
    chat = "Bearer " + token(busy_server, "--sub", "chatter", "--scopes", "chat")
    writer = "Bearer " + token(busy_server, "--sub", "agent-conc", "--scopes", "reasoning.write")
    signer = Signer(busy_server)
    base = busy_server.base_url

    def stream_chat(n: int) -> str:
        with httpx.stream(
            "POST",
            f"{base}/api/chat",
            json={"query": f"How does the audit ledger work? ({n})"},
            headers={"Authorization": chat},
            timeout=60,
        ) as response:
            kinds = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
        return kinds[-1]

    def poll(n: int) -> set[int]:
        statuses = set()
        for _ in range(10):
            statuses.add(httpx.get(f"{base}/health", timeout=30).status_code)
            path = "/admin/v1/me"
            statuses.add(httpx.get(f"{base}{path}", headers=signer.headers("GET", path), timeout=30).status_code)
        return statuses

    def write(n: int) -> int:
        headers = {"Authorization": writer}
        opened = httpx.post(
            f"{base}/api/reasoning/flows",
            json={"trigger_type": "user_question", "trigger_ref": f"conc/{n}", "trigger_summary": "A question"},
            headers=headers,
            timeout=30,
        )
        assert opened.status_code == 201, opened.text
        flow_id = opened.json()["flow_id"]
        for i in range(3):
            step = httpx.post(
                f"{base}/api/reasoning/flows/{flow_id}/steps",
                json={"step_kind": "retrieval", "agent": "researcher", "summary_text": f"Retrieved passage {i}"},
                headers=headers,
                timeout=30,
            )
            assert step.status_code == 201, step.text
        return int(opened.status_code)

    with ThreadPoolExecutor(12) as pool:
        chats = [pool.submit(stream_chat, n) for n in range(4)]
        polls = [pool.submit(poll, n) for n in range(4)]
        writes = [pool.submit(write, n) for n in range(4)]
        assert [f.result(timeout=120) for f in chats] == ["done"] * 4
        assert all(f.result(timeout=120) == {200} for f in polls)
        assert [f.result(timeout=120) for f in writes] == [201] * 4


def test_sigterm_stops_the_server_within_seconds_with_requests_in_flight(
    tmp_path: Path, launch: Callable[..., Any]
) -> None:
    server = launch(tmp_path / "data")
    chat = "Bearer " + token(server, "--sub", "leaver", "--scopes", "chat")
    signer = Signer(server)
    stop = threading.Event()
    answered: set[int] = set()

    def keep_busy(n: int) -> None:
        with httpx.Client(base_url=server.base_url, timeout=10) as client:
            while not stop.is_set():
                try:
                    if n % 2:
                        client.post(
                            "/api/chat", json={"query": "Tell me about the runbook"}, headers={"Authorization": chat}
                        )
                    else:
                        client.post(PULL, content=b"{}", headers=signer.headers("POST", PULL, b"{}"))
                    answered.add(n)
                except httpx.TransportError:
                    return  # the server went away, as asked

    with ThreadPoolExecutor(BUSY_CLIENTS) as pool:
        busy = [pool.submit(keep_busy, n) for n in range(BUSY_CLIENTS)]
        # Every client has had an answer and has sent its next request: the signal meets requests in flight.
        deadline = time.monotonic() + 30
        while len(answered) < BUSY_CLIENTS:
            assert time.monotonic() < deadline, f"only clients {sorted(answered)} were answered"
            time.sleep(0.05)
        sent = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        # A liveness bound, not a benchmark: graceful shutdown allows 3 s for requests in flight.
        assert server.process.wait(timeout=20) == 0
        stopped_after = time.monotonic() - sent
        stop.set()
        for future in busy:
            future.result(timeout=30)
    assert stopped_after < 20
    assert "flowledger: stopped; state saved" in server.output()


def token(server: Any, *args: str) -> str:
    result = server.cli("token", "--data-dir", str(server.data_dir.path), *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()
