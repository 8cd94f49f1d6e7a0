"""`make bench`: every benchmark, one after another, figures printed as they come.

Benchmarks measure; they do not gate. A benchmark that misses its target says so in its output and
exits 1, and the summary at the end lists those; one that dies of an uncaught exception (or a signal) is
named in the summary as a crash, with its last line. `make bench` itself succeeds either way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TRACEBACK = "Traceback (most recent call last):"  # what Python prints for an uncaught exception
BENCHMARKS = [
    "import_time.py",
    "ledger.py",
    "ledger_scale.py",
    "evidence.py",
    "checkpoints_scale.py",
    "flows.py",
    "chat.py",
    "diagnosis.py",
    "backlog.py",
    "pathways.py",
    "devserver.py",
    "cli_start.py",
    "serve_start.py",
    "journal.py",
    "full_size.py",
    "tabular.py",
    "continuity.py",
    "recorder.py",
    "otlp.py",
    "erasure.py",
    "flow_export.py",
    "console.py",
    "real_model.py",
    "model_cards.py",
]


def main() -> int:
    here = Path(__file__).parent
    # Benchmarks that run the services in process would print an EMF line per metric, as Lambda
    # does; `make bench` prints figures only, so those records go nowhere (servers it starts keep
    # theirs in their data dir as ever).
    environment = {**os.environ, "FLOWLEDGER_METRICS_FILE": os.devnull}
    missed: list[str] = []
    crashed: list[str] = []
    for name in BENCHMARKS:
        print(f"== {name}", flush=True)
        status, traceback, last = run_one(here / name, environment)
        if traceback or status < 0:  # an uncaught exception, or killed by a signal: a crash, not a result
            crashed.append(f"{name} ({last or f'signal {-status}'})")
        elif status != 0:  # the benchmark ran to its end and said what it missed
            missed.append(name)
    print(f"== summary: {summary(missed, crashed)}")
    return 0


def run_one(path: Path, environment: dict[str, str]) -> tuple[int, bool, str]:
    """Run one benchmark, its output passed through as it comes: its exit status, whether it printed a
    traceback (it crashed), and its last line (a crash's exception)."""
    process = subprocess.Popen(
        [sys.executable, str(path)], env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    traceback, last = False, ""
    for line in process.stdout:
        print(line, end="", flush=True)
        traceback = traceback or line.startswith(TRACEBACK)
        last = line.strip() or last
    return process.wait(), traceback, last[:200]


def summary(missed: list[str], crashed: list[str]) -> str:
    parts = [f"CRASHED: {'; '.join(crashed)}"] if crashed else []
    parts += [f"targets missed in {', '.join(missed)}"] if missed else []
    return " | ".join(parts) or "every target met"


if __name__ == "__main__":
    sys.exit(main())
