"""The backlog view over HTTP after concurrent signed writes: its counts equal a full read of the rows."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from flowledger.config import load_settings
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.services import build_services
from tests.e2e.test_concurrency import Signer
from tests.integration.test_backlog_counters import recounted

pytestmark = pytest.mark.e2e
THREADS = 8
ROUNDS = 6
VIEW = "/admin/v1/reasoning/research/backlog"


@pytest.fixture(scope="module")
def quiet_server(tmp_path_factory: pytest.TempPathFactory, launch: Callable[..., Any]) -> Iterator[Any]:
    """A server of its own, so the counts are this module's rows only."""
    # Its own scheduled consumer stays off: the operators below are the only consumers.
    running = launch(tmp_path_factory.mktemp("observability") / "data", env={"BACKLOG_CONSUMER_ENABLED": "false"})
    yield running
    running.stop()


def test_the_view_after_eight_concurrent_operators_equals_a_recount_of_the_rows(quiet_server: Any) -> None:
    signer = Signer(quiet_server)
    start_line = threading.Barrier(THREADS)

    def post(client: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
        data = json.dumps(body).encode()
        return client.post(path, content=data, headers=signer.headers("POST", path, data))

    def operate(number: int) -> None:
        with httpx.Client(base_url=quiet_server.base_url, timeout=60) as client:
            start_line.wait()
            for n in range(ROUNDS):
                body = {
                    "idempotency_key": f"http-{number}-{n:04d}",
                    "trigger_type": "user_question",
                    "trigger_ref": f"ref/{number}/{n}",
                    "reason": "operator_request",
                    "question_framing": "Look deeper.",
                }
                while (answer := post(client, "/admin/v1/reasoning/research/deeper-request", body)).status_code == 503:
                    continue  # the ticket counter was contended: retried with the same key, as a client would
                assert answer.status_code == 201, answer.text
                if n % 2:
                    pulled = post(client, "/admin/v1/reasoning/research/backlog/next", {}).json()["request"]
                    assert pulled is not None
                    closing = {} if n % 4 == 1 else {"error": "gave_up"}
                    done = post(
                        client, f"/admin/v1/reasoning/research/backlog/{pulled['request_id']}/complete", closing
                    )
                    assert done.status_code == 200, done.text

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(operate, range(THREADS)))
    response = httpx.get(f"{quiet_server.base_url}{VIEW}", headers=signer.headers("GET", VIEW), timeout=30)
    assert response.status_code == 200, response.text
    view = response.json()
    endpoints = quiet_server.data_dir.endpoints()
    store = build_services(
        load_settings(aws_endpoint_url=endpoints.aws_endpoint_url, aws_region=endpoints.region), EMBEDDED_CREDENTIALS
    )
    statuses, retries = recounted(store)
    assert sum(statuses.values()) == THREADS * ROUNDS
    assert view["status_distribution"] == statuses and view["retry_distribution"] == retries
    assert statuses["pending"] == THREADS * ROUNDS // 2 and statuses["failed_voluntary"] == THREADS
    assert len(view["recent_failures"]) == THREADS and view["loop_health"] == "warn"
