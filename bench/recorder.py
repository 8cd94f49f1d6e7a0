"""What recording costs the agent: ``flow.step`` in the agent's thread, and a durable close of a 50-step flow.

Flowledger's recorder sends over ``HttpTransport`` to a real ``flowledger serve`` (gateway, the
reasoning function, the embedded DynamoDB store) in its own process, as an agent beside a
deployment would. The peer, in the same run, is the Langfuse Python SDK (OpenTelemetry, OTLP/HTTP)
exporting to a loopback sink in its own process that answers 200 to anything: one child span per
step under a root span per flow, then ``flush()``.

Per step: median and p95 of the time a step call takes in the agent's thread (Flowledger: build the
step, queue it; Langfuse: start and end a span). Close: from the ``with`` exit (Flowledger: every
step stored and audited, the flow closed) or ``flush()`` (Langfuse: every span exported) to its
return, and the whole flow from its open. Every Flowledger flow is then read back: 50 steps stored
and 50 ``reasoning.step.created`` events, or the run fails. Target: per-step median <= 1.0x Langfuse.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from serving import free_port, wait_for

from flowledger.ids import new_id
from flowledger.local.datadir import DataDir
from flowledger.reasoning.recorder import HttpTransport, ReasoningFlowRecorder

FLOWLEDGER = [sys.executable, "-m", "flowledger.cli"]
STEPS = 50
FLOWS = 30  # per recorder, after WARMUP flows that are not counted
OLD_FLOWS = 5  # the one-call-a-step baseline is slow: a few flows say enough
WARMUP = 3
TARGET_RATIO = 1.0
REFERENCE_LANGFUSE_US = 73  # Langfuse's median per step, measured on 2026-11-30 (the issue)
SINK = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def _ok(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
    do_GET = do_POST = do_PUT = do_PATCH = _ok
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
"""


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[94]


class Figures:
    def __init__(self) -> None:
        self.step_us: list[float] = []
        self.close_ms: list[float] = []
        self.flow_ms: list[float] = []


def flowledger_flows(base_url: str, token: str, count: int, figures: Figures | None) -> list[str]:
    """``count`` flows of STEPS chained steps; the flow ids."""
    recorder = ReasoningFlowRecorder(HttpTransport(base_url, token))
    flow_ids = []
    for n in range(count):
        opened = time.perf_counter()
        with recorder.flow("bench_recorder", f"bench/{n}", "A benchmark flow") as flow:
            previous: str | None = None
            for k in range(STEPS):
                began = time.perf_counter()
                previous = flow.step(
                    "retrieval",
                    "researcher",
                    f"Retrieved passages for step {k}",
                    parents=[previous] if previous else None,
                    confidence=0.9,
                    latency_ms=12,
                )
                if figures is not None:
                    figures.step_us.append((time.perf_counter() - began) * 1e6)
            flow.outcome("no_action", "Nothing to do")
            closing = time.perf_counter()
        done = time.perf_counter()
        if figures is not None:
            figures.close_ms.append((done - closing) * 1000)
            figures.flow_ms.append((done - opened) * 1000)
        if flow.flow_id is None:
            raise SystemExit("a flow was not recorded: the recorder failed (see its warning)")
        flow_ids.append(flow.flow_id)
    return flow_ids


def one_call_a_step_flows(base_url: str, token: str, count: int, figures: Figures) -> None:
    """The recorder as it was before the batch route: each step one HTTP call made in the agent's thread."""
    transport = HttpTransport(base_url, token)
    single = httpx.Client(base_url=base_url, timeout=5.0, headers={"Authorization": f"Bearer {token}"})
    for n in range(count):
        opened = time.perf_counter()
        flow_id = transport.start(
            {"trigger_type": "bench_recorder", "trigger_ref": f"old/{n}", "trigger_summary": "Old"}
        )
        previous: str | None = None
        for k in range(STEPS):
            began = time.perf_counter()
            body = {
                "step_id": new_id("st_"),
                "step_kind": "retrieval",
                "agent": "researcher",
                "summary_text": f"Retrieved passages for step {k}",
                "parent_step_ids": [previous] if previous else [],
                "confidence": 0.9,
                "latency_ms": 12,
            }
            single.post(f"/api/reasoning/flows/{flow_id}/steps", json=body).raise_for_status()
            previous = str(body["step_id"])
            figures.step_us.append((time.perf_counter() - began) * 1e6)
        closing = time.perf_counter()
        transport.close(flow_id, {"state": "completed", "outcome": {"type": "no_action", "summary": "Nothing to do"}})
        done = time.perf_counter()
        figures.close_ms.append((done - closing) * 1000)
        figures.flow_ms.append((done - opened) * 1000)


def langfuse_flows(sink_url: str, count: int, figures: Figures | None) -> None:
    from langfuse import Langfuse

    client = Langfuse(public_key="pk-lf-bench", secret_key="sk-lf-bench", host=sink_url)
    try:
        for n in range(count):
            opened = time.perf_counter()
            root = client.start_observation(name="bench_recorder", as_type="agent", input=f"bench/{n}")
            for k in range(STEPS):
                began = time.perf_counter()
                span = root.start_observation(
                    name="retrieval",
                    as_type="retriever",
                    input=f"Retrieved passages for step {k}",
                    metadata={"agent": "researcher", "confidence": 0.9, "latency_ms": 12},
                )
                span.end()
                if figures is not None:
                    figures.step_us.append((time.perf_counter() - began) * 1e6)
            root.update(output="Nothing to do")
            root.end()
            closing = time.perf_counter()
            client.flush()
            done = time.perf_counter()
            if figures is not None:
                figures.close_ms.append((done - closing) * 1000)
                figures.flow_ms.append((done - opened) * 1000)
    finally:
        client.shutdown()


def check_durable(server: str, directory: DataDir, flow_ids: list[str]) -> None:
    """Every flow holds its 50 steps and 50 step events, read back through the admin routes."""
    from tests.signing import sigv4_headers

    credentials = directory.admin_credentials()
    with httpx.Client(timeout=30) as session:
        for flow_id in flow_ids:
            url = f"{server}/admin/v1/reasoning/flows/{flow_id}"
            flow = session.get(url, headers=sigv4_headers(credentials, "GET", url)).json()
            events_url = str(
                httpx.URL(
                    f"{server}/admin/v1/audit/events",
                    params={"subject": f"flow:{flow_id}", "action": "reasoning.step.created", "limit": "200"},
                )
            )
            events = session.get(events_url, headers=sigv4_headers(credentials, "GET", events_url)).json()
            steps_url = f"{url}/steps"
            steps = session.get(steps_url, headers=sigv4_headers(credentials, "GET", steps_url)).json()
            if (flow["flow"]["flow_state"], len(steps["steps"]), len(events["events"])) != ("completed", STEPS, STEPS):
                raise SystemExit(f"flow {flow_id} is not durable and audited: {flow['flow']}")


def row(name: str, figures: Figures) -> str:
    return (
        f"{name:<26} {statistics.median(figures.step_us):>9.1f} {p95(figures.step_us):>9.1f}"
        f" {statistics.median(figures.close_ms):>10.1f} {statistics.median(figures.flow_ms):>10.1f}"
    )


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.signing: SigV4 for the admin reads
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OPENAI_", "FLOWLEDGER_"))}
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch) / "data"
        port, sink_port = free_port(), free_port()
        server = subprocess.Popen(
            [*FLOWLEDGER, "serve", "--port", str(port), "--data-dir", str(data_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=environment,
        )
        sink = subprocess.Popen([sys.executable, "-c", SINK, str(sink_port)])
        try:
            base, sink_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{sink_port}"
            wait_for(f"{base}/health", server)
            wait_for(sink_url, sink)
            token = DataDir(data_dir).token("agent-bench", ["reasoning.write"])
            ours, theirs, old = Figures(), Figures(), Figures()
            flowledger_flows(base, token, WARMUP, None)
            langfuse_flows(sink_url, WARMUP, None)
            flow_ids = flowledger_flows(base, token, FLOWS, ours)
            langfuse_flows(sink_url, FLOWS, theirs)
            one_call_a_step_flows(base, token, OLD_FLOWS, old)
            check_durable(base, DataDir(data_dir), flow_ids)
        finally:
            for process in (server, sink):
                process.terminate()
                process.wait(timeout=30)
    ratio = statistics.median(ours.step_us) / statistics.median(theirs.step_us)
    print(f"{FLOWS} flows x {STEPS} steps each, after {WARMUP} warm-up flows")
    print(f"{'recorder':<26} {'step p50':>9} {'step p95':>9} {'close p50':>10} {'flow p50':>10}")
    print(f"{'':<26} {'(us)':>9} {'(us)':>9} {'(ms)':>10} {'(ms)':>10}")
    print(row("flowledger (serve, HTTP)", ours))
    print(row("langfuse 5 (OTLP sink)", theirs))
    print(row("flowledger, a call a step", old) + f"   (before the batch route; {OLD_FLOWS} flows)")
    reference = f"Langfuse on 2026-11-30: {REFERENCE_LANGFUSE_US} us"
    print(f"per step: {ratio:.2f}x Langfuse (target <= {TARGET_RATIO:.1f}x; {reference})")
    print(f"every Flowledger flow read back: {STEPS} steps stored and {STEPS} step events each")
    if ratio > TARGET_RATIO:
        print("TARGET MISSED: the recorder costs the agent more per step than Langfuse")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
