"""`flowledger flows replay` as a user runs it: the console script in a subprocess, its output and exit status."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import ROOT

FLOWLEDGER = str(ROOT / ".venv" / "bin" / "flowledger")
CASES = ROOT / "layers" / "core" / "python" / "flowledger" / "replay" / "cases"


def flowledger(*argv: str) -> subprocess.CompletedProcess[str]:
    # No model, store or capture setting of the machine reaches the replay: it is the same everywhere.
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AWS_", "FLOWLEDGER_"))}
    return subprocess.run([FLOWLEDGER, *argv], capture_output=True, text=True, env=environment, timeout=120)


def test_the_stub_replays_the_packaged_cases_green() -> None:
    done = flowledger("flows", "replay")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "12 cases via stub: 12 matched, 0 sequence drift, 0 outcome drift, 0 error, 0 skipped;"
        " drift 0.00% of 12 compared (threshold 0.00%): PASS\n"
    )


def test_the_researcher_runs_its_cases_and_reports_them_as_json() -> None:
    done = flowledger("flows", "replay", "--invoker", "researcher", "--json")
    assert (done.returncode, done.stderr) == (0, "")
    report = json.loads(done.stdout)
    assert (report["invoker"], report["passed"], report["compared"], report["matched"]) == ("researcher", True, 3, 3)
    ran = {r["case_id"]: r for r in report["results"] if r["finding"] != "skipped"}
    assert ran["researcher-happy"]["steps"] == ["retrieval", "llm_prompt", "verdict"]
    assert ran["researcher-gives-up"]["outcome"] == "error"
    assert all(r["flow_id"].startswith("fl_") for r in ran.values())


def test_drift_is_exit_1_unless_the_threshold_allows_it(tmp_path: Path) -> None:
    for name in ("chat-system.json", "researcher-happy.json"):
        (tmp_path / name).write_text((CASES / name).read_text())
    drifting = json.loads((CASES / "chat-system.json").read_text())
    drifting["expected"]["steps"] = ["routing", "system_chat", "release"]  # no chat_turn signature has it
    (tmp_path / "chat-system.json").write_text(json.dumps(drifting))
    done = flowledger("flows", "replay", "--cases", str(tmp_path))
    assert done.returncode == 1
    assert done.stdout.splitlines()[0].startswith("sequence_drift  chat-system  chat_turn: corpus: ")
    assert done.stdout.splitlines()[-1].endswith("drift 50.00% of 2 compared (threshold 0.00%): FAIL")
    assert flowledger("flows", "replay", "--cases", str(tmp_path), "--threshold", "0.5").returncode == 0


def test_a_replay_that_cannot_run_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{")
    done = flowledger("flows", "replay", "--cases", str(tmp_path))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"flowledger: error: {tmp_path}/broken.json: not JSON")
    assert done.stderr.count("\n") == 1
    (tmp_path / "broken.json").write_text((CASES / "chat-system.json").read_text())
    done = flowledger("flows", "replay", "--cases", str(tmp_path), "--invoker", "critic")
    assert (done.returncode, done.stderr) == (2, "flowledger: error: none of the 1 cases is for the critic invoker\n")
    assert flowledger("flows", "replay", "--invoker", "planner").returncode == 2
    assert flowledger("flows", "replay", "--corpus", str(tmp_path / "missing.json")).returncode == 2
