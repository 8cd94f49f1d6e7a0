"""The model report card of each model Flowledger is tried with: the offline model (the baseline) and, on
llama.cpp's ``llama-server`` (``../shared/llm``, 1 thread), SmolLM2-135M-Instruct and Gemma 3 270M.

Each card is `flowledger model eval --json` as a user runs it, with the budgets of the real-model tests' card
runs (tests/realmodel/test_model_cards.py). Printed per model: each capability's passes, junk refused, p50
latency and tokens per turn, and what the model can serve. Target: no answer of any model published with a
template token or a loop in it (the output checks' whole point); what a model can serve is a figure, not a target.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the real-model tests' servers: one harness for both

from _pytest.outcomes import OutcomeException  # noqa: E402

from tests.realmodel.servers import ModelServer, start_llama_server  # noqa: E402
from tests.realmodel.test_model_cards import run_card  # noqa: E402


def show(made: dict[str, Any]) -> None:
    print(f"{made['model']} ({made['endpoint']}): serves {', '.join(made['serves']) or 'nothing'}")
    for c in made["capabilities"]:
        print(
            f"  {c['capability']:<13} pass {c['passed']:>2}/{c['turns']:<2}  junk refused {c['junk']:>2}"
            f"  p50 {c['p50_seconds']:6.2f} s  p95 {c['p95_seconds']:6.2f} s  tokens/turn {c['tokens_per_turn']:>6.0f}"
        )
    labels = ", ".join(f"{k} {v['right']}/{v['asked']}" for k, v in made["routing_by_label"].items())
    print(f"  routing by label: {labels}; answers published with junk: {made['published_junk']}")


def main() -> int:
    cards = [run_card()]
    show(cards[-1])
    with tempfile.TemporaryDirectory() as logs:
        for gemma in (False, True):
            server: ModelServer | None = None
            try:
                server = start_llama_server(Path(logs), gemma=gemma)
                cards.append(run_card(server.base_url, server.model))
                show(cards[-1])
            except OutcomeException as exc:  # no llama-server or model here: said, not a crash
                print(f"  skipped: {exc}")
            finally:
                if server is not None:
                    server.stop()
    junk = sum(c["published_junk"] for c in cards)
    print(f"answers published with a template token or a loop, all cards: {junk} (target 0)")
    return 0 if junk == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
