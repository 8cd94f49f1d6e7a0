"""The research loop in the template: every switch set on the jobs function, off by default, on with
``flowledger:researchLoop``, with the critic's strategy from context; a bad value fails the synth."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App

from infra.constructs.research_loop import LOOP_CONTEXT, LOOP_VARIABLES, STRATEGY_CONTEXT, ResearchLoopSwitches
from tests.infra.synth import resources_with
from tests.infra.test_diagnosis_infra import functions


def jobs_variables(resources: dict[str, Any]) -> dict[str, Any]:
    (jobs,) = [f for key, f in functions(resources).items() if key.startswith("JobsFunction")]
    return dict(jobs["Properties"]["Environment"]["Variables"])


def test_by_default_the_loop_is_off_on_the_jobs_function(resources: dict[str, Any]) -> None:
    variables = jobs_variables(resources)
    assert {v: variables[v] for v in LOOP_VARIABLES} == dict.fromkeys(LOOP_VARIABLES, "false")
    assert variables["CRITIC_DISPATCH_STRATEGY"] == "mark_for_review"
    for key, function in functions(resources).items():  # and nowhere else
        if not key.startswith("JobsFunction"):
            assert not set(LOOP_VARIABLES) & set(function["Properties"]["Environment"]["Variables"]), key


def test_the_context_turns_every_switch_on_and_picks_the_strategy() -> None:
    model = {"flowledger:model": {"baseUrl": "https://llm.example.com/v1", "model": "m"}}
    variables = jobs_variables(resources_with({LOOP_CONTEXT: "true", STRATEGY_CONTEXT: "re_research", **model}))
    assert {v: variables[v] for v in LOOP_VARIABLES} == dict.fromkeys(LOOP_VARIABLES, "true")
    assert variables["CRITIC_DISPATCH_STRATEGY"] == "re_research"


@pytest.mark.parametrize(
    ("context", "key"), [({LOOP_CONTEXT: "yes"}, LOOP_CONTEXT), ({STRATEGY_CONTEXT: "x"}, STRATEGY_CONTEXT)]
)
def test_a_bad_value_fails_the_synth_naming_the_key(context: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        ResearchLoopSwitches.from_context(App(context=context).node)


def test_the_loop_without_a_model_fails_the_synth() -> None:
    # The offline model would answer real rows, and its confident answers would seed pathways.
    with pytest.raises(ValueError, match="researchLoop=true needs flowledger:model"):
        resources_with({LOOP_CONTEXT: "true", "flowledger:stage": "dev", "flowledger:model": None})


def test_the_loop_without_flow_capture_fails_the_synth() -> None:
    # Its agents are judged, and pathways mined, from the flows they record.
    with pytest.raises(ValueError, match="researchLoop=true needs flowledger:flowCapture"):
        resources_with({LOOP_CONTEXT: "true", "flowledger:flowCapture": "false"})
