"""Import time of each function's entry module against a bare boto3 + pydantic + powertools import.

Each figure is the median of several fresh interpreters' ``-X importtime`` totals (the sum of the
cumulative times of top-level imports). The cold path (import, then a first /health request
through the core function) is printed too, since the decorator stack is built on first call.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from flowledger.api.registry import CAPABILITY_MODULES

ROOT = Path(__file__).resolve().parents[1]
RUNS = 7
BASELINE = "import boto3, pydantic, aws_lambda_powertools"
REST_FUNCTIONS = set(CAPABILITY_MODULES)
HEAVY = ("openai", "numpy", "faiss", "sentence_transformers", "moto", "uvicorn")
TARGET_RATIO = 1.3
COLD_PATH = """
import json, time
start = time.perf_counter()
import handler
event = json.load(open({event!r}))
handler.handler(event, type("Ctx", (), {{"function_name": "bench", "memory_limit_in_mb": 512,
    "invoked_function_arn": "arn:aws:lambda:us-east-1:0:function:bench", "aws_request_id": "r"}})())
print(time.perf_counter() - start)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "POWERTOOLS_TRACE_DISABLED": "1", "POWERTOOLS_METRICS_NAMESPACE": "Bench"}


def import_profile(code: str, cwd: Path) -> tuple[float, dict[str, float]]:
    """Total import milliseconds and the milliseconds spent in each distribution's own modules."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    total = 0.0
    by_package: dict[str, float] = {}
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative, name = line.removeprefix("import time:").split("|")
        package = name.strip().split(".")[0]
        by_package[package] = by_package.get(package, 0.0) + int(self_us) / 1000
        if not name.startswith("  "):  # one leading space: imported by the program itself
            total += int(cumulative) / 1000
    return total, by_package


def imported_modules(cwd: Path) -> set[str]:
    code = "import sys, handler; print('\\n'.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return {name.split(".")[0] for name in result.stdout.split()}


def median_import(code: str, cwd: Path) -> tuple[float, dict[str, float]]:
    samples = [import_profile(code, cwd) for _ in range(RUNS)]
    totals = [total for total, _ in samples]
    return statistics.median(totals), samples[totals.index(sorted(totals)[len(totals) // 2])][1]


def cold_path_ms(function_dir: Path) -> float:
    event = json.loads((ROOT / "tests/fixtures/events/rest_request.json").read_text())
    event_file = ROOT / ".build" / "bench-health-event.json"
    event_file.parent.mkdir(exist_ok=True)
    event_file.write_text(json.dumps(event))
    samples = []
    for _ in range(RUNS):
        result = subprocess.run(
            [sys.executable, "-c", COLD_PATH.format(event=str(event_file))],
            cwd=function_dir,
            env=_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        samples.append(float(result.stdout.strip().splitlines()[-1]) * 1000)
    return statistics.median(samples)


def main() -> int:
    baseline, _ = median_import(BASELINE, ROOT)
    print(f"import time, median of {RUNS} fresh interpreters (baseline `{BASELINE}`: {baseline:.0f} ms)")
    print(f"{'function':<12} {'import ms':>9} {'ratio':>6}  {'target':<8} heaviest packages (own ms)")
    failed = False
    for function_dir in sorted(p for p in (ROOT / "functions").iterdir() if (p / "handler.py").exists()):
        total, top = median_import("import handler", function_dir)
        ratio = total / baseline
        heaviest = ", ".join(f"{name} {ms:.0f}" for name, ms in sorted(top.items(), key=lambda kv: -kv[1])[:3])
        is_rest = function_dir.name in REST_FUNCTIONS
        verdict = ("ok" if ratio <= TARGET_RATIO else "MISSED") if is_rest else "-"
        failed |= verdict == "MISSED"
        print(f"{function_dir.name:<12} {total:>9.0f} {ratio:>6.2f}  {verdict:<8} {heaviest}")
        heavy = sorted(set(HEAVY) & imported_modules(function_dir))
        if heavy:
            failed = True
            print(f"{'':<12} imports heavy modules it does not use: {', '.join(heavy)}")
    print(f"cold path of core (import + first /health request): {cold_path_ms(ROOT / 'functions' / 'core'):.0f} ms")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
