"""`flowledger serve` pointed at a real model server through a recording proxy, and what every turn must hold.

The model (SmolLM2-135M) is weak: what it answers is not the point. The machinery around it is: no request
refused by the server, no 5xx from Flowledger, every model call bounded, tools offered as the mode says, no
fabricated reference or internal identifier published, every outcome one of the seed's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from flowledger.api.chat_app import final_body
from flowledger.llm.output_checks import STOP_SEQUENCES, degenerate_loop, template_token
from flowledger.local.devserver import DEMO_DOCUMENTS
from tests.e2e.conftest import RunningServer, launch_server
from tests.e2e.test_dev_server import token
from tests.integration.test_chat_use_case import parse_sse
from tests.realmodel.proxy import Exchange, RecordingProxy
from tests.realmodel.servers import ModelServer

RUN_STATUSES = {"SUCCESS", "FAILED", "CANCELLED"}
RELEASE_OUTCOMES = {"SUCCESS", "FALLBACK", "FAILED", "CANCELLED"}
PUBLIC_ERROR_CODES = {"ROUTING_UNAVAILABLE", "EXECUTION_FAILED", "BUDGET_EXHAUSTED", "CANCELLED"}
MAX_TOKENS_PER_CALL = 192  # FLOWLEDGER_MODEL_MAX_TOKENS below: every call's size, capped
# What a client must never read: tool-call and observation ids, tool names, internal field names.
INTERNAL = re.compile(
    r"call_[0-9a-f]{6,}|/obs-\d|\bobs-\d|query_logs|query_sql|lookup_knowledge|grounded_sources|invocation_id"
)
# Small bounds for a small machine: a diagnosis of at most 3 model calls of at most 192 tokens each, a minute
# per call (a 1,024-token draft takes SmolLM2 20 s on one busy core). The research loop's consumer would call
# the same model between turns: off, so the calls after a turn's start are its own.
SETTINGS = {
    "BACKLOG_CONSUMER_ENABLED": "false",
    "FLOWLEDGER_MODEL_MAX_TOKENS": str(MAX_TOKENS_PER_CALL),
    "FLOWLEDGER_DIAGNOSIS_MAX_MODEL_CALLS": "3",
    "FLOWLEDGER_DIAGNOSIS_MAX_TOOL_CALLS": "2",
    "FLOWLEDGER_MODEL_TIMEOUT_SECONDS": "60",
}


def demo_titles() -> set[str]:
    """What a reference may be called: the demo documents' file names and first headings."""
    titles = set()
    for path in DEMO_DOCUMENTS.glob("*.md"):
        titles.add(path.name)
        heading = next((line for line in path.read_text().splitlines() if line.startswith("# ")), "")
        titles.add(heading[2:].strip())
    return titles


@dataclass
class Turn:
    status_code: int
    outcome: dict[str, Any]
    events: list[Any]
    calls: list[Exchange]  # the model calls the turn made


@dataclass
class ChatStack:
    model: ModelServer
    proxy: RecordingProxy
    serve: RunningServer
    headers: dict[str, str]

    def ask(self, body: dict[str, Any], *, stream: bool = False) -> Turn:
        """One turn through `flowledger serve`, the JSON variant or the stream; checked by :func:`check_turn`."""
        mark = self.proxy.mark()
        headers = self.headers if stream else {**self.headers, "Accept": "application/json"}
        response = httpx.post(f"{self.serve.base_url}/api/chat", json=body, headers=headers, timeout=600)
        if stream and response.status_code == 200:
            events = parse_sse(response.text)
            outcome = final_body(events)
        else:
            events, outcome = [], response.json()
        turn = Turn(response.status_code, outcome, events, self.proxy.completions(mark))
        check_turn(turn)
        return turn

    def run(self, outcome: dict[str, Any]) -> dict[str, Any]:
        """The stored run, as its owner lists it."""
        response = httpx.get(
            f"{self.serve.base_url}/api/chat/sessions/{outcome['session_id']}/runs", headers=self.headers, timeout=30
        )
        assert response.status_code == 200, response.text
        return next(r for r in response.json()["runs"] if r["run_id"] == outcome["run_id"])

    def stop(self) -> None:
        self.serve.stop()
        self.proxy.close()


def start_stack(model: ModelServer, data_dir: Path, **settings: str) -> ChatStack:
    """`flowledger serve` on a fresh store, its model ``model`` behind a recording proxy."""
    proxy = RecordingProxy(model.base_url.removesuffix("/v1"))
    env = {**SETTINGS, "OPENAI_BASE_URL": proxy.base_url, "FLOWLEDGER_CHAT_MODEL": model.model, **settings}
    serve = launch_server(data_dir, env=env)
    bearer = token(serve, "--sub", "real-model-user", "--scopes", "chat,documents")
    return ChatStack(model, proxy, serve, {"Authorization": f"Bearer {bearer}"})


def check_turn(turn: Turn) -> None:
    """What every turn holds, whatever the model said."""
    outcome = turn.outcome
    assert turn.status_code == 200, outcome  # never a 5xx, and these requests are all valid
    assert outcome.get("status") in RUN_STATUSES | {None}, outcome
    if "error" in outcome:
        assert outcome["error"]["code"] in PUBLIC_ERROR_CODES, outcome
    else:
        assert outcome["status"] in RUN_STATUSES and outcome["release_outcome"] in RELEASE_OUTCOMES, outcome
    content = outcome.get("content") or {}
    published = json.dumps(content)
    assert not INTERNAL.search(published), published
    assert template_token(published) is None and degenerate_loop(content.get("text") or "") is None, published
    titles = demo_titles()
    for reference in content.get("references", []):
        assert reference["title"] in titles or reference["document_id"].startswith("dc_"), reference
    for call in turn.calls:
        check_call(call)


def check_call(call: Exchange) -> None:
    """One model call on the wire: bounded, answered, tools offered only as the mode says."""
    sent = call.request
    assert call.status < 400, (call.status, call.response)  # no request refused by the server
    assert 0 < sent["max_tokens"] <= MAX_TOKENS_PER_CALL, sent.get("max_tokens")
    if "tools" in sent:
        assert sent["tool_choice"] == "auto", sent["tool_choice"]
    usage = call.response.get("usage") or {}
    if usage:
        assert usage["completion_tokens"] <= sent["max_tokens"], usage
    # llama-server runs with --special, so it writes the end-of-turn token into the text: the stop sequences
    # every call sends must end generation there (the chat would refuse the reply otherwise).
    assert sent.get("stop") == list(STOP_SEQUENCES), sent.get("stop")
    for choice in call.response.get("choices") or []:
        content = (choice.get("message") or {}).get("content") or ""
        assert template_token(content) is None, content
