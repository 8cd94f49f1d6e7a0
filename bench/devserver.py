"""The dev server under load: requests per second and p50/p99 at 1, 4 and 16 concurrent clients.

Two routes: ``GET /health`` (gateway, a worker process, the core function) and a SigV4-signed
``POST /admin/v1/reasoning/research/backlog/next`` pulling real rows (signature check, worker,
three DynamoDB requests on the embedded store). The peer is a bare uvicorn + Starlette app
answering the same health JSON on the same machine, in the same run: the ratio is what the API
Gateway stand-in and the Lambda handler cost over serving JSON at all.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from serving import free_port, wait_for

from flowledger.config import load_settings
from flowledger.local.datadir import DataDir
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.research.backlog import Backlog
from flowledger.research.synthetic import enqueue_synthetic
from flowledger.services import build_services

LEVELS = (1, 4, 16)
HEALTH_REQUESTS = 400
PULLS = 160  # per level; the rows are enqueued before the run
PULL = "/admin/v1/reasoning/research/backlog/next"
BARE_APP = """
import sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
async def health(request):
    return JSONResponse({"status": "ok"})
uvicorn.run(Starlette(routes=[Route("/health", health)]), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def load(clients: int, requests: int, call: Callable[[httpx.Client], int]) -> tuple[float, float, float]:
    """(requests per second, p50 ms, p99 ms) of ``requests`` calls shared by ``clients`` threads."""
    latencies: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)
    share = [requests // clients + (1 if n < requests % clients else 0) for n in range(clients)]

    def client(count: int) -> None:
        with httpx.Client(timeout=60) as session:
            barrier.wait()
            for _ in range(count):
                began = time.perf_counter()
                status = call(session)
                elapsed = (time.perf_counter() - began) * 1000
                if status != 200:
                    raise SystemExit(f"unexpected status {status}")
                with lock:
                    latencies.append(elapsed)

    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client, count) for count in share]
        barrier.wait()
        began = time.perf_counter()
        for future in futures:
            future.result()
        wall = time.perf_counter() - began
    cuts = statistics.quantiles(latencies, n=100)
    return len(latencies) / wall, statistics.median(latencies), cuts[98]


def enqueue(directory: DataDir, rows: int) -> None:
    endpoints = directory.endpoints()
    settings = load_settings(aws_endpoint_url=endpoints.aws_endpoint_url, aws_region=endpoints.region)
    backlog = Backlog(build_services(settings, EMBEDDED_CREDENTIALS))
    enqueue_synthetic(backlog, rows, "devserver-bench", actor="user:bench")


def main() -> int:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OPENAI_", "FLOWLEDGER_"))}
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch) / "data"
        port, bare_port = free_port(), free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "flowledger.cli", "serve", "--port", str(port), "--data-dir", str(data_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=environment,
        )
        bare = subprocess.Popen(
            [sys.executable, "-c", BARE_APP, str(bare_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            base, bare_base = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{bare_port}"
            wait_for(f"{base}/health", server)
            wait_for(f"{bare_base}/health", bare)
            directory = DataDir(data_dir)
            enqueue(directory, PULLS * len(LEVELS))
            credentials = directory.admin_credentials()
            signer = SigV4Auth(
                Credentials(credentials.access_key_id, credentials.secret_access_key), "execute-api", credentials.region
            )

            def pull(session: httpx.Client) -> int:
                request = AWSRequest(method="POST", url=f"{base}{PULL}", data=b"{}")
                signer.add_auth(request)
                headers = {**dict(request.headers), "Content-Type": "application/json"}
                response = session.post(f"{base}{PULL}", content=b"{}", headers=headers)
                if response.status_code == 200 and response.json()["request"] is None:
                    raise SystemExit("the backlog ran dry: enqueue more rows")
                return response.status_code

            print(f"{'route':<28} {'clients':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'vs bare':>8}")
            for clients in LEVELS:
                ours = load(clients, HEALTH_REQUESTS, lambda s: s.get(f"{base}/health").status_code)
                peer = load(clients, HEALTH_REQUESTS, lambda s: s.get(f"{bare_base}/health").status_code)
                print(
                    f"{'GET /health':<28} {clients:>7} {ours[0]:>8.0f} {ours[1]:>8.1f} {ours[2]:>8.1f}"
                    f" {ours[0] / peer[0]:>7.2f}x"
                )
                print(f"{'  bare uvicorn (peer)':<28} {clients:>7} {peer[0]:>8.0f} {peer[1]:>8.1f} {peer[2]:>8.1f}")
            for clients in LEVELS:
                rate, p50, p99 = load(clients, PULLS, pull)
                print(f"{'POST backlog/next (signed)':<28} {clients:>7} {rate:>8.0f} {p50:>8.1f} {p99:>8.1f}")
        finally:
            for process in (server, bare):
                process.terminate()
                process.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
