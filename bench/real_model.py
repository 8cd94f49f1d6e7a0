"""Chat turns on a real model server: Flowledger's own time per turn, and tokens against their budgets.

`flowledger serve` talks to llama.cpp's ``llama-server`` (SmolLM2-135M, 1 thread: ``../shared/llm``) through
the recording proxy of the real-model tests. Each answer of llama-server carries ``timings`` (prompt and
generation milliseconds): a turn's model time is their sum over its calls, and Flowledger's own time is
the turn's wall time (as its client sees it) minus that. The proxy's hop counts as Flowledger's: a
conservative figure. Target: Flowledger's own time under 10 % of the turn, for every kind of turn.
Tokens: what the model generated per turn against the sum of the ``max_tokens`` the turn's calls asked for.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the real-model tests' servers and proxy: one harness for both

import httpx  # noqa: E402
from _pytest.outcomes import OutcomeException  # noqa: E402

from flowledger.diagnosis.demo_incident import DEMO_QUESTION  # noqa: E402
from tests.e2e.conftest import launch_server  # noqa: E402
from tests.e2e.test_dev_server import token  # noqa: E402
from tests.realmodel.proxy import RecordingProxy  # noqa: E402
from tests.realmodel.servers import start_llama_server  # noqa: E402

TARGET_SHARE = 0.10
TURNS = {
    "system": ["hello, who are you?", "thanks, that helps", "what can you do for me?"],
    "knowledge": [
        "What does the checkout incident runbook say to do first?",
        "How often does the audit ledger checkpoint?",
        "Who gets paged according to the on-call runbook?",
    ],
    "diagnosis": [DEMO_QUESTION, "Why are payments timing out?"],
}
# The research loop's consumer would call the same model between turns: off, so a turn's calls are its own.
SETTINGS = {
    "FLOWLEDGER_DIAGNOSIS_MAX_MODEL_CALLS": "3",
    "FLOWLEDGER_DIAGNOSIS_MAX_TOOL_CALLS": "2",
    "BACKLOG_CONSUMER_ENABLED": "false",
    # A 1,024-token answer takes this server 20-35 s: the 30 s default would abandon some mid-generation.
    "FLOWLEDGER_MODEL_TIMEOUT_SECONDS": "120",
}


def turn(base_url: str, headers: dict[str, str], proxy: RecordingProxy, query: str) -> dict[str, Any]:
    mark = proxy.mark()
    started = time.perf_counter()
    response = httpx.post(f"{base_url}/api/chat", json={"query": query}, headers=headers, timeout=600)
    wall_ms = (time.perf_counter() - started) * 1000
    calls = proxy.completions(mark)
    timings = [c.response.get("timings") or {} for c in calls]
    model_ms = sum(t.get("prompt_ms", 0) + t.get("predicted_ms", 0) for t in timings)
    served_ms = sum(c.seconds for c in calls) * 1000  # as the proxy saw each answer come back
    outcome = response.json()
    return {
        "intent": outcome.get("intent") or outcome.get("error", {}).get("code"),
        "release": outcome.get("release_outcome"),
        "wall_ms": wall_ms,
        "model_ms": model_ms,
        "own_ms": wall_ms - model_ms,
        "untimed_ms": served_ms - model_ms,  # the server's HTTP, template and tokenizer work: not in its timings
        "calls": len(calls),
        "generated": sum((c.response.get("usage") or {}).get("completion_tokens", 0) for c in calls),
        "budget": sum(c.request.get("max_tokens", 0) for c in calls),
        "capped": sum(1 for c in calls if (c.response.get("choices") or [{}])[0].get("finish_reason") == "length"),
    }


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        try:
            model = start_llama_server(Path(scratch))
        except OutcomeException as exc:
            print(f"blocked: no real model server here ({exc.msg})")
            return 1
        proxy = RecordingProxy(model.base_url.removesuffix("/v1"))
        env = {**SETTINGS, "OPENAI_BASE_URL": proxy.base_url, "FLOWLEDGER_CHAT_MODEL": model.model}
        server = launch_server(Path(scratch) / "data", env=env)
        try:
            headers = {
                "Authorization": f"Bearer {token(server, '--sub', 'bench', '--scopes', 'chat')}",
                "Accept": "application/json",
            }
            turn(server.base_url, headers, proxy, "warm up")  # first-call imports are not a turn's cost
            results = {
                kind: [turn(server.base_url, headers, proxy, q) for q in queries] for kind, queries in TURNS.items()
            }
        finally:
            server.stop()
            proxy.close()
            model.stop()
    print("real model: llama-server (SmolLM2-135M Q4_1, 1 thread) behind flowledger serve, JSON turns")
    print(f"{'turn':<10} {'n':>2} {'turn ms':>9} {'model ms':>9} {'own ms':>7} {'own %':>6} {'untimed':>7} "
          f"{'calls':>5} {'tokens':>7} {'budget':>7} {'capped':>6}  routed")  # fmt: skip
    missed = []
    for kind, rows in results.items():
        wall = statistics.median(r["wall_ms"] for r in rows)
        model_ms = statistics.median(r["model_ms"] for r in rows)
        own = statistics.median(r["own_ms"] for r in rows)
        share = sum(r["own_ms"] for r in rows) / sum(r["wall_ms"] for r in rows)
        untimed = statistics.median(r["untimed_ms"] for r in rows)
        routed = ",".join(sorted({f"{r['intent']}/{r['release']}" for r in rows}))
        calls, generated, budget = (statistics.median(r[key] for r in rows) for key in ("calls", "generated", "budget"))
        print(
            f"{kind:<10} {len(rows):>2} {wall:>9.0f} {model_ms:>9.0f} {own:>7.0f} {share:>6.1%} {untimed:>7.0f} "
            f"{calls:>5.0f} {generated:>7.0f} {budget:>7.0f} {sum(r['capped'] for r in rows):>6}  {routed}"
        )
        if share >= TARGET_SHARE:
            missed.append(f"{kind} {share:.1%}")
    print(
        "medians per turn; own % = the turns' own time over their wall time; untimed = part of own spent inside "
        "the model server outside its timings (HTTP, chat template, tokenizer); tokens generated vs max_tokens asked"
    )
    if missed:
        print(f"target missed: Flowledger's own time is {TARGET_SHARE:.0%} or more of the turn for {', '.join(missed)}")
        return 1
    print(f"target met: Flowledger's own time under {TARGET_SHARE:.0%} of every kind of turn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
