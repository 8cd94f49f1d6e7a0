"""`flows export --format raw` of 20,000 closed flows x 5 steps from the embedded store (the locked moto
server): flows per second and the exporter's peak resident memory, and the peak again at 5,000 flows.
Target: under 200 MB and flat in the count (the 20,000 peak at most 10 % above the 5,000 peak).

The store is seeded fast with BatchWriteItem: flow and step items shaped as FlowService writes them (a
closed flow with its outcome, radar snapshot, guard counts and closed_shard; steps with inputs, outputs
and back-refs), without the audit events, which the export never reads. Each export runs in a subprocess
of its own, so its peak RSS (VmHWM in /proc) is the exporter's and nothing else's; it writes every record as JSON to
/dev/null through the same ClosedFlowReader the CLI uses.

The locked server reads a base-table Query's own partition (flowledger.local.moto_reads), as the dev
server does, so a per-flow steps Query costs what DynamoDB's would, not O(table); index queries and
everything else run as moto runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

COUNTS = tuple(int(c) for c in os.environ.get("BENCH_EXPORT_COUNTS", "5000,20000").split(","))
STEPS = 5
TARGET_MB = 200
FLAT = 1.10  # the larger export's peak may be at most 10 % above the smaller's
REGION = "us-east-1"
CREDENTIALS = ("bench", "bench")  # moto takes any; the child does not import the dev server for them
KINDS = ("retrieval", "llm_prompt", "tool_call", "llm_prompt", "verdict")


def stamp(n: int) -> str:
    """The n-th flow's time: one second apart from 2026-01-01 (text order is time order)."""
    from datetime import UTC, datetime, timedelta

    return (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def flow_item(n: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The n-th closed flow and its steps, as plain values shaped as the service writes them."""
    from flowledger.ids import new_id
    from flowledger.reasoning.service import _active_shard

    flow_id = new_id("fl_")
    closed = stamp(n)
    steps = []
    parent: list[str] = []
    for s in range(STEPS):
        step_id = new_id("st_")
        steps.append(
            {
                "step_id": step_id,
                "flow_id": flow_id,
                "step_kind": KINDS[s],
                "agent": "researcher",
                "summary_text": f"Recorded step {s + 1} of the benchmark flow",
                "latency_ms": 40 + s,
                "confidence": 0.92,
                "parent_step_ids": parent,
                "created_at": closed[:-7] + f"{s:06d}Z",  # a microsecond apart, in order
                "created_by": "bench",
                "pii_fields": {"inputs": [], "outputs": []},
                "back_refs": {"llm_call_log_ref": f"llm-{n}-{s}"} if KINDS[s] == "llm_prompt" else {},
                "inputs": {"query": "benchmark question text " * 4, "k": 5},
                "outputs": {"hits": 3, "note": "benchmark answer text " * 4},
            }
        )
        parent = [step_id]
    axis = {"score": 70, "bucket": "high"}
    flow = {
        "flow_id": flow_id,
        "trigger_type": ("user_question", "lab_trend", "claim_review")[n % 3],
        "trigger_ref": f"bench/{n}",
        "trigger_summary": "Benchmark question about the export",
        "trace_id": f"tr-{n}",
        "patient_id": f"pt-{n % 97}",
        "flow_state": "completed",
        "created_by": "bench",
        "created_at": closed,
        "closed_at": closed[:-7] + "500000Z",
        "last_step_at": closed,
        "step_count": STEPS,
        "outcome": {"type": "recommendation_delivered", "summary": "Recommended an answer", "confidence": 0.92},
        "patient_safe_summary": True,
        "dimensions_snapshot": {
            name: axis for name in ("evidence", "consistency", "coverage", "maturity", "recency", "risk")
        },
        "guard_counts": {"checked": STEPS + 2, "unsafe": 0},
        "closed_shard": _active_shard(flow_id),
    }
    return flow, steps


def seed(services: Any, count: int) -> None:
    from flowledger.store import items

    db = services.aws.dynamodb
    flows, steps = services.aws.table_name("flows"), services.aws.table_name("steps")
    batch: list[tuple[str, dict[str, Any]]] = []

    def flush() -> None:
        requests: dict[str, list[dict[str, Any]]] = {}
        for table, item in batch:
            requests.setdefault(table, []).append({"PutRequest": {"Item": items.to_item(item)}})
        while requests:
            requests = db.batch_write_item(RequestItems=requests).get("UnprocessedItems") or {}
        batch.clear()

    for n in range(count):
        flow, flow_steps = flow_item(n)
        for table, item in [(flows, flow), *((steps, s) for s in flow_steps)]:
            batch.append((table, item))
            if len(batch) == 25:
                flush()
    if batch:
        flush()


def peak_kib() -> int:
    """This process's peak resident set (VmHWM). Not getrusage: its ru_maxrss carries the parent's peak
    over fork and exec, and the parent holds the whole moto store."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(endpoint: str, prefix: str, until: str) -> int:
    """One export in this process; prints its figures as JSON."""
    from flowledger.config import load_settings
    from flowledger.reasoning.export import ClosedFlowReader, ExportWindow
    from flowledger.services import build_services

    settings = load_settings(aws_endpoint_url=endpoint, aws_region=REGION, resource_prefix=prefix)
    services = build_services(settings, CREDENTIALS)
    services.aws.dynamodb  # noqa: B018 - the client is built before the baseline is read
    before = peak_kib()
    began = time.perf_counter()
    written = 0
    with open(os.devnull, "w") as sink:
        for record in ClosedFlowReader(services, ExportWindow(until=until)).records():
            sink.write(record.model_dump_json(exclude_none=True) + "\n")
            written += 1
    elapsed = time.perf_counter() - began
    peak = peak_kib()
    print(json.dumps({"flows": written, "seconds": elapsed, "peak_kib": peak, "imports_kib": before}))
    return 0


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        return child(*sys.argv[2:])
    import warnings

    from flowledger.config import load_settings
    from flowledger.local.moto_server import LockedMotoServer
    from flowledger.services import build_services
    from flowledger.store.provision import provision_all

    warnings.filterwarnings("ignore")
    server = LockedMotoServer()
    endpoint = server.start()
    prefix = f"export{int(time.time())}"
    try:
        settings = load_settings(aws_endpoint_url=endpoint, aws_region=REGION, resource_prefix=prefix)
        services = build_services(settings, CREDENTIALS)
        provision_all(services.aws, settings)
        began = time.perf_counter()
        seed(services, max(COUNTS))
        print(f"seeded {max(COUNTS):,} closed flows x {STEPS} steps in {time.perf_counter() - began:.0f} s")
        results = {}
        for count in COUNTS:
            run = subprocess.run(
                [sys.executable, __file__, "--child", endpoint, prefix, stamp(count)],
                capture_output=True,
                text=True,
                check=False,
                env={k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLOWLEDGER_"))},
            )
            if run.returncode != 0:
                print(run.stderr)
                return 1
            results[count] = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"{'flows':>7} {'seconds':>8} {'flows/s':>8} {'peak RSS MB':>12} {'before export MB':>17}")
        for count, figures in results.items():
            assert figures["flows"] == count, figures
            print(
                f"{count:>7,} {figures['seconds']:>8.1f} {count / figures['seconds']:>8.0f}"
                f" {figures['peak_kib'] / 1024:>12.1f} {figures['imports_kib'] / 1024:>17.1f}"
            )
        small, large = (results[c]["peak_kib"] / 1024 for c in COUNTS)
        met = large < TARGET_MB and large <= small * FLAT
        print(
            f"target: peak under {TARGET_MB} MB and flat in the count (at most {FLAT:.0%} of the"
            f" {COUNTS[0]:,}-flow peak at {COUNTS[1]:,}): {'met' if met else 'MISSED'}"
        )
        return 0 if met else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
