"""What the console costs a browser: drawing a 500-step flow's DAG, and the bytes a first load transfers.

A real ``flowledger serve`` in its own process holds one 500-step flow (100 rounds of plan -> three
retrievals -> a synthesis of all three: 699 edges), written through the API as an agent would. Headless
Chromium (Debian's, as the browser tests drive it) opens ``/console/flows/{id}`` in a fresh context each
run, so each load is a first visit with an empty cache.

Per run, from the page's own performance timeline: navigation start to the page's ready mark
(``flowledger:flow-ready``: signed call answered, DAG laid out and painted, table built), and the DAG's
layout and draw (``flowledger:dag-layout`` / ``flowledger:dag-draw``, measured by ``console/js/dag.js``).
Medians over RUNS runs after one warm-up. Bytes: the first load's transferred sizes from the DevTools
protocol (``Network.loadingFinished.encodedDataLength``, gzip as the dev server sends it), the console's
own files apart from the API's data. Target: the console's files under 200 KB compressed.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
from serving import free_port, wait_for

from flowledger.ids import new_id
from flowledger.local.datadir import DataDir

FLOWLEDGER = [sys.executable, "-m", "flowledger.cli"]
CHROMIUM = os.environ.get("FLOWLEDGER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [  # as tests/browser/conftest.py: no background traffic, no sandbox in a container
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROUNDS = 100  # x 5 steps = 500, the most a flow may hold
BATCH = 49
RUNS = 5
TARGET_KB = 200
READY = "main[data-ready='true']"
TIMELINE = """() => {
  const one = (name, field) => performance.getEntriesByName(name)[0]?.[field] ?? null;
  return {
    ready: one('flowledger:flow-ready', 'startTime'),
    layout: one('flowledger:dag-layout', 'duration'),
    draw: one('flowledger:dag-draw', 'duration'),
    api: performance.getEntriesByType('resource').find((r) => r.name.includes('/admin/'))?.duration ?? null,
    nodes: document.querySelectorAll('.dag svg [data-step-id]').length,
    edges: document.querySelectorAll('.dag svg path.edge').length,
  };
}"""


def fan_in_steps() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    previous: str | None = None
    for g in range(ROUNDS):
        plan: dict[str, Any] = {
            "step_id": new_id("st_"),
            "step_kind": "planning",
            "agent": "planner",
            "summary_text": f"Plan round {g}",
        }
        plan["parent_step_ids"] = [previous] if previous else []
        found = [
            {
                "step_id": new_id("st_"),
                "step_kind": "retrieval",
                "agent": "researcher",
                "summary_text": f"Passages {g}.{k}",
                "parent_step_ids": [plan["step_id"]],
                "confidence": 0.8,
                "latency_ms": 40,
            }
            for k in range(3)
        ]
        synthesis = {
            "step_id": new_id("st_"),
            "step_kind": "synthesis",
            "agent": "writer",
            "summary_text": f"Synthesis of round {g}",
            "parent_step_ids": [f["step_id"] for f in found],
        }
        steps += [plan, *found, synthesis]
        previous = str(synthesis["step_id"])
    return steps


def seed(base: str, token: str) -> tuple[str, int]:
    """One closed 500-step flow; its id and its edge count."""
    headers = {"authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        opened = client.post(
            "/api/reasoning/flows",
            json={"trigger_type": "bench_console", "trigger_ref": "bench/500", "trigger_summary": "500 steps"},
        )
        opened.raise_for_status()
        flow_id = str(opened.json()["flow_id"])
        steps = fan_in_steps()
        for start in range(0, len(steps), BATCH):
            client.post(
                f"/api/reasoning/flows/{flow_id}/steps:batch", json={"steps": steps[start : start + BATCH]}
            ).raise_for_status()
        closing = {"state": "completed", "outcome": {"type": "no_action", "summary": "Benchmark"}}
        client.patch(f"/api/reasoning/flows/{flow_id}", json=closing).raise_for_status()
    return flow_id, sum(len(s["parent_step_ids"]) for s in steps)


def one_load(browser: Any, url: str) -> tuple[dict[str, Any], dict[str, int], int]:
    """Open ``url`` in a fresh context: the page's timeline, transferred bytes by URL, gzip responses."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        page = context.new_page()
        cdp = context.new_cdp_session(page)
        urls: dict[str, str] = {}
        sizes: dict[str, int] = defaultdict(int)
        gzipped = 0

        def received(event: dict[str, Any]) -> None:
            nonlocal gzipped
            urls[event["requestId"]] = event["response"]["url"]
            headers = {k.lower(): v for k, v in event["response"].get("headers", {}).items()}
            gzipped += headers.get("content-encoding") == "gzip"

        def finished(event: dict[str, Any]) -> None:
            sizes[urls.get(event["requestId"], event["requestId"])] += int(event["encodedDataLength"])

        cdp.on("Network.responseReceived", received)
        cdp.on("Network.loadingFinished", finished)
        cdp.send("Network.enable")
        page.goto(url)
        page.wait_for_selector(READY, timeout=60_000)
        page.wait_for_load_state("networkidle")
        return page.evaluate(TIMELINE), dict(sizes), gzipped
    finally:
        context.close()


def main() -> int:
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).is_file()):
        print(f"no Chromium at {CHROMIUM} (apt-get install chromium): not measured")
        return 1
    from playwright.sync_api import sync_playwright

    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OPENAI_", "FLOWLEDGER_"))}
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch) / "data"
        port = free_port()
        server = subprocess.Popen(
            [*FLOWLEDGER, "serve", "--port", str(port), "--data-dir", str(data_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=environment,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for(f"{base}/health", server)
            token = DataDir(data_dir).token("bench-console", ["reasoning.write"])
            flow_id, edges = seed(base, token)
            url = f"{base}/console/flows/{flow_id}"
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    first, sizes, gzipped = one_load(browser, url)  # the first load: the bytes; its timing is warm-up
                    runs = [one_load(browser, url)[0] for _ in range(RUNS)]
                finally:
                    browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)

    for timeline in (first, *runs):
        if (timeline["nodes"], timeline["edges"]) != (500, edges) or timeline["ready"] is None:
            raise SystemExit(f"the page did not draw the whole flow: {timeline}")
    api = sum(size for address, size in sizes.items() if "/admin/" in address)
    console = sum(size for address, size in sizes.items() if "/console/" in address)
    other = sum(sizes.values()) - api - console
    ready, api_ms, layout, draw = (
        statistics.median(r[key] for r in runs) for key in ("ready", "api", "layout", "draw")
    )
    print(f"500-step flow ({edges} edges), headless Chromium, median of {RUNS} first visits after 1 warm-up")
    print(f"  navigation to page ready   {ready:8.0f} ms   (signed call, layout, draw, step table)")
    print(f"  of which the signed call   {api_ms:8.0f} ms   (GET /admin/v1/reasoning/flows/{{id}}, 500 steps)")
    print(f"  DAG layout (dagre)         {layout:8.0f} ms")
    print(f"  DAG draw (SVG to painted)  {draw:8.0f} ms")
    console_files = sum(1 for address in sizes if "/console/" in address)
    print(
        f"first load, transferred: console {console / 1024:.1f} KB in {console_files} files "
        f"({gzipped} responses gzip), flow data {api / 1024:.1f} KB, other {other / 1024:.1f} KB"
    )
    met = console < TARGET_KB * 1024
    print(f"console under {TARGET_KB} KB compressed: {'yes' if met else 'NO'} ({console / 1024:.1f} KB)")
    if not met:
        print(f"TARGET MISSED: the console's first load transfers more than {TARGET_KB} KB")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
