"""`make bench`: every benchmark, one after another, figures printed as they come.

Benchmarks measure; they do not gate. A benchmark that misses its target says so in its output
and exits 1, and the summary at the end lists those, but `make bench` itself succeeds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = [
    "import_time.py",
    "ledger.py",
    "evidence.py",
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
    missed = []
    for name in BENCHMARKS:
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(here / name)], check=False, env=environment).returncode != 0:
            missed.append(name)
    print(f"== summary: {'targets missed in ' + ', '.join(missed) if missed else 'every target met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
