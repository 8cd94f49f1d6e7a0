"""DPO preference pairs from closed flows (``flowledger flows export --format dpo``).

The pairing rule. A flow's *family* is its trigger type; both flows of a pair are of one family, so they
share one prompt. Each exported flow gets at most one label:

- rejected ``aborted``: the flow was aborted (any family);
- in the critic's family (``claim_review``, research/agents/critic.py), a completed check is chosen
  ``claim_accepted`` when its outcome is ``claim_created`` (the critic accepted the claim) and rejected
  ``claim_rejected`` when it is ``no_action`` (the critic rejected it);
- in every other family, a completed flow that seeded a pathway (its id derives from the flow's:
  ``pathways.store.pathway_id_for``) is rejected ``pathway_demoted`` when the decay job demoted that
  pathway, and chosen ``pathway_reused`` when it is active and its ``hit_count`` is at least 1;
- any other flow is not labelled and is in no pair.

Per family, at most :data:`RESERVOIR` chosen and :data:`RESERVOIR` rejected candidates are kept: a uniform
sample of the window's (reservoir sampling, seeded, so one window gives one file). At the end, each side
is put in ``(closed_at, flow_id)`` order and the two are zipped: a family gives ``min(chosen, rejected)``
pairs and a flow is in at most one pair. Memory is bounded: at most :data:`MAX_FAMILIES` families (the
flows of later ones are counted, not paired), 2 times :data:`RESERVOIR` candidates each, each with one
answer of at most :data:`MAX_CONTENT_CHARS` characters (a longer flow is counted, not paired): about 130 MB
at the very worst, a few MB for flows of a few steps.

Content is PHI-safe by construction: the prompt is the trigger type; the answer is the record's step kinds,
agents and summaries (a hidden one as the placeholder, as the record holds it) and its outcome. Nothing
else of the flow (no trigger ref or summary, no inputs or outputs, no patient id) is in a pair.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from flowledger.pathways.extraction import QUALIFYING_OUTCOMES
from flowledger.pathways.store import pathway_id_for
from flowledger.reasoning.dataset import FlowRecord, Message, PairMetadata, PreferenceRecord
from flowledger.services import Services

# The critic's family (research/agents/critic.py TRIGGER_TYPE); not imported, so the export does not load
# the agents. tests/unit/test_flow_export.py holds the two equal.
CLAIM_REVIEW = "claim_review"
RESERVOIR = 32
MAX_FAMILIES = 256
MAX_CONTENT_CHARS = 8_000
LOOKUP_BATCH = 100  # records labelled per pathway BatchGetItem
SYSTEM_PROMPT = (
    "You plan an agent's reasoning flow in Flowledger. Answer with its steps, one per line as"
    " 'N. step_kind by agent: summary', then one line with its outcome."
)


@dataclass(frozen=True)
class Standing:
    """What the pathway a flow seeded says about the flow."""

    hit_count: int
    demoted: bool


@dataclass(frozen=True)
class Candidate:
    """A labelled flow as a pair needs it: the rendered answer and the metadata of its side."""

    flow_id: str
    closed_at: str
    label: str
    outcome: str
    confidence: float
    hit_count: int
    steps: int
    answer: str


@dataclass
class _Reservoir:
    seen: int = 0
    kept: list[Candidate] = field(default_factory=list)

    def offer(self, candidate: Candidate, rng: random.Random) -> None:
        self.seen += 1
        if len(self.kept) < RESERVOIR:
            self.kept.append(candidate)
            return
        slot = rng.randrange(self.seen)  # Algorithm R: each seen candidate is kept with chance RESERVOIR/seen
        if slot < RESERVOIR:
            self.kept[slot] = candidate


@dataclass
class PairCounts:
    flows: int = 0
    chosen: int = 0
    rejected: int = 0
    unlabelled: int = 0
    too_long: int = 0
    over_family_cap: int = 0
    pairs: int = 0


class PreferencePairs:
    """Label flows as they stream past, keep bounded candidates per family, then yield the pairs."""

    def __init__(self, services: Services, seed: int = 0) -> None:
        self._db = services.aws.dynamodb
        self._pathways = services.aws.table_name("pathways")
        self._rng = random.Random(seed)  # noqa: S311 - sampling, not security
        self._families: dict[str, tuple[_Reservoir, _Reservoir]] = {}
        self.counts = PairCounts()

    def add_all(self, records: Iterable[FlowRecord]) -> None:
        """Label every record (pathway standings looked up :data:`LOOKUP_BATCH` at a time)."""
        batch: list[FlowRecord] = []
        for record in records:
            batch.append(record)
            if len(batch) == LOOKUP_BATCH:
                self._add_batch(batch)
                batch = []
        if batch:
            self._add_batch(batch)

    def pairs(self) -> Iterator[PreferenceRecord]:
        """The pairs, family by family in name order; each flow in at most one."""
        for family in sorted(self._families):
            chosen, rejected = (sorted(side.kept, key=_order) for side in self._families[family])
            for good, bad in zip(chosen, rejected, strict=False):
                self.counts.pairs += 1
                yield pair_of(family, good, bad)

    def _add_batch(self, batch: list[FlowRecord]) -> None:
        standings = self._standings([r.flow.flow_id for r in batch if _may_seed(r)])
        for record in batch:
            self.counts.flows += 1
            labelled = label_of(record, standings.get(record.flow.flow_id))
            if labelled is None:
                self.counts.unlabelled += 1
                continue
            side, label = labelled
            family = record.flow.trigger_type
            if family not in self._families:
                if len(self._families) == MAX_FAMILIES:
                    self.counts.over_family_cap += 1
                    continue
                self._families[family] = (_Reservoir(), _Reservoir())
            candidate = candidate_of(record, label, standings.get(record.flow.flow_id))
            if candidate is None:
                self.counts.too_long += 1
                continue
            chosen, rejected = self._families[family]
            if side == "chosen":
                self.counts.chosen += 1
                chosen.offer(candidate, self._rng)
            else:
                self.counts.rejected += 1
                rejected.offer(candidate, self._rng)

    def _standings(self, flow_ids: list[str]) -> dict[str, Standing]:
        """The seeded pathway's standing of each flow that seeded one (one BatchGetItem per 100 flows)."""
        if not flow_ids:
            return {}
        by_pathway = {pathway_id_for(flow_id): flow_id for flow_id in flow_ids}
        pending: dict[str, Any] = {
            self._pathways: {
                "Keys": [{"pathway_id": {"S": p}} for p in by_pathway],
                "ProjectionExpression": "pathway_id, hit_count, demoted_at",
            }
        }
        found: dict[str, Standing] = {}
        while pending:
            response = self._db.batch_get_item(RequestItems=pending)
            for item in response.get("Responses", {}).get(self._pathways, []):
                hits = item.get("hit_count", {}).get("N", "0")
                found[by_pathway[item["pathway_id"]["S"]]] = Standing(int(hits), "demoted_at" in item)
            pending = response.get("UnprocessedKeys") or {}
        return found


def _may_seed(record: FlowRecord) -> bool:
    """Only a completed flow with a qualifying outcome can have seeded a pathway: look up no other."""
    flow = record.flow
    return (
        flow.trigger_type != CLAIM_REVIEW
        and flow.flow_state == "completed"
        and flow.outcome is not None
        and flow.outcome.type in QUALIFYING_OUTCOMES
    )


def label_of(record: FlowRecord, standing: Standing | None) -> tuple[str, str] | None:
    """``("chosen" | "rejected", label)`` under the module's pairing rule, or None (pure)."""
    flow = record.flow
    if flow.flow_state == "aborted":
        return "rejected", "aborted"
    outcome = flow.outcome.type if flow.outcome else ""
    if flow.trigger_type == CLAIM_REVIEW:
        if outcome == "claim_created":
            return "chosen", "claim_accepted"
        if outcome == "no_action":
            return "rejected", "claim_rejected"
        return None
    if standing is None:
        return None
    if standing.demoted:
        return "rejected", "pathway_demoted"
    if standing.hit_count >= 1:
        return "chosen", "pathway_reused"
    return None


def answer_of(record: FlowRecord) -> str:
    """The assistant's answer for a flow: its steps and its outcome, from the record's safe fields only."""
    lines = [
        f"{n}. {step.step_kind} by {step.agent}: {step.summary_text}" for n, step in enumerate(record.steps, 1)
    ] or ["No steps."]
    flow = record.flow
    state = flow.flow_state + (f" ({flow.abort_reason})" if flow.abort_reason else "")
    outcome = f", {flow.outcome.type}: {flow.outcome.summary}" if flow.outcome else ""
    lines.append(f"Outcome: {state}{outcome}")
    return "\n".join(lines)


def prompt_of(family: str) -> list[Message]:
    """The prompt both sides of a family's pairs answer."""
    return [
        Message(role="system", content=SYSTEM_PROMPT),
        Message(role="user", content=f"Trigger type: {family}"),
    ]


def candidate_of(record: FlowRecord, label: str, standing: Standing | None) -> Candidate | None:
    """The candidate a labelled record makes, or None when its answer is longer than a pair holds."""
    answer = answer_of(record)
    if len(answer) > MAX_CONTENT_CHARS:
        return None
    flow = record.flow
    return Candidate(
        flow_id=flow.flow_id,
        closed_at=flow.closed_at,
        label=label,
        outcome=flow.outcome.type if flow.outcome else "",
        confidence=-1.0 if flow.aggregate_confidence is None else float(flow.aggregate_confidence),
        hit_count=-1 if standing is None else standing.hit_count,
        steps=flow.step_count,
        answer=answer,
    )


def pair_of(family: str, chosen: Candidate, rejected: Candidate) -> PreferenceRecord:
    """One DPO record: the family's prompt, the chosen and the rejected answer, and the metadata."""
    return PreferenceRecord(
        prompt=prompt_of(family),
        chosen=[Message(role="assistant", content=chosen.answer)],
        rejected=[Message(role="assistant", content=rejected.answer)],
        metadata=PairMetadata(
            family=family,
            rule="claim_review" if family == CLAIM_REVIEW else "pathway_reuse",
            chosen_flow_id=chosen.flow_id,
            rejected_flow_id=rejected.flow_id,
            chosen_label=chosen.label,
            rejected_label=rejected.label,
            chosen_outcome=chosen.outcome,
            rejected_outcome=rejected.outcome,
            chosen_closed_at=chosen.closed_at,
            rejected_closed_at=rejected.closed_at,
            chosen_confidence=chosen.confidence,
            rejected_confidence=rejected.confidence,
            chosen_hit_count=chosen.hit_count,
            rejected_hit_count=rejected.hit_count,
            chosen_steps=chosen.steps,
            rejected_steps=rejected.steps,
        ),
    )


def _order(candidate: Candidate) -> tuple[str, str]:
    return candidate.closed_at, candidate.flow_id
