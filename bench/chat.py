"""Platform overhead of a chat turn with a zero-latency model: time to ``start`` and to ``done``,
and DynamoDB requests before ``start`` and per system-chat turn (locked moto server)."""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from typing import Any

from ledger import Meter

from flowledger.chat.models import ChatRequest
from flowledger.chat.usecase import CancelToken
from flowledger.chat.wiring import build_use_case
from flowledger.config import load_settings
from flowledger.identity import Principal
from flowledger.llm.ports import DEFAULT_MAX_TOKENS, JsonSchema, Message, Reply, ToolSpec
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import build_services
from flowledger.store.provision import provision_all

TURNS = 100
USER = Principal(kind="user", id="bench", scopes=frozenset({"chat"}))


class InstantModel:
    """Answers at once: routes to system chat, then says hello."""

    name = "instant"
    offline = False

    def complete(
        self,
        messages: list[Message],
        *,
        schema: JsonSchema | None = None,
        tools: list[ToolSpec] | None = None,
        timeout_seconds: float,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> Reply:
        return Reply(data={"intent": "SYSTEM_CHAT"}) if schema else Reply(text="Hello.")


def main() -> int:
    server = LockedMotoServer()
    endpoint = server.start()
    try:
        settings = load_settings(aws_endpoint_url=endpoint, resource_prefix=f"chat{int(time.time())}")
        services = build_services(settings, EMBEDDED_CREDENTIALS)
        provision_all(services.aws, settings)
        use_case = build_use_case(services, model=InstantModel())  # type: ignore[arg-type]
        meter = Meter(services.aws.dynamodb)
        to_start, to_done, before_start, per_turn = [], [], [], []
        session: str | None = None
        for _ in range(TURNS):
            meter.calls = Counter()
            began = time.perf_counter()
            events: Any = use_case.run(USER, ChatRequest(query="hello", session_id=session), CancelToken())
            start = next(events)
            to_start.append((time.perf_counter() - began) * 1000)
            before_start.append(sum(meter.calls.values()))
            for event in events:
                last = event
            to_done.append((time.perf_counter() - began) * 1000)
            per_turn.append(sum(meter.calls.values()))
            assert last.type == "done", last
            session = start.session_id
        print(
            f"system-chat turns with a zero-latency model, in-process, locked moto server ({TURNS} turns, one session)"
        )
        print(f"  time to start   median {statistics.median(to_start):6.1f} ms   p90 {_p90(to_start):6.1f} ms")
        print(f"  time to done    median {statistics.median(to_done):6.1f} ms   p90 {_p90(to_done):6.1f} ms")
        print(
            f"  DynamoDB requests before start: {max(before_start)} (target <= 2); per turn: "
            f"{statistics.median(per_turn):.0f} (target <= 6)"
        )
        return 0 if max(before_start) <= 2 and statistics.median(per_turn) <= 6 else 1
    finally:
        server.stop()


def _p90(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.9) - 1]


if __name__ == "__main__":
    sys.exit(main())
