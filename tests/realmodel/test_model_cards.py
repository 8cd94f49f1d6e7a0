"""The model report card on llama-server for two model families: SmolLM2-135M-Instruct (the CI model) and Gemma 3
270M, the base model, which chats in other families' template tokens and loops until its token limit.

Each card runs as a user runs it (`flowledger model eval --json`, its own private `flowledger serve`), with the
diagnosis and answer budgets bounded so a card takes about a minute on one core. What must hold whatever the
model: the card is made for every capability, every turn that reached the model shows the tokens it spent, and
no answer either model published holds a template token or a loop. The cards themselves are kept in
``.build/model-cards/`` and are the figures of docs/real-models.md's model table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from flowledger.modelcard.turns import CAPABILITIES, builtin_turns
from tests.realmodel.servers import ROOT, ModelServer

pytestmark = pytest.mark.realmodel

CARD_SETTINGS = {
    "FLOWLEDGER_MODEL_MAX_TOKENS": "128",
    # A turn's budget of model calls (every turn's, not only a diagnosis's): a table follow-up makes three
    # (the history's assessment, the plan, the answer), and at two ends BUDGET_EXHAUSTED, even offline.
    "FLOWLEDGER_DIAGNOSIS_MAX_MODEL_CALLS": "3",
    "FLOWLEDGER_DIAGNOSIS_MAX_TOOL_CALLS": "2",
    "FLOWLEDGER_DIAGNOSIS_MAX_SECONDS": "30",
    "FLOWLEDGER_MODEL_TIMEOUT_SECONDS": "30",
    "BACKLOG_CONSUMER_ENABLED": "false",  # the research loop would call the same model between turns
}
CARDS = ROOT / ".build" / "model-cards"


def run_card(base_url: str | None = None, model: str | None = None) -> dict[str, Any]:
    """`flowledger model eval --json` as a user runs it, with the budgets above (no endpoint: the offline card)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWLEDGER_", "OPENAI_"))}
    command = [sys.executable, "-m", "flowledger.cli", "model", "eval", "--json"]
    if base_url and model:
        command += ["--base-url", base_url, "--model", model]
    done = subprocess.run(
        command, capture_output=True, text=True, env=environment | CARD_SETTINGS, timeout=900, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the card was not made: {done.stderr.strip()[-3000:]}")
    return dict(json.loads(done.stdout))


def card_of(server: ModelServer) -> dict[str, Any]:
    card = run_card(server.base_url, server.model)
    CARDS.mkdir(parents=True, exist_ok=True)
    (CARDS / f"{server.model}.json").write_text(json.dumps(card))
    return card


@pytest.mark.parametrize("family", ["llama_server", "gemma_server"])
def test_the_card_is_made_and_no_published_answer_holds_junk(family: str, request: pytest.FixtureRequest) -> None:
    server: ModelServer = request.getfixturevalue(family)
    card = card_of(server)
    assert card["model"] == server.model and card["endpoint"] == server.base_url
    assert [c["capability"] for c in card["capabilities"]] == list(CAPABILITIES)
    assert [t["turn_id"] for t in card["turns"]] == [t.id for t in builtin_turns()]
    # Every asked turn reached the model (tokens spent); the cancelled one may end before it does.
    unanswered = [t["turn_id"] for t in card["turns"] if t["capability"] != "cancellation" and t["tokens"] == 0]
    assert unanswered == [], card["turns"]
    assert card["published_junk"] == 0, [t for t in card["turns"] if t["published_junk"]]
