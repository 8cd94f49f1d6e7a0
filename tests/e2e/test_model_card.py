"""`flowledger model eval` as a user runs it: the offline model's card (the baseline), a model that answers
junk scored as such with nothing of it published, and a bad turns file refused before anything starts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from flowledger.llm.output_checks import template_token
from flowledger.modelcard.turns import CAPABILITIES, builtin_turns
from tests.e2e.conftest import FLOWLEDGER, clean_env
from tests.integration.conftest import ScriptedOpenAI

pytestmark = pytest.mark.e2e
JUNK = "Hi!<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n" * 6


def card(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FLOWLEDGER, "model", "eval", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**clean_env(), **(env or {})},
    )


def test_the_offline_models_card_is_the_baseline() -> None:
    made = card("--json")
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert (report["model"], report["endpoint"], report["turns_version"]) == ("offline model", "offline", 1)
    assert [row["capability"] for row in report["capabilities"]] == list(CAPABILITIES)
    assert [turn["turn_id"] for turn in report["turns"]] == [turn.id for turn in builtin_turns()]
    assert all(row["junk"] == 0 and row["refusals"] == 0 for row in report["capabilities"])
    # The offline model answers every kind of turn the chat has: the baseline serves them all.
    assert report["serves"] == ["routing", "knowledge", "diagnosis", "table", "cancellation"], made.stdout
    assert f"[{len(builtin_turns())}/{len(builtin_turns())}]" in made.stderr  # progress, one line a turn


def junk_model(body: dict[str, Any]) -> dict[str, Any]:
    """Routes every turn to small talk, then answers with chat-template tokens on a loop."""
    schema = json.dumps(body.get("response_format") or {})
    if '"intent"' in schema:
        return {"json": {"intent": "SYSTEM_CHAT"}}
    return {"text": JUNK}


def test_a_model_answering_junk_is_scored_so_and_none_of_it_is_published(tmp_path: Path) -> None:
    model = ScriptedOpenAI()
    model.script = [junk_model] * 1000
    try:
        made = card("--base-url", model.base_url, "--model", "junky")
    finally:
        model.close()
    assert made.returncode == 0, made.stderr
    text = made.stdout
    assert "junky at " + model.base_url in text
    routing = next(line for line in text.splitlines() if line.startswith("routing "))
    assert " 100% " in routing  # every routed turn's answer was junk, refused
    assert "routing by label: small talk 4/4, knowledge 0/4, diagnosis 0/3, table 0/2" in text
    # A junk model can still be cancelled cleanly, when the cancel arrives before its answer does.
    assert text.splitlines()[-1] in ("this model can serve: none", "this model can serve: cancellation")
    assert template_token(text) is None  # the card quotes no model text either


def test_a_bad_turns_file_is_refused_in_one_line_before_anything_starts(tmp_path: Path) -> None:
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"version": 1, "turns": [{"id": "x", "capability": "routing", "query": "hi"}]}))
    refused = card("--turns", str(mine))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "names the intent it must be routed to" in refused.stderr
    assert "starting a private flowledger serve" not in refused.stderr
    missing = card("--turns", str(tmp_path / "missing.json"))
    assert missing.returncode == 2 and "cannot be read" in missing.stderr
