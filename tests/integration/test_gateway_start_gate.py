"""The dev server's gateway while the start finishes, and its ``/metrics`` view.

``/health`` answers at once; any other request waits at the start gate until the start is done,
or gets a 503 with ``Retry-After`` when it failed. ``/metrics`` sums the data dir's metrics file
and answers only callers on this machine.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowledger.api.registry import rest_routes
from flowledger.api.tokens import TokenVerifier
from flowledger.local.datadir import DataDir
from flowledger.local.gateway import LocalGateway
from flowledger.local.metrics_view import MetricsView
from flowledger.local.sigv4 import SigV4Verifier
from flowledger.local.startup import StartupGate
from flowledger.metrics import METRICS_FILE_VARIABLE, EmfMetrics
from tests.integration.test_local_gateway import InProcessFunctions

pytestmark = [pytest.mark.usefixtures("services"), pytest.mark.anyio]
BASE = "http://gateway.test"


def gateway_with(data_dir: DataDir, jwks_url: str, gate: StartupGate, metrics: MetricsView) -> LocalGateway:
    summary = metrics.summary
    return LocalGateway(
        routes=rest_routes(),
        functions=InProcessFunctions(),
        tokens=TokenVerifier(jwks_url, "flowledger-local", "flowledger"),
        sigv4=SigV4Verifier(data_dir.admin_credentials()),
        loopback_pages={"/metrics": lambda: ("application/json", httpx.Response(200, json=summary()).content)},
        gate=gate,
    )


async def call(gateway: LocalGateway, path: str, client: str = "127.0.0.1") -> httpx.Response:
    transport = httpx.ASGITransport(app=gateway, client=(client, 40000))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        return await http.get(path)


@pytest.fixture
def metrics(tmp_path: Path) -> MetricsView:
    return MetricsView(tmp_path / "metrics.jsonl")


async def test_health_answers_while_other_requests_wait_for_the_start(
    data_dir: DataDir, jwks_url: str, metrics: MetricsView
) -> None:
    gate = StartupGate()
    gateway = gateway_with(data_dir, jwks_url, gate, metrics)
    assert (await call(gateway, "/health")).status_code == 200
    waiting = asyncio.ensure_future(call(gateway, "/api/me"))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # held at the gate, not answered from a half-built store
    gate.open()
    assert (await waiting).status_code == 401  # then handled as usual (no token here)


async def test_a_failed_start_is_a_503_with_retry_after(data_dir: DataDir, jwks_url: str, metrics: MetricsView) -> None:
    gate = StartupGate()
    gate.fail("the saved store is damaged")
    response = await call(gateway_with(data_dir, jwks_url, gate, metrics), "/api/me")
    assert response.status_code == 503
    assert response.headers["retry-after"]
    assert "the saved store is damaged" in response.json()["message"]


async def test_metrics_counts_the_file_and_answers_only_this_machine(
    data_dir: DataDir, jwks_url: str, metrics: MetricsView, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(METRICS_FILE_VARIABLE, str(metrics.path))
    sink = EmfMetrics()
    for value in (2.0, 5.0):
        sink.emit("ChatTurns", value, "Count", {"service": "chat"})
    gate = StartupGate()
    gateway = gateway_with(data_dir, jwks_url, gate, metrics)
    summary: dict[str, Any] = (await call(gateway, "/metrics")).json()
    assert summary["metrics"] == [
        {
            "name": "ChatTurns",
            "dimensions": {"service": "chat"},
            "unit": "Count",
            "count": 2,
            "sum": 7.0,
            "min": 2.0,
            "max": 5.0,
        }
    ]
    refused = await call(gateway, "/metrics", client="192.0.2.7")
    assert refused.status_code == 403
