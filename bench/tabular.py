"""The tabular engine against pandas on strings: a group-by with two aggregates over a 1,000,000-row CSV.

The engine side converts the CSV once to Parquet (timed: the one-off cost per version), then answers
``region -> sum(amount), avg(quantity)`` with ``run_plan`` on the Parquet bytes (a fresh locked connection
each time, as a request would). The peer is what simplechat does: pandas reads the CSV with every column a
string, and each query converts the two numeric columns before grouping. Each side starts from its stored
form (the engine from the Parquet bytes, opening a fresh locked database; pandas from the CSV): that ratio is
the target. pandas with its string frame already in memory, its best case, is printed beside it.

Each side runs in its own process, so its peak memory is its own: ``ru_maxrss`` of that process, which
includes the interpreter and its imports (printed as the baseline, measured before any work). Same
machine, same run, medians of several repetitions; the answers of both sides must agree.
Target: the engine at least 10x faster per query.
"""

from __future__ import annotations

import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROWS = 1_000_000
REPETITIONS = 7
COLD_REPETITIONS = 5  # pandas reading the CSV each time: about 2 s a call
TARGET_RATIO = 10.0
PLAN = {
    "filters": [],
    "group_by": ["region"],
    "aggregates": [
        {"function": "sum", "column": "amount", "alias": "total_amount"},
        {"function": "avg", "column": "quantity", "alias": "avg_quantity"},
    ],
    "order_by": [],
    "limit": None,
}


def generate_csv(path: Path) -> None:
    """A deterministic CSV: region (10 values), product (200), amount (float), quantity (int), day (date)."""
    rng = random.Random(20240101)
    start = date(2024, 1, 1)
    days = [(start + timedelta(days=offset)).isoformat() for offset in range(366)]
    with path.open("w") as out:
        out.write("region,product,amount,quantity,day\n")
        lines = []
        for _ in range(ROWS):
            lines.append(
                f"region_{rng.randrange(10)},product_{rng.randrange(200):03d},"
                f"{rng.randrange(100, 100_000) / 100:.2f},{rng.randrange(1, 50)},{days[rng.randrange(366)]}\n"
            )
        out.writelines(lines)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def side_convert(csv_path: Path, out: Path) -> dict[str, Any]:
    from flowledger.tabular import convert_table

    baseline = _peak_mib()
    body = csv_path.read_bytes()
    began = time.perf_counter()
    table = convert_table(body, "csv")
    seconds = time.perf_counter() - began
    out.joinpath("table.parquet").write_bytes(table.parquet)
    out.joinpath("columns.json").write_text(json.dumps([column.model_dump() for column in table.columns]))
    return {
        "seconds": seconds,
        "rows": table.row_count,
        "columns": [f"{c.name} {c.type}" for c in table.columns],
        "parquet_bytes": len(table.parquet),
        "csv_bytes": len(body),
        "baseline_mib": baseline,
        "peak_mib": _peak_mib(),
    }


def side_engine(out: Path) -> dict[str, Any]:
    from flowledger.tabular import TabularColumn, parse_plan, run_plan

    baseline = _peak_mib()
    parquet = out.joinpath("table.parquet").read_bytes()
    columns = [TabularColumn(**column) for column in json.loads(out.joinpath("columns.json").read_text())]
    plan = parse_plan(PLAN)
    times, result = [], None
    for _ in range(REPETITIONS):
        began = time.perf_counter()
        result = run_plan(parquet, plan, columns)
        times.append(time.perf_counter() - began)
    assert result is not None
    answer = {row[0]: row[1:] for row in result.rows}
    return {"times": times, "answer": answer, "baseline_mib": baseline, "peak_mib": _peak_mib()}


def side_pandas(csv_path: Path) -> dict[str, Any]:
    import pandas as pd

    def query(frame: Any) -> Any:
        typed = frame.assign(amount=pd.to_numeric(frame["amount"]), quantity=pd.to_numeric(frame["quantity"]))
        return typed.groupby("region").agg(total_amount=("amount", "sum"), avg_quantity=("quantity", "mean"))

    baseline = _peak_mib()
    cold, warm, grouped = [], [], None
    for _ in range(COLD_REPETITIONS):
        began = time.perf_counter()
        frame = pd.read_csv(csv_path, dtype=str)  # from its stored form, as the engine starts from its Parquet
        grouped = query(frame)
        cold.append(time.perf_counter() - began)
    for _ in range(REPETITIONS):
        began = time.perf_counter()
        grouped = query(frame)  # the peer's best case: the string frame already in memory
        warm.append(time.perf_counter() - began)
    assert grouped is not None
    answer = {str(region): [float(row.total_amount), float(row.avg_quantity)] for region, row in grouped.iterrows()}
    return {"times": cold, "warm_times": warm, "answer": answer, "baseline_mib": baseline, "peak_mib": _peak_mib()}


def _in_process(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _agree(engine: dict[str, list[float]], peer: dict[str, list[float]]) -> bool:
    if sorted(engine) != sorted(peer):
        return False
    return all(
        abs(a - b) <= 1e-9 * max(1.0, abs(b)) for key in engine for a, b in zip(engine[key], peer[key], strict=True)
    )


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-tabular-") as directory:
        work = Path(directory)
        csv_path = work / "sales.csv"
        began = time.perf_counter()
        generate_csv(csv_path)
        generated = time.perf_counter() - began
        converted = _in_process("convert", str(csv_path), str(work))
        engine = _in_process("engine", str(work))
        peer = _in_process("pandas", str(csv_path))
    engine_ms = statistics.median(engine["times"]) * 1000
    peer_ms = statistics.median(peer["times"]) * 1000
    warm_ms = statistics.median(peer["warm_times"]) * 1000
    ratio = peer_ms / engine_ms
    agree = _agree(engine["answer"], peer["answer"])
    print(
        f"group-by region -> sum(amount), avg(quantity) over a {ROWS:,}-row CSV "
        f"({converted['csv_bytes'] / 2**20:.1f} MiB, generated in {generated:.1f} s); "
        f"medians, each side in its own process"
    )
    print(
        f"  conversion (once per version): {converted['seconds']:6.2f} s -> Parquet "
        f"{converted['parquet_bytes'] / 2**20:.1f} MiB, columns {', '.join(converted['columns'])}; "
        f"peak RSS {converted['peak_mib']:.0f} MiB"
    )
    print(
        f"  engine, from the Parquet bytes (fresh locked database each query, {REPETITIONS} runs): "
        f"{engine_ms:8.1f} ms   peak RSS {engine['peak_mib']:4.0f} MiB (after imports {engine['baseline_mib']:.0f})"
    )
    print(
        f"  pandas, from the CSV read as strings, numbers cast per query ({COLD_REPETITIONS} runs): "
        f"{peer_ms:8.1f} ms   peak RSS {peer['peak_mib']:4.0f} MiB (after imports {peer['baseline_mib']:.0f})"
    )
    print(
        f"  pandas with the string frame already in memory (its best case, {REPETITIONS} runs): {warm_ms:8.1f} ms "
        f"= {warm_ms / engine_ms:.1f}x the engine's time"
    )
    print(
        f"  ratio {ratio:.1f}x faster per query, each side from its stored form (target >= {TARGET_RATIO:.0f}x); "
        f"answers agree: {'yes' if agree else 'NO'}"
    )
    return 0 if ratio >= TARGET_RATIO and agree else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        side = sys.argv[1]
        paths = [Path(arg) for arg in sys.argv[2:]]
        figures = {"convert": side_convert, "engine": side_engine, "pandas": side_pandas}[side](*paths)
        print(json.dumps(figures))
        sys.exit(0)
    sys.exit(main())
