"""The observation ledger: every tool result of a run, under a run-scoped id, kept outside the loop.

The agent appends to it; release reads it. Because it belongs to the executor and not to the loop,
what was observed survives any stop (budget, saturation, cancellation, a model failure), so a
fallback can say truthfully what was checked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flowledger.diagnosis.tools import ToolOutcome, ToolResult

# What a user reads for each tool: the texts a client sees name no internal identifier.
PUBLIC_TOOL_NAMES = {
    "query_logs": "the logs",
    "query_sql": "the database",
    "lookup_knowledge": "the knowledge base",
    "grounded_sources": "the sources of this conversation",
}


@dataclass(frozen=True)
class Observation:
    id: str  # "<run_id>/obs-<n>"
    tool: str
    arguments: dict[str, Any]
    result: ToolResult
    call_id: str = ""  # the model's tool-call id: never published

    @property
    def safe(self) -> bool:
        return self.result.safe

    def for_model(self) -> str:
        """The tool message the model reads: the observation id, the outcome and the bounded result."""
        return json.dumps(
            {"observation_id": self.id, "outcome": self.result.outcome.value, "result": self.result.text},
            ensure_ascii=False,
        )


@dataclass
class ObservationLedger:
    """The run's observations, in order. Ids are ``<run_id>/obs-<n>``, so another run's ids never match."""

    run_id: str
    observations: list[Observation] = field(default_factory=list)

    def record(self, tool: str, arguments: dict[str, Any], result: ToolResult, call_id: str = "") -> Observation:
        observation = Observation(f"{self.run_id}/obs-{len(self.observations) + 1}", tool, arguments, result, call_id)
        self.observations.append(observation)
        return observation

    def get(self, observation_id: str) -> Observation | None:
        return next((o for o in self.observations if o.id == observation_id), None)

    @property
    def call_ids(self) -> tuple[str, ...]:
        return tuple(o.call_id for o in self.observations if o.call_id)

    @property
    def safe(self) -> list[Observation]:
        """The observations that are evidence: the tool ran and answered."""
        return [o for o in self.observations if o.safe]

    def is_new(self, result: ToolResult) -> bool:
        """True when ``result`` is evidence that no earlier observation already holds."""
        return result.safe and result.outcome is ToolOutcome.OK and all(o.result.text != result.text for o in self.safe)

    def checked_summary(self) -> str:
        """What was checked, as a fixed-form sentence built from tool names and counts (no raw evidence)."""
        counts: dict[str, list[int]] = {}
        for o in self.safe:
            counts.setdefault(o.tool, []).append(o.result.rows)
        return "; ".join(
            f"{PUBLIC_TOOL_NAMES.get(name, 'other checks')} {_count(len(rows), 'time')} ({_count(sum(rows), 'result')})"
            for name, rows in counts.items()
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
