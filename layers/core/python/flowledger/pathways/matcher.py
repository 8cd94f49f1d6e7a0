"""Matching a (trigger_type, trigger_ref) against the pathway library (read-only).

Each process keeps the latest snapshot of every family it was asked about, with its version. It
checks the pointer at most every ``REFRESH_SECONDS`` and reloads only when the version moved; on
every match it reads the few pathways changed since the snapshot was taken (one index query), so
hits, new pathways and demotions count at once. Without a snapshot (a new deployment before the
first backfill) the family is read from DynamoDB alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flowledger.errors import UpstreamUnavailable
from flowledger.llm.ports import ModelError
from flowledger.pathways.models import Candidate, MatchResult, PathwayView
from flowledger.pathways.radar import pathway_dimensions
from flowledger.pathways.ranking import Override, Ranked, Ranker
from flowledger.pathways.snapshot import SnapshotStore, decode
from flowledger.pathways.store import PathwayStore, unpack_vector

if TYPE_CHECKING:
    from flowledger.llm.embeddings import EmbeddingModel

REFRESH_SECONDS = 30.0
_EMPTY_HEADER = {"created_at": "", "ids": [], "refs": [], "hit_counts": [], "last_activity": [], "embedded": []}


def query_text(trigger_type: str, trigger_ref: str) -> str:
    """What is embedded for a pathway and for a query: the same text on both sides."""
    return f"{trigger_type}: {trigger_ref}"


class _Cache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rankers: dict[tuple[str, str, str], tuple[Ranker, float]] = {}  # (bucket, model, family)


_CACHE = _Cache()


class PathwayMatcher:
    def __init__(
        self,
        store: PathwayStore,
        snapshots: SnapshotStore,
        embeddings: EmbeddingModel,
        clock: Callable[[], Any],
        monotonic: Callable[[], float] = time.monotonic,
        cache: _Cache = _CACHE,
    ) -> None:
        self._store = store
        self._snapshots = snapshots
        self._embeddings = embeddings
        self._clock = clock
        self._monotonic = monotonic
        self._cache = cache

    def ranker(self, trigger_type: str) -> Ranker:
        """The family's snapshot, loaded or refreshed as needed (an empty ranker when none is published)."""
        import numpy as np

        key = (self._snapshots.bucket, self._embeddings.name, trigger_type)
        now = self._monotonic()
        with self._cache.lock:
            cached = self._cache.rankers.get(key)
        if cached is not None and now - cached[1] < REFRESH_SECONDS:
            return cached[0]
        pointer = self._snapshots.pointer(self._embeddings.name, trigger_type)
        if pointer is None:
            header = {**_EMPTY_HEADER, "version": "none", "model": self._embeddings.name, "trigger_type": trigger_type}
            ranker = Ranker(header, np.zeros((0, 0), dtype=np.float32))  # ranks the changes alone
        elif cached is not None and cached[0].version == pointer["version"]:
            ranker = cached[0]
        else:
            ranker = Ranker(*decode(self._snapshots.read(pointer["key"])))
        with self._cache.lock:
            self._cache.rankers[key] = (ranker, now)
        return ranker

    def match(self, trigger_type: str, trigger_ref: str, limit: int) -> MatchResult:
        """Ranked candidates of the family, each with its radar profile; demoted pathways never appear."""
        import numpy as np

        ranker = self.ranker(trigger_type)
        changed = self._store.get_many(self._store.changed_since(trigger_type, ranker.created_at))
        overrides = {
            pathway_id: Override(
                trigger_ref=pathway.trigger_ref,
                hit_count=pathway.hit_count,
                vector=_unit(unpack_vector(vector))
                if vector is not None and pathway.embedding_model == self._embeddings.name
                else None,
                active=pathway.active,
            )
            for pathway_id, (pathway, vector) in changed.items()
        }
        try:
            embedded = self._embeddings.embed([query_text(trigger_type, trigger_ref)])[0]
        except ModelError as exc:
            raise UpstreamUnavailable(f"the embedding model {self._embeddings.name} did not answer") from exc
        query = np.asarray(_unit(embedded), np.float32)
        ranked = ranker.rank(query, trigger_ref, limit, overrides)
        return MatchResult(
            trigger_type=trigger_type,
            trigger_ref=trigger_ref,
            query_model=self._embeddings.name,
            snapshot_version=None if ranker.version == "none" else ranker.version,
            candidates=self._candidates(ranked),
        )

    def _candidates(self, ranked: list[Ranked]) -> list[Candidate]:
        stored = self._store.get_many(r.pathway_id for r in ranked)
        now = self._clock()
        out = []
        for r in ranked:
            if r.pathway_id not in stored:
                continue
            pathway, _ = stored[r.pathway_id]
            if not pathway.active:
                continue  # demoted after the snapshot and before the change was seen
            out.append(Candidate(pathway=view_of(pathway, now), score=round(r.score, 6), reason=r.reason))
        return out


def view_of(pathway: Any, now: Any) -> PathwayView:
    """The admin view of a pathway, with its radar."""
    return PathwayView(
        **pathway.model_dump(
            include={
                "pathway_id",
                "seed_flow_id",
                "trigger_type",
                "trigger_ref",
                "trigger_summary",
                "outcome_type",
                "hit_count",
                "last_hit_at",
                "created_at",
                "embedding_model",
                "demoted_at",
                "demotion_reason",
            }
        ),
        dimensions=pathway_dimensions(pathway, now),
    )


def _unit(vector: list[float]) -> list[float]:
    norm = sum(v * v for v in vector) ** 0.5
    return [v / norm for v in vector] if norm else vector
