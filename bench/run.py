"""`make bench`: every benchmark, one after another, figures printed as they come.

Benchmarks measure; they do not gate. A benchmark that misses its target says so in its output
and exits 1, and the summary at the end lists those, but `make bench` itself succeeds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = [
    "import_time.py",
    "ledger.py",
    "flows.py",
    "chat.py",
    "diagnosis.py",
    "backlog.py",
    "pathways.py",
    "devserver.py",
    "cli_start.py",
    "serve_start.py",
    "tabular.py",
    "continuity.py",
    "recorder.py",
    "flow_export.py",
    "console.py",
    "real_model.py",
]


def main() -> int:
    here = Path(__file__).parent
    missed = []
    for name in BENCHMARKS:
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(here / name)], check=False).returncode != 0:
            missed.append(name)
    print(f"== summary: {'targets missed in ' + ', '.join(missed) if missed else 'every target met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
