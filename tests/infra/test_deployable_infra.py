"""What a deployment records and answers with: flow capture on by default for every agent, a production
stage that will not synthesize without a model server, and /health on every function saying which model
the chat has."""

from __future__ import annotations

from typing import Any

import pytest

from infra.constructs.flow_capture import FLOW_CAPTURE_CONTEXT, FLOW_CAPTURE_VARIABLE
from infra.constructs.model_config import MODEL_CONTEXT
from infra.constructs.stage import STAGE_CONTEXT
from tests.infra.synth import own_functions, resources_with

# The functions in which agents run and record flows: the chat's executors, the research agents in the jobs.
AGENT_FUNCTIONS = ("ChatFunction", "JobsFunction")
OFFLINE_TRIAL = {STAGE_CONTEXT: "dev", MODEL_CONTEXT: None}


def variables_by_function(resources: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Every Flowledger function's environment (not CDK's own handlers, such as a trial's bucket emptier)."""
    return {
        key: dict(function["Properties"].get("Environment", {}).get("Variables", {}))
        for key, function in own_functions(resources).items()
        if not key.startswith("Custom")
    }


def agent_functions(resources: dict[str, Any]) -> dict[str, dict[str, str]]:
    found = {
        key: variables for key, variables in variables_by_function(resources).items() if key.startswith(AGENT_FUNCTIONS)
    }
    assert {key.startswith("ChatFunction") for key in found} == {True, False}, sorted(found)
    return found


def test_flow_capture_is_on_by_default_for_every_agent(resources: dict[str, Any]) -> None:
    for key, variables in agent_functions(resources).items():
        assert variables[FLOW_CAPTURE_VARIABLE] == "true", key


@pytest.mark.parametrize("off", ["false", False], ids=["cdk -c", "cdk.json"])
def test_flow_capture_switched_off_by_context_is_off_for_every_agent(off: str | bool) -> None:
    for key, variables in agent_functions(resources_with({FLOW_CAPTURE_CONTEXT: off})).items():
        assert variables[FLOW_CAPTURE_VARIABLE] == "false", key


def test_a_bad_flow_capture_value_fails_the_synth_naming_the_key() -> None:
    with pytest.raises(ValueError, match=f"{FLOW_CAPTURE_CONTEXT} must be true or false"):
        resources_with({FLOW_CAPTURE_CONTEXT: "sometimes"})


def test_a_production_stage_without_a_model_fails_the_synth_naming_the_setting() -> None:
    with pytest.raises(ValueError, match=f"{STAGE_CONTEXT}=prod needs {MODEL_CONTEXT}"):
        resources_with({MODEL_CONTEXT: None})
    # A model name alone reaches no server: the offline model would still answer.
    with pytest.raises(ValueError, match=f"{STAGE_CONTEXT}=prod needs {MODEL_CONTEXT}"):
        resources_with({MODEL_CONTEXT: {"model": "gpt-4o-mini"}})


def test_a_trial_may_run_on_the_offline_model_and_every_function_says_so() -> None:
    for key, variables in variables_by_function(resources_with(OFFLINE_TRIAL)).items():
        assert variables["FLOWLEDGER_DEPLOYED_CHAT_MODEL"] == "offline", key


def test_with_a_model_every_function_says_the_chat_has_a_server(resources: dict[str, Any]) -> None:
    for key, variables in variables_by_function(resources).items():
        assert variables["FLOWLEDGER_DEPLOYED_CHAT_MODEL"] == "server", key
