"""The end of every CI log: each phase's time against its budget, each test layer's total and the slowest tests.

    python3 scripts/ci_budget.py --phases PHASE_LOG [--junit REPORT.xml] [--elapsed SECONDS]

PHASE_LOG holds the lines scripts/phase.sh appends (``name  123 s``, maybe ``(failed, exit 2)``); REPORT.xml is
the JUnit report ``make test`` writes (each test's setup, call and teardown summed, as pytest reports them).
A phase over its budget is a warning, never a failure: the budget says when the gate has grown too slow, and
the run's verdict stays the tests'. Standard library only, so it prints even when the venv was never built.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

# Seconds each phase of .ci/run may take on the project's 2-core machine (issue #43); the whole run, 20 minutes.
BUDGETS = {
    "venv": 240,
    "lint and types": 60,
    "tests": 600,
    "docs": 30,
    "synth check": 120,
    "template check": 120,
}
WHOLE_RUN_BUDGET = 1200
SLOWEST = 30
PHASE_LINE = re.compile(r"^(?P<name>.+?)\s+(?P<seconds>\d+) s(?P<rest>.*)$")


def phases(log: Path) -> list[tuple[str, int, str]]:
    """(name, seconds, anything after them) for each line of the phase log, in order."""
    if not log.exists():
        return []
    found = []
    for line in log.read_text().splitlines():
        match = PHASE_LINE.match(line.strip())
        if match:
            found.append((match["name"].strip(), int(match["seconds"]), match["rest"].strip()))
    return found


def phase_table(rows: list[tuple[str, int, str]], elapsed: int | None) -> tuple[list[str], list[str]]:
    """The table's lines and the warnings for phases (and the whole run) past their budgets."""
    lines, warnings = [f"{'phase':<16} {'time':>6}  {'budget':>6}"], []
    for name, seconds, rest in rows:
        budget = BUDGETS.get(name)
        lines.append(f"{name:<16} {seconds:>4} s  {f'{budget} s' if budget else '':>6}  {rest}".rstrip())
        if budget is not None and seconds > budget:
            warnings.append(f"WARNING: phase '{name}' took {seconds} s, over its budget of {budget} s")
    if elapsed is not None:
        lines.append(f"{'whole run':<16} {elapsed:>4} s  {f'{WHOLE_RUN_BUDGET} s':>6}")
        if elapsed > WHOLE_RUN_BUDGET:
            warnings.append(f"WARNING: the whole run took {elapsed} s, over its budget of {WHOLE_RUN_BUDGET} s")
    return lines, warnings


def test_times(report: Path) -> dict[str, float]:
    """Each test's seconds (setup, call and teardown) by node id, from a JUnit report."""
    times: dict[str, float] = {}
    # The report pytest wrote in this run, on this machine: not input from anyone else.
    for case in ElementTree.parse(report).getroot().iter("testcase"):  # noqa: S314
        module = case.get("classname", "").replace(".", "/")
        # pytest names the class path with dots: tests.unit.test_x.TestY -> tests/unit/test_x.py::TestY
        parts = module.split("/")
        split = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts))
        nodeid = "/".join(parts[:split]) + ".py" + "".join(f"::{p}" for p in parts[split:]) + f"::{case.get('name')}"
        times[nodeid] = times.get(nodeid, 0.0) + float(case.get("time") or 0)
    return times


def layer_lines(times: dict[str, float]) -> list[str]:
    """Each layer's (tests/<layer>/) total seconds and test count, the largest first."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for nodeid, seconds in times.items():
        parts = nodeid.split("/")
        layer = parts[1] if len(parts) > 2 else parts[0]
        totals[layer][0] += seconds
        totals[layer][1] += 1
    lines = [f"{'layer':<12} {'seconds':>8} {'tests':>6}"]
    for layer, (seconds, count) in sorted(totals.items(), key=lambda item: -item[1][0]):
        lines.append(f"{layer:<12} {seconds:>8.0f} {int(count):>6}")
    lines.append(f"{'all':<12} {sum(t[0] for t in totals.values()):>8.0f} {len(times):>6}  (summed over the workers)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", type=Path, required=True, help="the phase log scripts/phase.sh wrote")
    parser.add_argument("--junit", type=Path, help="the JUnit report of the tests phase")
    parser.add_argument("--elapsed", type=int, help="the whole run's seconds")
    args = parser.parse_args(argv)

    out = ["== phase timings =="]
    table, warnings = phase_table(phases(args.phases), args.elapsed)
    out += table
    if args.junit and args.junit.exists():
        try:
            times = test_times(args.junit)
        except ElementTree.ParseError as error:
            out.append(f"(no test timings: {args.junit} is not a JUnit report: {error})")
        else:
            slowest = sorted(times.items(), key=lambda item: -item[1])[:SLOWEST]
            out += ["", "== test layers ==", *layer_lines(times), "", f"== the {SLOWEST} slowest tests =="]
            out += [f"{seconds:8.1f} s  {nodeid}" for nodeid, seconds in slowest]
    out += ["", *warnings] if warnings else ["", "every phase within its budget"]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
