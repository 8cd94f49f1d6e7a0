"""`make bench`: every benchmark, one after another, figures printed as they come."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = ["import_time.py", "ledger.py", "flows.py", "chat.py", "backlog.py"]


def main() -> int:
    here = Path(__file__).parent
    status = 0
    for name in BENCHMARKS:
        print(f"== {name}", flush=True)
        status |= subprocess.run([sys.executable, str(here / name)], check=False).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
