"""`flowledger model probe` against the real servers: it finds what ../shared/llm/README.md records for SmolLM2.

llama-server enforces a json_schema and never returns a native tool call (SmolLM2's template drops tools);
llama-cpp-python's server refuses json_schema (500) and enforces json_object with a schema. Both are usable.
Only the facts the README records as enforced are asserted: what the model writes unconstrained varies.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from flowledger.cli import main
from flowledger.config import load_settings
from flowledger.llm.probe import model_banner
from tests.realmodel.servers import ModelServer

pytestmark = pytest.mark.realmodel
PROBE_SECONDS = 60  # about 8 s each when the machine is quiet; the bound catches a call left unbounded


def usable_probe(server: ModelServer, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The probe's JSON report and its results by check, with what both servers do alike already asserted."""
    started = time.monotonic()
    status = main(["model", "probe", "--base-url", server.base_url, "--model", server.model, "--json"])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    report = json.loads(out)
    assert status == 0, report
    checks = {check["check"]: check["result"] for check in report["checks"]}
    assert checks["models list"] == "ok" and checks["plain chat"] == "ok"
    assert checks["structured json_object_schema"] == "enforced"  # both enforce it by grammar
    # Valid when it closes; a final answer is a string no schema bounds, which SmolLM2 can run past the bound.
    assert checks["next action (structured tools)"] in ("valid", "cut")
    assert checks["max_tokens 8"] == "honoured"
    assert elapsed < PROBE_SECONDS
    return report, checks


def test_llama_server_gets_json_schema_and_structured_tools(
    llama_server: ModelServer, capsys: pytest.CaptureFixture[str], clean_environment: None
) -> None:
    mark = llama_server.log_mark()
    report, checks = usable_probe(llama_server, capsys)
    assert checks["structured json_schema"] == "enforced"
    assert checks["tools, tool_choice auto"] == "no call"
    assert checks["streaming usage"] == "usage"
    assert (report["structured_output"], report["tool_calling"]) == ("json_schema", "structured")
    assert report["notes"] == []  # the chat's auto modes are the ones chosen
    assert llama_server.refusals(mark) == []


def test_llama_cpp_server_gets_json_object_with_a_schema(
    llama_cpp_server: ModelServer, capsys: pytest.CaptureFixture[str], clean_environment: None
) -> None:
    mark = llama_cpp_server.log_mark()
    report, checks = usable_probe(llama_cpp_server, capsys)
    detail = next(c["detail"] for c in report["checks"] if c["check"] == "structured json_schema")
    assert checks["structured json_schema"] == "refused" and detail.startswith("500: "), detail
    assert checks["streaming usage"] == "no usage"
    assert report["structured_output"] == "json_object_schema"
    assert report["chat_uses"]["structured_output"] == "json_object_schema"  # auto steps down past the 500
    # tool_choice auto, as a diagnosis step sends it, brings no call back: tools go as the next action.
    assert (checks["tools, tool_choice auto"], report["tool_calling"]) == ("no call", "structured")
    # One request refused: the json_schema one (its 500 comes with the server's traceback).
    refused = [line for line in llama_cpp_server.refusals(mark) if line != "Traceback"]
    assert len(refused) == 1 and '" 500 ' in refused[0], refused


@pytest.mark.parametrize("name", ["llama_server", "llama_cpp_server"])
def test_serve_says_the_real_model_is_reachable(
    name: str, request: pytest.FixtureRequest, clean_environment: None
) -> None:
    server: ModelServer = request.getfixturevalue(name)
    line = model_banner(load_settings(openai_base_url=server.base_url, chat_model=server.model))
    host = server.base_url.split("/")[2]
    assert line.startswith(f"smollm2 at {host} — reachable, structured output auto, tools structured"), line
