"""The pathway routes' use cases: match (audited, read-only), hit, stats, compare, family radar axes."""

from __future__ import annotations

import heapq
from collections import Counter
from datetime import datetime
from typing import Any

from flowledger.errors import ConditionFailed, Conflict, InvalidInput, NotFound
from flowledger.ledger.events import AuditEntry, timestamp
from flowledger.pathways.matcher import PathwayMatcher, view_of
from flowledger.pathways.models import AxisDelta, Comparison, MatchResult, PathwayView, Stats, TopHit
from flowledger.pathways.radar import HIGH_HITS, family_maturity_score, maturity_of, recency_score
from flowledger.pathways.snapshot import SnapshotStore
from flowledger.pathways.store import PathwayStore
from flowledger.reasoning.dimensions import AXES, NEUTRAL
from flowledger.services import Services

POSITIVE_AXES = tuple(axis for axis in AXES if axis != "risk")
TOP_HITS = 5


class PathwayLibrary:
    def __init__(self, services: Services) -> None:
        self._s = services
        self.store = PathwayStore.of(services)
        self.snapshots = SnapshotStore.of(services)

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
        """A pathway was reused: hit_count + 1 and last_hit_at now, atomically (``reasoning.pathway.hit``)."""
        now = timestamp(self._s.clock())
        try:
            self._s.ledger.append(
                AuditEntry(action="reasoning.pathway.hit", actor=actor, subject=f"pathway:{pathway_id}"),
                [
                    {
                        "Update": {
                            "TableName": self.store.table,
                            "Key": {"pathway_id": {"S": pathway_id}},
                            "UpdateExpression": "ADD hit_count :one SET last_hit_at = :now, changed_at = :now",
                            "ConditionExpression": "attribute_exists(pathway_id) AND attribute_not_exists(demoted_at)",
                            "ExpressionAttributeValues": {":one": {"N": "1"}, ":now": {"S": now}},
                        }
                    }
                ],
            )
        except ConditionFailed:
            if self.store.get(pathway_id) is None:
                raise NotFound(f"no pathway {pathway_id}") from None
            raise Conflict(f"pathway {pathway_id} is demoted; it cannot be reused") from None
        return self.view(pathway_id)

    def view(self, pathway_id: str) -> PathwayView:
        found = self.store.get(pathway_id)
        if found is None:
            raise NotFound(f"no pathway {pathway_id}")
        return view_of(found[0], self._s.clock())

    def stats(self) -> Stats:
        """Counts over the whole library (one scan that reads only the counted attributes)."""
        total = active = embedded = demoted = 0
        by_model: Counter[str] = Counter()
        by_type: Counter[str] = Counter()
        high_hits: Counter[str] = Counter()
        families: set[str] = set()
        hit: list[tuple[int, str, str]] = []  # (hits, id, trigger type) of every pathway reused at least once
        for item in self.store.scan("pathway_id, trigger_type, demoted_at, hit_count, embedding_model"):
            total += 1
            trigger_type = item["trigger_type"]["S"]
            families.add(trigger_type)
            if "demoted_at" in item:
                demoted += 1
                continue
            active += 1
            by_type[trigger_type] += 1
            hits = int(item.get("hit_count", {}).get("N", "0"))
            high_hits[trigger_type] += hits >= HIGH_HITS
            if "embedding_model" in item:
                embedded += 1
                by_model[item["embedding_model"]["S"]] += 1
            if hits:
                hit.append((hits, item["pathway_id"]["S"], trigger_type))
        return Stats(
            total=total,
            active=active,
            embedded=embedded,
            by_model=dict(sorted(by_model.items())),
            by_trigger_type=dict(sorted(by_type.items())),
            maturity_by_trigger_type={f: maturity_of(by_type[f], high_hits[f]) for f in sorted(families)},
            demoted=demoted,
            top_hits=[
                TopHit(pathway_id=pathway_id, trigger_type=trigger_type, hit_count=hits)
                for hits, pathway_id, trigger_type in heapq.nsmallest(TOP_HITS, hit, key=lambda h: (-h[0], h[1]))
            ],
        )

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

    def family_axes(self, trigger_type: str, now: datetime) -> tuple[int, int]:
        """Maturity and Recency of a family for a flow's radar, from its latest snapshot's aggregates
        (the pointer the matcher uses too, cached per process: as fresh as the hourly snapshot anyway)."""
        pointer = self.snapshots.pointer(self._s.settings.pathway_embedding_model.value, trigger_type)
        if pointer is None:
            return NEUTRAL, NEUTRAL  # no pathway evidence either way yet
        maturity = family_maturity_score(pointer["count"], pointer["high_hits"])
        return maturity, recency_score(pointer.get("latest_activity"), now)

    def _audit(self, action: str, actor: str, subject: str, payload: dict[str, Any]) -> None:
        self._s.ledger.append(AuditEntry(action=action, actor=actor, subject=subject, payload=payload))


def compare_views(first: PathwayView, second: PathwayView) -> Comparison:
    """Per-axis deltas (second minus first), ranked by absolute size; the dominant pick (pure).

    Each side's standing is the sum of its positive axes minus its Risk; the higher wins, and on a
    tie the one with lower Risk; with Risk equal too, neither dominates.
    """
    a, b = first.dimensions, second.dimensions
    deltas = [
        AxisDelta(axis=axis, first=getattr(a, axis).score, second=getattr(b, axis).score, delta=0) for axis in AXES
    ]
    deltas = [d.model_copy(update={"delta": d.second - d.first}) for d in deltas]
    deltas.sort(key=lambda d: (-abs(d.delta), AXES.index(d.axis)))

    def standing(view: PathwayView) -> int:
        dims = view.dimensions
        positive: int = sum(getattr(dims, axis).score for axis in POSITIVE_AXES)
        return positive - dims.risk.score

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
    if a.risk.score != b.risk.score:
        winner = first if a.risk.score < b.risk.score else second
        reasoning = f"even at {one} (positive axes minus risk); {winner.pathway_id} carries less risk"
        return Comparison(first=first, second=second, deltas=deltas, dominant=winner.pathway_id, reasoning=reasoning)
    return Comparison(
        first=first, second=second, deltas=deltas, dominant=None, reasoning=f"even at {one} with equal risk"
    )
