"""A diagnosis turn against the bare ReAct loop: platform overhead per agent step, DynamoDB requests per turn.

The model is the offline model (zero latency, deterministic), which runs the demo incident's plan:
two SQL queries in one parallel batch, one log query, one knowledge lookup, a draft, and the
semantic judgement. The tools are the real adapters: SQLite (the demo database), CloudWatch Logs
and the knowledge index on the locked moto server. The bare loop makes the same model calls and tool
calls with nothing around them (no run, budget, observation ledger, guards or reasoning flow).

Target: a turn's time to ``done`` within 1.3x the bare loop. Time to the end of the stream (when the
deferred flow recording has been written too) is printed beside it.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger import Meter

from flowledger.chat.models import ChatRequest
from flowledger.chat.router import SCHEMA as ROUTE_SCHEMA
from flowledger.chat.usecase import CancelToken
from flowledger.chat.wiring import build_use_case
from flowledger.config import load_settings
from flowledger.diagnosis.demo_database import build_demo_database
from flowledger.diagnosis.demo_incident import DEMO_QUESTION
from flowledger.diagnosis.demo_logs import seed_demo_logs
from flowledger.diagnosis.draft import DRAFT_SCHEMA
from flowledger.diagnosis.semantic import SEMANTIC_SCHEMA
from flowledger.diagnosis.tools import DiagnosisTool
from flowledger.diagnosis.wiring import diagnosis_tools
from flowledger.identity import Principal
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.llm.offline import OfflineChatModel
from flowledger.llm.ports import Message
from flowledger.local.devserver import EMBEDDED_CREDENTIALS, seed_demo_documents
from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import build_services
from flowledger.store.provision import provision_all

TURNS = 30
TARGET = 1.3
USER = Principal(kind="user", id="bench", scopes=frozenset({"chat"}))


def bare_loop(model: OfflineChatModel, tools: list[DiagnosisTool], query: str) -> tuple[int, int]:
    """The same model and tool calls with no platform around them; returns (model calls, tool calls)."""
    by_name = {tool.spec.name: tool for tool in tools}
    specs = [tool.spec for tool in tools]
    messages = [Message("system", "diagnose"), Message("user", json.dumps({"query": query, "previous_turn": None}))]
    # The turn's routing call, as the platform makes it.
    model.complete([Message("user", json.dumps({"query": query}))], schema=ROUTE_SCHEMA, timeout_seconds=30)
    model_calls, tool_calls = 1, 0
    while True:
        model_calls += 1
        reply = model.complete(messages, schema=DRAFT_SCHEMA, tools=specs, timeout_seconds=30)
        if not reply.tool_calls:
            break
        messages.append(Message("assistant", "", tool_calls=reply.tool_calls))
        for n, call in enumerate(reply.tool_calls):
            tool_calls += 1
            result = by_name[call.name].run(call.arguments, timeout_seconds=10)
            body = {"observation_id": f"o{tool_calls}-{n}", "outcome": result.outcome.value, "result": result.text}
            messages.append(Message("tool", json.dumps(body), tool_call_id=call.id))
    draft = reply.data or {}
    judge = {"query": query, "conclusion": draft.get("conclusion"), "claims": draft.get("claims")}
    model_calls += 1
    model.complete([Message("user", json.dumps(judge))], schema=SEMANTIC_SCHEMA, timeout_seconds=30)
    return model_calls, tool_calls


def main() -> int:
    server = LockedMotoServer()
    endpoint = server.start()
    workdir = Path(tempfile.mkdtemp(prefix="flowledger-bench-"))
    try:
        now = datetime.now(UTC)
        database = build_demo_database(workdir / "demo-incident.sqlite", now)
        settings = load_settings(
            aws_endpoint_url=endpoint,
            resource_prefix=f"diag{int(time.time())}",
            diagnosis_sqlite_path=str(database),
            reasoning_flow_capture_enabled=True,
        )
        services = build_services(settings, EMBEDDED_CREDENTIALS)
        provision_all(services.aws, settings)
        seed_demo_logs(services.aws.logs, now)
        seed_demo_documents(services)
        model = OfflineChatModel()
        index = KnowledgeIndex(services)
        use_case = build_use_case(services, model=model, index=index)
        tools = diagnosis_tools(services, index)
        meter = Meter(services.aws.dynamodb)

        bare, to_done, to_end, requests, before_done, steps = [], [], [], [], [], []
        for _ in range(TURNS):
            began = time.perf_counter()
            model_calls, tool_calls = bare_loop(model, tools, DEMO_QUESTION)
            bare.append((time.perf_counter() - began) * 1000)

            meter.calls = Counter()
            began = time.perf_counter()
            events: Any = use_case.run(USER, ChatRequest(query=DEMO_QUESTION), CancelToken())
            for event in events:
                if event.type == "done":
                    to_done.append((time.perf_counter() - began) * 1000)
                    before_done.append(sum(meter.calls.values()))
                    done = event
            to_end.append((time.perf_counter() - began) * 1000)
            requests.append(sum(meter.calls.values()))
            steps.append(model_calls + tool_calls)
            assert done.release_outcome == "SUCCESS", done

        base, platform, ended = statistics.median(bare), statistics.median(to_done), statistics.median(to_end)
        agent_steps = statistics.median(steps)
        ratio = platform / base
        print(
            f"diagnosis turns, offline (zero-latency) model, real tools on the locked moto server ({TURNS} turns; "
            f"{agent_steps:.0f} agent steps: model and tool calls)"
        )
        print(f"  bare loop        median {base:6.1f} ms")
        print(f"  time to done     median {platform:6.1f} ms   {ratio:.2f}x the bare loop (target <= {TARGET}x)")
        print(
            f"  to end of stream median {ended:6.1f} ms   {ended / base:.2f}x (the flow recording written after done)"
        )
        print(
            f"  platform overhead per agent step: {(platform - base) / agent_steps:.2f} ms to done, "
            f"{(ended - base) / agent_steps:.2f} ms with the recording"
        )
        print(
            f"  DynamoDB requests per turn: {statistics.median(requests):.0f}, "
            f"{statistics.median(before_done):.0f} of them before done (bare loop: 0)"
        )
        return 0 if ratio <= TARGET else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
