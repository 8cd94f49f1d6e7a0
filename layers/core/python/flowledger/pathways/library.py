"""The pathway routes' use cases: match (audited, read-only), hit, stats, compare, family radar axes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flowledger.errors import ConditionFailed, Conflict, InvalidInput, LedgerContention, NotFound
from flowledger.ledger.events import AuditEntry, timestamp
from flowledger.pathways.matcher import PathwayMatcher, view_of
from flowledger.pathways.models import AxisDelta, Comparison, MatchResult, Pathway, PathwayView, Stats
from flowledger.pathways.radar import HIGH_HITS, family_maturity_score, recency_score
from flowledger.pathways.snapshot import SnapshotStore
from flowledger.pathways.stats import Counted, PathwayStats, counters_of, hit_shard_of, moved
from flowledger.pathways.store import PathwayStore
from flowledger.reasoning.dimensions import AXES, Dimensions
from flowledger.services import Services

POSITIVE_AXES = tuple(axis for axis in AXES if axis != "risk")
HIT_ATTEMPTS = 4  # a blind try, a read, the counted try, a blind try again: one crossing per pathway


class PathwayLibrary:
    def __init__(self, services: Services) -> None:
        self._s = services
        self.store = PathwayStore.of(services)
        self.snapshots = SnapshotStore.of(services)
        self._counters = counters_of(services)

    def matcher(self) -> PathwayMatcher:
        return PathwayMatcher(self.store, self.snapshots, self._s.pathway_embeddings, self._s.clock)

    def match(self, actor: str, trigger_type: str, trigger_ref: str, limit: int) -> MatchResult:
        """Ranked candidates (``reasoning.pathway.match_requested`` and ``.matched``; nothing else is written)."""
        self._audit("reasoning.pathway.match_requested", actor, f"family:{trigger_type}", {"limit": limit})
        result = self.matcher().match(trigger_type, trigger_ref, limit)
        top = result.candidates[0].reason if result.candidates else "none"
        self._audit(
            "reasoning.pathway.matched",
            actor,
            f"family:{trigger_type}",
            {"candidates": len(result.candidates), "top_reason": top},
        )
        return result

    def hit(self, actor: str, pathway_id: str) -> PathwayView:
        """A pathway was reused: hit_count + 1 and last_hit_at now, atomically (``reasoning.pathway.hit``).

        A hit is a blind increment, unless it is the one that lifts the pathway to ``HIGH_HITS``: that
        hit also counts the family's high-hit pathway, so it is conditional on the count it lifts. The
        first attempt assumes it is not that hit; when the condition says it is, the pathway is read and
        the counted hit tried. Each failed attempt means another hit landed, and only one hit ever
        crosses, so a few attempts always suffice.
        """
        now = timestamp(self._s.clock())
        crossing: Pathway | None = None  # the pathway as read, when this hit lifts it to HIGH_HITS
        for _ in range(HIT_ATTEMPTS):
            edge = {":edge": {"N": str(HIGH_HITS - 1)}}
            condition = "attribute_exists(pathway_id) AND attribute_not_exists(demoted_at) AND " + (
                "hit_count = :edge" if crossing else "(attribute_not_exists(hit_count) OR hit_count <> :edge)"
            )
            counted = (
                self._counters.update_item(
                    moved(Counted.of(crossing), Counted.of(crossing.model_copy(update={"hit_count": HIGH_HITS}))),
                    pathway_id,
                )
                if crossing
                else []
            )
            try:
                self._s.ledger.append(
                    AuditEntry(action="reasoning.pathway.hit", actor=actor, subject=f"pathway:{pathway_id}"),
                    [
                        {
                            "Update": {
                                "TableName": self.store.table,
                                "Key": {"pathway_id": {"S": pathway_id}},
                                "UpdateExpression": (
                                    "ADD hit_count :one SET last_hit_at = :now, changed_at = :now, hit_shard = :shard"
                                ),
                                "ConditionExpression": condition,
                                "ExpressionAttributeValues": {
                                    ":one": {"N": "1"},
                                    ":now": {"S": now},
                                    ":shard": {"S": hit_shard_of(pathway_id)},
                                    **edge,
                                },
                            }
                        },
                        *counted,
                    ],
                )
            except ConditionFailed:
                found = self.store.get(pathway_id)
                if found is None:
                    raise NotFound(f"no pathway {pathway_id}") from None
                if not found[0].active:
                    raise Conflict(f"pathway {pathway_id} is demoted; it cannot be reused") from None
                crossing = found[0] if found[0].hit_count == HIGH_HITS - 1 else None
                continue
            return self.view(pathway_id)
        raise LedgerContention(f"pathway {pathway_id} kept changing under the hit; nothing was written, retry")

    def view(self, pathway_id: str) -> PathwayView:
        found = self.store.get(pathway_id)
        if found is None:
            raise NotFound(f"no pathway {pathway_id}")
        return view_of(found[0], self._s.clock())

    def stats(self) -> Stats:
        """Counts over the whole library, from its counters and the top-hits index (``pathways/stats.py``)."""
        return PathwayStats(self._s).stats()

    def read_stats(self, actor: str) -> Stats:
        stats = self.stats()
        self._audit(
            "admin.reasoning.pathway.stats_read",
            actor,
            "pathways:all",
            {"total": stats.total, "active": stats.active, "embedded": stats.embedded},
        )
        return stats

    def compare(self, actor: str, first_id: str, second_id: str) -> Comparison:
        """Two pathways' radars side by side: deltas ranked by size and the dominant pick, with why."""
        if first_id == second_id:
            raise InvalidInput("compare two different pathways")
        first, second = self.view(first_id), self.view(second_id)
        comparison = compare_views(first, second)
        self._audit(
            "admin.reasoning.pathway.compared",
            actor,
            f"pathway:{first_id}",
            {"other": second_id, "dominant": comparison.dominant},
        )
        return comparison

    def family_axes(self, trigger_type: str, now: datetime) -> tuple[int | None, int | None]:
        """Maturity and Recency of a family for a flow's radar, from its latest snapshot's aggregates
        (the pointer the matcher uses too, cached per process: as fresh as the hourly snapshot anyway).

        Not rated (None) where the library cannot say: no snapshot yet, or (Recency) no activity in it.
        """
        pointer = self.snapshots.pointer(self._s.settings.pathway_embedding_model.value, trigger_type)
        if pointer is None:
            return None, None  # no pathway evidence either way yet
        maturity = family_maturity_score(pointer["count"], pointer["high_hits"])
        latest = pointer.get("latest_activity")
        return maturity, recency_score(latest, now) if latest else None

    def _audit(self, action: str, actor: str, subject: str, payload: dict[str, Any]) -> None:
        self._s.ledger.append(AuditEntry(action=action, actor=actor, subject=subject, payload=payload))


def compare_views(first: PathwayView, second: PathwayView) -> Comparison:
    """Per-axis deltas (second minus first), ranked by absolute size; the dominant pick (pure).

    Each side's standing is the sum of its positive axes minus its Risk; the higher wins, and on a
    tie the one with lower Risk; with Risk equal too, neither dominates. Only axes rated on both
    sides count: an axis not rated has no delta (null, listed last) and adds to neither standing.
    """
    a, b = first.dimensions, second.dimensions
    deltas = [_delta(axis, getattr(a, axis).score, getattr(b, axis).score) for axis in AXES]
    deltas.sort(key=lambda d: (d.delta is None, -abs(d.delta or 0), AXES.index(d.axis)))
    both = {d.axis for d in deltas if d.delta is not None}

    def standing(view: PathwayView) -> int:
        scores = _rated_scores(view.dimensions, both)
        return sum(scores.get(axis, 0) for axis in POSITIVE_AXES) - scores.get("risk", 0)

    one, two = standing(first), standing(second)
    leading = [d for d in deltas if d.delta and d.axis != "risk"][:2]
    detail = ", ".join(f"{d.axis} {d.delta:+d}" for d in leading) or "no positive axis differs"
    if one != two:
        winner = first if one > two else second
        reasoning = (
            f"{winner.pathway_id} stands at {max(one, two)} against {min(one, two)} "
            f"(positive axes minus risk); largest differences: {detail}"
        )
        return Comparison(first=first, second=second, deltas=deltas, dominant=winner.pathway_id, reasoning=reasoning)
    if a.risk.score is not None and b.risk.score is not None and a.risk.score != b.risk.score:
        winner = first if a.risk.score < b.risk.score else second
        reasoning = f"even at {one} (positive axes minus risk); {winner.pathway_id} carries less risk"
        return Comparison(first=first, second=second, deltas=deltas, dominant=winner.pathway_id, reasoning=reasoning)
    risk = "with equal risk" if "risk" in both else "with risk not rated on both sides"
    return Comparison(first=first, second=second, deltas=deltas, dominant=None, reasoning=f"even at {one} {risk}")


def _delta(axis: str, first: int | None, second: int | None) -> AxisDelta:
    delta = None if first is None or second is None else second - first
    return AxisDelta(axis=axis, first=first, second=second, delta=delta)


def _rated_scores(dimensions: Dimensions, axes: set[str]) -> dict[str, int]:
    """The scores of ``axes`` (rated on both sides of a comparison)."""
    scores = {axis: getattr(dimensions, axis).score for axis in axes}
    return {axis: score for axis, score in scores.items() if score is not None}
