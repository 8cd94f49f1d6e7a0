"""Ranking a trigger family's pathways against a query: structural, semantic and composite scores.

Score of a candidate of the query's family: structural is 1.0 for the same trigger_ref
(``exact_ref``), 0.7 when one ref is a prefix of the other (``prefix_ref``), else 0.3
(``trigger_type_only``); a candidate of another family scores 0 (``none``). When the query and the
candidate carry vectors of the same model, the score is 0.3 * structural + 0.7 * max(0, cosine)
and the reason gains ``+semantic``. Ties go to the higher hit_count, then the lower id.

:class:`Ranker` does this over a whole family held as one matrix with a single product: apart
from the handful of exact or prefix refs, every embedded candidate's score rises with its cosine,
so the best are the best by cosine, found with ``argpartition`` like a plain exact scan; only a
short list of candidates is then scored one by one.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

STRUCTURAL_WEIGHT = 0.3
SEMANTIC_WEIGHT = 0.7
SCORES = {"exact_ref": 1.0, "prefix_ref": 0.7, "trigger_type_only": 0.3, "none": 0.0}


def structural(query_type: str, query_ref: str, trigger_type: str, trigger_ref: str) -> tuple[float, str]:
    """The structural score and its reason."""
    if trigger_type != query_type:
        reason = "none"
    elif trigger_ref == query_ref:
        reason = "exact_ref"
    elif query_ref.startswith(trigger_ref) or trigger_ref.startswith(query_ref):
        reason = "prefix_ref"
    else:
        reason = "trigger_type_only"
    return SCORES[reason], reason


def composite(structural_score: float, reason: str, cosine: float | None) -> tuple[float, str]:
    """Blend in the cosine when there is one (same model on both sides); negative cosine counts as 0."""
    if cosine is None:
        return structural_score, reason
    return STRUCTURAL_WEIGHT * structural_score + SEMANTIC_WEIGHT * max(0.0, cosine), reason + "+semantic"


@dataclass(frozen=True)
class Ranked:
    pathway_id: str
    score: float
    reason: str
    hit_count: int


@dataclass(frozen=True)
class Override:
    """A pathway changed since the snapshot: scored from this data instead of the snapshot's row."""

    trigger_ref: str
    hit_count: int
    vector: Sequence[float] | None  # unit length, same model as the snapshot, or None
    active: bool


class Ranker:
    """One family's snapshot in memory, ready to rank (build once per snapshot version)."""

    def __init__(self, header: Mapping[str, Any], matrix: np.ndarray) -> None:
        import numpy as np

        self.version: str = header["version"]
        self.created_at: str = header["created_at"]
        self.model: str = header["model"]
        self.trigger_type: str = header["trigger_type"]
        self.ids: list[str] = header["ids"]
        self.refs: list[str] = header["refs"]
        self.matrix = matrix
        self.hits = np.asarray(header["hit_counts"], dtype=np.int64)
        self.last_activity: list[str] = header["last_activity"]
        embedded = np.asarray(header["embedded"], dtype=bool)
        self.row_of = {pathway_id: row for row, pathway_id in enumerate(self.ids)}
        self._rows_by_ref: dict[str, list[int]] = {}
        for row, ref in enumerate(self.refs):
            self._rows_by_ref.setdefault(ref, []).append(row)
        self._sorted_refs = sorted(self._rows_by_ref)
        by_hits = np.argsort(-self.hits, kind="stable")
        self._embedded = embedded
        self._unembedded_by_hits = by_hits[~embedded[by_hits]]
        self._embedded_by_hits = by_hits[embedded[by_hits]]

    def __len__(self) -> int:
        return len(self.ids)

    def _special_rows(self, query_ref: str) -> set[int]:
        """Rows whose ref equals the query's or is a prefix of it, or that the query's ref prefixes."""
        rows: set[int] = set()
        for end in range(1, len(query_ref) + 1):
            rows.update(self._rows_by_ref.get(query_ref[:end], ()))
        start = bisect.bisect_left(self._sorted_refs, query_ref)
        for ref in self._sorted_refs[start:]:
            if not ref.startswith(query_ref):
                break
            rows.update(self._rows_by_ref[ref])
        return rows

    def rank(
        self,
        query: np.ndarray | None,
        query_ref: str,
        limit: int,
        overrides: Mapping[str, Override] | None = None,
    ) -> list[Ranked]:
        """The best ``limit`` candidates, best first; ``query`` is a unit vector of the snapshot's model."""
        import numpy as np

        overrides = overrides or {}
        skipped = {self.row_of[p] for p in overrides if p in self.row_of}
        width = limit + len(skipped)
        shortlist: set[int] = set(self._special_rows(query_ref))
        shortlist.update(self._unembedded_by_hits[:width].tolist())
        cosines: np.ndarray | None = None
        if query is not None and len(self.ids):
            cosines = self.matrix @ query
            best = np.argpartition(-cosines, width)[:width] if width < len(cosines) else np.arange(len(cosines))
            shortlist.update(best[self._embedded[best]].tolist())
            if np.min(cosines[best]) <= 0.0:
                # Fewer than `width` candidates have a positive cosine: the rest all score the same
                # and rank by hit count.
                clipped = self._embedded_by_hits[cosines[self._embedded_by_hits] <= 0.0]
                shortlist.update(clipped[:width].tolist())
        else:
            shortlist.update(self._embedded_by_hits[:width].tolist())
        scored: list[Ranked] = []
        for row in shortlist - skipped:
            cosine = float(cosines[row]) if cosines is not None and self._embedded[row] else None
            scored.append(self._ranked(self.ids[row], self.refs[row], int(self.hits[row]), query_ref, cosine))
        for pathway_id, change in overrides.items():
            if not change.active:
                continue
            cosine = None
            if query is not None and change.vector is not None:
                cosine = float(np.dot(np.asarray(change.vector, dtype=np.float32), query))
            scored.append(self._ranked(pathway_id, change.trigger_ref, change.hit_count, query_ref, cosine))
        scored.sort(key=lambda r: (-r.score, -r.hit_count, r.pathway_id))
        return scored[:limit]

    def _ranked(self, pathway_id: str, ref: str, hits: int, query_ref: str, cosine: float | None) -> Ranked:
        base, reason = structural(self.trigger_type, query_ref, self.trigger_type, ref)
        score, reason = composite(base, reason, cosine)
        return Ranked(pathway_id, round(score, 6), reason, hits)
