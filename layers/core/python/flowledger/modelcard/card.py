"""The report card: each turn's result summed up per capability, and which capabilities the model can serve."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from flowledger.modelcard.turns import CAPABILITIES, VERSION

# A capability is served when this share of its turns pass, none of them published junk and the server
# refused none of its requests: a model that fails one turn in five is one a user meets failing.
PASS_BAR = 0.8


@dataclass(frozen=True)
class TurnResult:
    """One turn as it went: passed or why not, junk refused, the server's refusals, time and tokens."""

    turn_id: str
    capability: str
    passed: bool
    status: str  # the run's status (SUCCESS, FAILED, CANCELLED), or the HTTP error the turn got
    why: str = ""  # what failed, when it did (never model text)
    junk: bool = False  # the model's output was refused as junk (model_degenerate_output), or published
    published_junk: bool = False  # a published answer held a template token or a loop: a defect, never expected
    refused: bool = False  # the model server refused a request (model_refused_request)
    seconds: float = 0.0
    tokens: int = 0
    intent: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class CapabilityScore:
    capability: str
    turns: int
    passed: int
    junk: int
    refusals: int
    p50_seconds: float
    p95_seconds: float
    tokens_per_turn: float
    served: bool

    @property
    def pass_rate(self) -> float:
        return self.passed / self.turns if self.turns else 0.0

    @property
    def junk_rate(self) -> float:
        return self.junk / self.turns if self.turns else 0.0


@dataclass(frozen=True)
class Card:
    """The card of one model on one endpoint."""

    model: str
    endpoint: str  # the base URL, or "offline"
    scores: list[CapabilityScore]
    results: list[TurnResult]
    routing_by_label: dict[str, tuple[int, int]] = field(default_factory=dict)  # label: (right, asked)
    turns_version: int = VERSION

    @property
    def published_junk(self) -> int:
        """Answers published with a template token or a loop in them (the checks exist to keep this 0)."""
        return sum(result.published_junk for result in self.results)

    @property
    def served(self) -> list[str]:
        return [score.capability for score in self.scores if score.served]

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "endpoint": self.endpoint,
            "turns_version": self.turns_version,
            "capabilities": [
                {**asdict(score), "pass_rate": round(score.pass_rate, 3), "junk_rate": round(score.junk_rate, 3)}
                for score in self.scores
            ],
            "routing_by_label": {label: {"right": r, "asked": n} for label, (r, n) in self.routing_by_label.items()},
            "serves": self.served,
            "published_junk": self.published_junk,
            "turns": [asdict(result) for result in self.results],
        }

    def lines(self) -> list[str]:
        """The card as a table, the routing score per label, the failed turns and the verdict."""
        out = [
            f"model report card (turns v{self.turns_version}): {self.model} at {self.endpoint}",
            "",
            f"{'capability':<13} {'pass':>9} {'junk':>6} {'refused':>8} {'p50 s':>7} {'p95 s':>7} {'tokens/turn':>12}"
            "  serves",
        ]
        for s in self.scores:
            out.append(
                f"{s.capability:<13} {f'{s.passed}/{s.turns}':>9} {s.junk_rate:>6.0%} {s.refusals:>8} "
                f"{s.p50_seconds:>7.2f} {s.p95_seconds:>7.2f} {s.tokens_per_turn:>12.0f}  {'yes' if s.served else 'no'}"
            )
        if self.routing_by_label:
            shown = ", ".join(f"{label} {right}/{asked}" for label, (right, asked) in self.routing_by_label.items())
            out += ["", f"routing by label: {shown}"]
        out += ["", f"answers published with a template token or a loop: {self.published_junk}"]
        failed = [r for r in self.results if not r.passed]
        if failed:
            out += ["", "turns that did not pass:"]
            out += [f"  {r.turn_id} ({r.capability}): {r.why}" for r in failed]
        verdict = ", ".join(self.served) if self.served else "none"
        out += ["", f"this model can serve: {verdict}"]
        return out


def score_card(model: str, endpoint: str, results: Sequence[TurnResult]) -> Card:
    """The card from the turns' results: a row per capability the turns covered, in a fixed order."""
    scores = []
    for capability in CAPABILITIES:
        mine = [r for r in results if r.capability == capability]
        if not mine:
            continue
        passed = sum(r.passed for r in mine)
        junk = sum(r.junk for r in mine)
        refusals = sum(r.refused for r in mine)
        seconds = sorted(r.seconds for r in mine)
        scores.append(
            CapabilityScore(
                capability=capability,
                turns=len(mine),
                passed=passed,
                junk=junk,
                refusals=refusals,
                p50_seconds=round(percentile(seconds, 50), 3),
                p95_seconds=round(percentile(seconds, 95), 3),
                tokens_per_turn=round(sum(r.tokens for r in mine) / len(mine), 1),
                served=passed / len(mine) >= PASS_BAR and junk == 0 and refusals == 0,
            )
        )
    by_label: dict[str, tuple[int, int]] = {}
    for r in results:
        if r.capability == "routing" and r.label:
            right, asked = by_label.get(r.label, (0, 0))
            by_label[r.label] = (right + r.passed, asked + 1)
    return Card(model, endpoint, scores, list(results), by_label)


def percentile(ordered: Sequence[float], p: float) -> float:
    """The nearest-rank percentile of sorted values (0 for none)."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]
