"""The offline model's research rules, through ``OfflineChatModel.complete`` with the critic's real schema:
a claim the evidence holds is accepted, one it does not is rejected, and a rejection of evidence that
changed since the claim read it says so."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from flowledger.llm.offline import OfflineChatModel
from flowledger.llm.ports import Message
from flowledger.research.agents.critic import CLAIM_CHECK_SCHEMA

MODEL = OfflineChatModel()
CLAIM = "The HbA1c trend lags a dose change for months"  # salient: hba1c, trend, lags, dose, change, months


def check(claim: str, *excerpts: tuple[str, bool]) -> dict[str, Any]:
    request = {
        "claim": claim,
        "question": "Why does the HbA1c trend rise?",
        "evidence": [
            {"document_id": f"doc_{n:016d}", "title": "t", "text": text, "changed_since_claim": changed}
            for n, (text, changed) in enumerate(excerpts)
        ],
    }
    reply = MODEL.complete([Message("user", json.dumps(request))], schema=CLAIM_CHECK_SCHEMA, timeout_seconds=1.0)
    jsonschema.validate(reply.data, CLAIM_CHECK_SCHEMA.schema)
    return dict(reply.data or {})


def test_a_claim_the_evidence_holds_is_accepted_as_supported() -> None:
    assert check(CLAIM, ("After a dose change the HbA1c trend lags by months.", False)) == {
        "verdict": "accept",
        "reason_code": "supported",
    }


def test_a_claim_whose_words_are_half_in_the_evidence_is_accepted_and_under_half_rejected() -> None:
    assert check(CLAIM, ("The HbA1c trend", False), ("after a dose", False))["verdict"] == "accept"  # 3 of 6
    assert check(CLAIM, ("The HbA1c trend", False))["verdict"] == "reject"  # 2 of 6


@pytest.mark.parametrize(("changed", "reason"), [(False, "unsupported"), (True, "evidence_changed")])
def test_a_claim_the_evidence_does_not_hold_is_rejected_saying_whether_it_changed(changed: bool, reason: str) -> None:
    assert check(CLAIM, ("The canteen opens at noon and serves soup.", changed)) == {
        "verdict": "reject",
        "reason_code": reason,
    }


def test_an_empty_claim_is_never_accepted() -> None:
    assert check("", ("The HbA1c trend lags a dose change by months.", False))["verdict"] == "reject"
