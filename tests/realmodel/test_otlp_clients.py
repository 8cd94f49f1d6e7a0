"""Real clients send their traces to `flowledger serve` over OTLP, as the guide (docs/otlp.md) shows: an OpenAI
client instrumented by OpenInference talking to llama.cpp's llama-server, and the OpenAI Agents SDK with a tool
(its chat completions model pointed at llama-cpp-python's server, which enforces a named tool choice, so the
tool is really called). Each run's flow is read back step by step, and verifies offline."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import RunningServer, launch_server
from tests.otlp_flows import flow_of, run_snippet, verifies_offline
from tests.realmodel.servers import ModelServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = launch_server(tmp_path_factory.mktemp("otlp-clients") / "data")
    yield running
    running.stop()


def model_env(model: ModelServer) -> dict[str, str]:
    return {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "local", "MODEL": model.model}


def test_an_instrumented_openai_client_call_is_a_model_call_step(
    server: RunningServer, llama_server: ModelServer, tmp_path: Path
) -> None:
    ran = run_snippet(server, "send_openai_calls.py", tmp_path, patient="p-openai", **model_env(llama_server))
    assert ran.returncode == 0, ran.stderr
    flow, steps = flow_of(server, "p-openai")
    (step,) = steps
    assert step["step_kind"] == "model_call" and step["parent_step_ids"] == []
    facts = step["inputs"]["otel"]
    assert facts["model"] == llama_server.model and facts["input_tokens"] > 0 and facts["output_tokens"] > 0
    tokens = f"{facts['input_tokens']} \u2192 {facts['output_tokens']} tokens"
    assert step["summary_text"] == f"Model call to {llama_server.model}, {tokens}"
    assert "Where is order 12?" not in json.dumps(steps)  # the messages are sealed
    assert {"llm.input_messages", "input.value"} <= set(step["pii_fields"]["inputs"])
    verifies_offline(server, flow["flow_id"], tmp_path)


def test_an_agents_sdk_run_with_a_tool_is_a_flow_of_its_agent_model_calls_and_tool(
    server: RunningServer, llama_cpp_server: ModelServer, tmp_path: Path
) -> None:
    ran = run_snippet(server, "send_agent_run.py", tmp_path, patient="p-agents", **model_env(llama_cpp_server))
    assert ran.returncode == 0, ran.stderr
    flow, steps = flow_of(server, "p-agents")
    by_id = {step["step_id"]: step for step in steps}
    summaries = sorted(step["summary_text"] for step in steps)
    assert "Agent Order desk invoked" in summaries and "Tool lookup_order" in summaries
    (model,) = [step for step in steps if step["step_kind"] == "model_call"]
    (tool,) = [step for step in steps if step["step_kind"] == "tool_call"]
    assert model["summary_text"].startswith(f"Model call to {llama_cpp_server.model}, ")
    # one root, every other step under one parent of the flow: the SDK's span tree, whole
    assert [step for step in steps if not step["parent_step_ids"]] != []
    assert all(len(step["parent_step_ids"]) <= 1 for step in steps)
    assert all(parent in by_id for step in steps for parent in step["parent_step_ids"])
    assert len([step for step in steps if not step["parent_step_ids"]]) == 1
    # the model chose the tool and the tool ran in the same turn, under the agent
    assert model["parent_step_ids"] == tool["parent_step_ids"]
    turn = by_id[tool["parent_step_ids"][0]]
    assert by_id[turn["parent_step_ids"][0]]["summary_text"] == "Agent Order desk invoked"
    text = json.dumps(steps)
    assert "Where is order 12?" not in text and "shipped on Monday" not in text  # question and answer sealed
    assert "tool.parameters" in tool["pii_fields"]["inputs"] and "output.value" in tool["pii_fields"]["outputs"]
    verifies_offline(server, flow["flow_id"], tmp_path)
