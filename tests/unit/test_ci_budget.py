"""scripts/ci_budget.py, the end of every CI log: phases against their budgets, layer totals, the slowest tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ci_budget.py"

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.unit.test_a" name="test_one" time="0.5"/>
<testcase classname="tests.unit.test_a" name="test_two[x]" time="1.5"/>
<testcase classname="tests.e2e.test_b.TestServer" name="test_three" time="40.25"/>
<testcase classname="tests.e2e.test_c" name="test_four" time="2"><failure message="boom"/></testcase>
</testsuite></testsuites>
"""


def budget(tmp_path: Path, phases: str, *extra: str) -> subprocess.CompletedProcess[str]:
    log = tmp_path / "phases"
    log.write_text(phases)
    report = tmp_path / "report.xml"
    report.write_text(REPORT)
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--phases", str(log), "--junit", str(report), *extra],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_phase_over_its_budget_is_a_warning_and_the_exit_stays_0(tmp_path: Path) -> None:
    ran = budget(tmp_path, "venv              205 s\ntests             601 s (failed, exit 1)\n", "--elapsed", "1250")
    assert ran.returncode == 0, ran.stderr
    assert "WARNING: phase 'tests' took 601 s, over its budget of 600 s" in ran.stdout
    assert "WARNING: the whole run took 1250 s, over its budget of 1200 s" in ran.stdout
    assert "venv" in ran.stdout and "WARNING: phase 'venv'" not in ran.stdout  # 205 s of 240: within
    assert "(failed, exit 1)" in ran.stdout  # the phase's own verdict is kept


def test_layers_are_summed_and_the_slowest_tests_named_by_node_id(tmp_path: Path) -> None:
    ran = budget(tmp_path, "tests             300 s\n", "--elapsed", "900")
    out = ran.stdout
    assert "every phase within its budget" in out and "WARNING" not in out
    layers = out.split("== test layers ==")[1].split("==")[0]
    assert [line.split()[:3] for line in layers.strip().splitlines()[1:3]] == [["e2e", "42", "2"], ["unit", "2", "2"]]
    slowest = out.split("slowest tests ==")[1].split("\n\n")[0].strip().splitlines()
    assert slowest[0].split() == ["40.2", "s", "tests/e2e/test_b.py::TestServer::test_three"]
    assert slowest[-1].endswith("tests/unit/test_a.py::test_one")
