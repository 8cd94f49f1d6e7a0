"""How fast `flowledger serve` starts and stops, as a user runs it.

From launching the command to the first 200 from ``/health`` and to the banner's "ready in" line,
on a fresh data dir and on one holding a saved store; and from a Ctrl-C sent the moment ``/health``
answers (the start still finishing) to the process's exit. Medians of a few runs each.
Targets: /health within 5 s fresh and 3 s restored, a stop within 3 s.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from serving import free_port

RUNS = 3
FRESH_TARGET_SECONDS = 5.0
RESTORED_TARGET_SECONDS = 3.0
STOP_TARGET_SECONDS = 3.0
GIVE_UP_SECONDS = 120.0


@dataclass
class Start:
    health: float  # seconds from launch to the first 200 from /health
    ready: float  # ... to the banner's ready line
    stop: float  # seconds from the stop signal to the exit


def flowledger() -> list[str]:
    """The console script as a user runs it (``python -m flowledger.cli`` where it is not installed)."""
    script = shutil.which("flowledger", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "flowledger.cli"]


def start_once(data_dir: Path, environment: dict[str, str], *, stop_early: bool = False) -> Start:
    """One start; stopped with Ctrl-C once ready, or the moment /health answers with ``stop_early``."""
    port, log = free_port(), data_dir.parent / "serve.log"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}/health"
    began = time.perf_counter()
    with log.open("w") as sink:
        server = subprocess.Popen(
            [*flowledger(), "serve", "--port", str(port), "--data-dir", str(data_dir)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    try:
        health = _until(lambda: _answers(url), server, began, log)
        ready = health if stop_early else _until(lambda: "\nready in " in log.read_text(), server, began, log)
        stopping = time.perf_counter()
        server.send_signal(signal.SIGINT)
        server.wait(timeout=GIVE_UP_SECONDS)
        return Start(health=health, ready=ready, stop=time.perf_counter() - stopping)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _until(condition: Callable[[], bool], server: subprocess.Popen[bytes], began: float, log: Path) -> float:
    """Seconds since ``began`` when ``condition()`` first holds (polled every 20 ms)."""
    while not condition():
        if server.poll() is not None or time.perf_counter() - began > GIVE_UP_SECONDS:
            raise SystemExit(f"flowledger serve did not start (exit code {server.poll()}): {log.read_text()[-300:]}")
        time.sleep(0.02)
    return time.perf_counter() - began


def verdict(seconds: float, target: float) -> str:
    return f"target <= {target:.1f} s  {'ok' if seconds <= target else 'MISSED'}"


def main() -> int:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OPENAI_", "FLOWLEDGER_"))}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        start_once(root / "warm" / "data", environment)  # fills the file cache and byte-code; not counted
        fresh = [start_once(root / f"fresh-{n}" / "data", environment) for n in range(RUNS)]
        saved = root / "fresh-0" / "data"  # stopped once ready, so its store was saved
        restored = [start_once(saved, environment) for _ in range(RUNS)]
        early = [start_once(saved, environment, stop_early=True) for _ in range(RUNS)]

    def median(starts: list[Start], field: str) -> float:
        return statistics.median(getattr(start, field) for start in starts)

    rows = [
        ("to /health, fresh store", median(fresh, "health"), FRESH_TARGET_SECONDS),
        ("to the ready line, fresh store", median(fresh, "ready"), None),
        ("to /health, restored store", median(restored, "health"), RESTORED_TARGET_SECONDS),
        ("to the ready line, restored store", median(restored, "ready"), None),
        ("Ctrl-C once ready, to exit", median(restored, "stop"), STOP_TARGET_SECONDS),
        ("Ctrl-C during the start, to exit", median(early, "stop"), STOP_TARGET_SECONDS),
    ]
    print(f"flowledger serve start and stop, median of {RUNS} runs")
    for label, seconds, target in rows:
        print(f"{label:<40} {seconds:>7.2f} s  {verdict(seconds, target) if target else ''}".rstrip())
    return 0 if all(target is None or seconds <= target for _, seconds, target in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
