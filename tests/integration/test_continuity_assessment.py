"""The history assessment through the real OpenAIChatModel adapter against the scripted
OpenAI-compatible server on loopback: the strict schema is sent, a valid object decides, and
anything else (fenced JSON, a wrong enum, a failing server) reruns both engines, never a guess."""

from __future__ import annotations

from typing import Any

import pytest

from flowledger.continuity.refs import GroundedRef
from flowledger.continuity.sufficiency import SufficiencyReason, assess
from flowledger.llm.openai_adapter import OpenAIChatModel
from flowledger.tabular.plan import parse_plan
from tests.integration.conftest import ScriptedOpenAI
from tests.unit.test_continuity_refs import ref_fields

TABLE = GroundedRef.model_validate(ref_fields())
PLAN = parse_plan({"filters": [], "group_by": ["product"], "aggregates": [], "order_by": [], "limit": None})


def model(server: ScriptedOpenAI) -> OpenAIChatModel:
    return OpenAIChatModel("scripted", api_key=None, base_url=server.base_url)


def test_the_strict_schema_is_sent_and_a_valid_answer_decides(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.script.append(
        {"json": {"decision": "tabular", "standalone_query": "Which product sold most in sales.csv?"}}
    )
    decision = assess("which one sold most?", [TABLE], PLAN, model(scripted_openai), timeout_seconds=5)
    assert (decision.decision, decision.rewrite, decision.tokens) == (
        "tabular",
        "Which product sold most in sales.csv?",
        18,
    )
    [request] = scripted_openai.requests
    sent = request["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["strict"] is True
    assert sent["json_schema"]["name"] == "history_assessment"
    assert sent["json_schema"]["schema"]["required"] == ["decision", "standalone_query"]


def test_the_model_is_not_called_for_a_rephrasing(scripted_openai: ScriptedOpenAI) -> None:
    decision = assess("say that more briefly", [TABLE], PLAN, model(scripted_openai), timeout_seconds=5)
    assert decision.reason is SufficiencyReason.HISTORY_REPHRASE and scripted_openai.requests == []


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"raw": '```json\n{"decision": "none", "standalone_query": "x"}\n```'}, SufficiencyReason.ASSESSMENT_INVALID),
        ({"raw": 'Sure! {"decision": "none", "standalone_query": "x"}'}, SufficiencyReason.ASSESSMENT_INVALID),
        ({"json": {"decision": "NONE", "standalone_query": "x"}}, SufficiencyReason.ASSESSMENT_INVALID),
        ({"json": {"decision": "none", "standalone_query": "x", "why": "y"}}, SufficiencyReason.ASSESSMENT_INVALID),
        ({"status": 500}, SufficiencyReason.ASSESSMENT_UNAVAILABLE),
    ],
)
def test_anything_but_the_exact_object_reruns_both(
    scripted_openai: ScriptedOpenAI, entry: dict[str, Any], reason: SufficiencyReason
) -> None:
    scripted_openai.script.append(entry)
    decision = assess("what else?", [TABLE], PLAN, model(scripted_openai), timeout_seconds=5)
    assert (decision.decision, decision.reason, decision.rewrite) == ("both", reason, "what else?")
    assert len(scripted_openai.requests) == 1  # one call: the assessment is not retried here
