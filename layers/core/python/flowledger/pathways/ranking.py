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
from typing import TYPE_CHECKING, Any, NamedTuple

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


class Ranked(NamedTuple):
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

    def __init__(self, header: Mapping[str, Any], matrix: np.ndarray[Any, Any]) -> None:
        import numpy as np

        self.version: str = header["version"]
        self.created_at: str = header["created_at"]
        self.model: str = header["model"]
        self.trigger_type: str = header["trigger_type"]
        self.ids: list[str] = header["ids"]
        self.refs: list[str] = header["refs"]
        self.matrix = matrix
        self.hits = np.asarray(header["hit_counts"], dtype=np.int64)
        embedded = np.asarray(header["embedded"], dtype=bool)
        self.row_of = {pathway_id: row for row, pathway_id in enumerate(self.ids)}
        self._rows_by_ref: dict[str, list[int]] = {}
        for row, ref in enumerate(self.refs):
            self._rows_by_ref.setdefault(ref, []).append(row)
        self._sorted_refs = sorted(self._rows_by_ref)
        self._ref_lengths = sorted({len(ref) for ref in self._rows_by_ref})
        # Most hits first, then the lower id: the documented tie order, whatever the snapshot's row order.
        id_rank = np.empty(len(self.ids), dtype=np.int64)
        id_rank[sorted(range(len(self.ids)), key=self.ids.__getitem__)] = np.arange(len(self.ids))
        by_hits = np.lexsort((id_rank, -self.hits))
        self._argpartition = np.argpartition
        # Plain lists too: the per-candidate work reads single rows, which lists serve faster.
        self._embedded_list: list[bool] = embedded.tolist()
        self._hits_list: list[int] = self.hits.tolist()
        self._unembedded_count = int((~embedded).sum())
        self._unembedded_by_hits = by_hits[~embedded[by_hits]]
        self._embedded_by_hits = by_hits[embedded[by_hits]]

    def __len__(self) -> int:
        return len(self.ids)

    def _special_rows(self, query_ref: str) -> set[int]:
        """Rows whose ref equals the query's or is a prefix of it, or that the query's ref prefixes."""
        rows: set[int] = set()
        for length in self._ref_lengths:  # only the lengths some stored ref has
            if length > len(query_ref):
                break
            found = self._rows_by_ref.get(query_ref[:length])
            if found:
                rows.update(found)
        refs = self._sorted_refs
        position = bisect.bisect_left(refs, query_ref)
        while position < len(refs) and refs[position].startswith(query_ref):
            rows.update(self._rows_by_ref[refs[position]])
            position += 1
        return rows

    def rank(
        self,
        query: np.ndarray[Any, Any] | None,
        query_ref: str,
        limit: int,
        overrides: Mapping[str, Override] | None = None,
    ) -> list[Ranked]:
        """The best ``limit`` candidates, best first; ``query`` is a unit vector of the snapshot's model."""
        import numpy as np

        overrides = overrides or {}
        shortlist: set[int] = self._special_rows(query_ref)
        cosines: np.ndarray[Any, Any] | None = self.matrix @ query if query is not None and self.ids else None
        if cosines is not None and not overrides and not shortlist and not self._unembedded_count:
            fast = self._rank_by_cosine(cosines, limit)
            if fast is not None:
                return fast
        skipped = {self.row_of[p] for p in overrides if p in self.row_of}
        width = limit + len(skipped)
        if self._unembedded_count:
            shortlist.update(self._unembedded_by_hits[:width].tolist())
        known: dict[int, float] = {}  # row -> cosine, for the rows the partition already picked
        if cosines is not None:
            known = dict(zip(*self._best(cosines, width), strict=True))
            if min(known.values()) <= 0.0:
                # Fewer than `width` candidates have a positive cosine: the rest all score the same
                # and rank by hit count.
                clipped = self._embedded_by_hits[cosines[self._embedded_by_hits] <= 0.0]
                shortlist.update(clipped[:width].tolist())
            embedded = self._embedded_list
            shortlist.update(row for row in known if embedded[row])
        else:
            shortlist.update(self._embedded_by_hits[:width].tolist())
        shortlist -= skipped
        hits, ids, refs, embedded = self._hits_list, self.ids, self.refs, self._embedded_list
        ranked = self._ranked
        if cosines is not None:
            unknown = [row for row in shortlist if row not in known]
            if unknown:
                known.update(zip(unknown, cosines[unknown].tolist(), strict=True))
            scored = [ranked(ids[r], refs[r], hits[r], query_ref, known[r] if embedded[r] else None) for r in shortlist]
        else:
            scored = [ranked(ids[r], refs[r], hits[r], query_ref, None) for r in shortlist]
        for pathway_id, change in overrides.items():
            if not change.active:
                continue
            cosine = None
            if query is not None and change.vector is not None:
                cosine = float(np.dot(np.asarray(change.vector, dtype=np.float32), query))
            scored.append(self._ranked(pathway_id, change.trigger_ref, change.hit_count, query_ref, cosine))
        scored.sort(key=_rank_order)
        return scored[:limit]

    def _rank_by_cosine(self, cosines: np.ndarray[Any, Any], limit: int) -> list[Ranked] | None:
        """The common case, with the same result as the general path: every candidate is embedded
        and only trigger-type related, so its score is a fixed share plus 0.7 x its cosine. None
        when some of the best have no positive cosine (ties by hit count need the general path)."""
        if limit >= len(cosines):
            return None
        best, values = self._best(cosines, limit)
        if min(values) <= 0.0:
            return None
        hits, ids = self._hits_list, self.ids
        share = STRUCTURAL_WEIGHT * SCORES["trigger_type_only"]
        order = [(-(share + SEMANTIC_WEIGHT * c), -hits[r], ids[r]) for r, c in zip(best, values, strict=True)]
        order.sort()
        del order[limit:]  # ties at the cut-off may have widened the partition
        make = tuple.__new__  # what Ranked(...) does, without its argument handling (this is the hot path)
        return [
            make(Ranked, (pathway_id, -score, "trigger_type_only+semantic", -hit)) for score, hit, pathway_id in order
        ]

    def _best(self, cosines: np.ndarray[Any, Any], width: int) -> tuple[list[int], list[float]]:
        """The rows of the ``width`` highest cosines and their cosines, plus every row tied with the
        lowest of them (``argpartition`` alone would pick among those ties arbitrarily)."""
        import numpy as np

        count = len(cosines)
        if width >= count:
            return list(range(count)), cosines.tolist()
        cut = count - width
        order = self._argpartition(cosines, cut - 1)  # position cut - 1 holds the best row left out
        best = order[cut:]
        values = cosines[best].tolist()
        edge = float(cosines[order[cut - 1]])
        if edge == min(values):
            best = np.union1d(best, np.flatnonzero(cosines == edge))
            values = cosines[best].tolist()
        return best.tolist(), values

    def _ranked(self, pathway_id: str, ref: str, hits: int, query_ref: str, cosine: float | None) -> Ranked:
        score, reason = composite(*structural(self.trigger_type, query_ref, self.trigger_type, ref), cosine)
        return Ranked(pathway_id, score, reason, hits)


def _rank_order(ranked: Ranked) -> tuple[float, int, str]:
    return -ranked.score, -ranked.hit_count, ranked.pathway_id
