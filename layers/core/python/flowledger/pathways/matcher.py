"""Matching a (trigger_type, trigger_ref) against the pathway library (read-only).

Each process keeps the latest snapshot of every family it was asked about, with its version. It
reads the pointer through the snapshot store's cache and reloads only when the version moved; on
every match it reads the few pathways changed since the snapshot was taken (one index query), so
hits, new pathways and demotions count at once. Without a snapshot (a new deployment before the
first backfill) the family is read from DynamoDB alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from flowledger.errors import UpstreamUnavailable
from flowledger.llm.ports import ModelError
from flowledger.pathways.models import Candidate, MatchResult, Pathway, PathwayView
from flowledger.pathways.radar import pathway_dimensions
from flowledger.pathways.ranking import Override, Ranked, Ranker
from flowledger.pathways.snapshot import SnapshotStore, decode
from flowledger.pathways.store import PathwayStore, unit, unpack_vector

if TYPE_CHECKING:
    from flowledger.llm.embeddings import EmbeddingModel

_EMPTY_HEADER = {"created_at": "", "ids": [], "refs": [], "hit_counts": [], "embedded": []}


def query_text(trigger_type: str, trigger_ref: str) -> str:
    """What is embedded for a pathway and for a query: the same text on both sides."""
    return f"{trigger_type}: {trigger_ref}"


class _Cache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rankers: dict[tuple[str, str, str], Ranker] = {}  # (bucket, model, family) -> latest loaded


_CACHE = _Cache()


class PathwayMatcher:
    def __init__(
        self,
        store: PathwayStore,
        snapshots: SnapshotStore,
        embeddings: EmbeddingModel,
        clock: Callable[[], datetime],
        cache: _Cache = _CACHE,
    ) -> None:
        self._store = store
        self._snapshots = snapshots
        self._embeddings = embeddings
        self._clock = clock
        self._cache = cache

    def ranker(self, trigger_type: str) -> Ranker:
        """The family's latest snapshot, loaded when its version moved (an empty ranker before the first)."""
        import numpy as np

        pointer = self._snapshots.pointer(self._embeddings.name, trigger_type)
        if pointer is None:
            header = {**_EMPTY_HEADER, "version": "none", "model": self._embeddings.name, "trigger_type": trigger_type}
            return Ranker(header, np.zeros((0, 0), dtype=np.float32))  # ranks the changes alone
        key = (self._snapshots.bucket, self._embeddings.name, trigger_type)
        with self._cache.lock:
            cached = self._cache.rankers.get(key)
        if cached is not None and cached.version == pointer["version"]:
            return cached
        ranker = Ranker(*decode(self._snapshots.read(pointer["key"])))
        with self._cache.lock:
            self._cache.rankers[key] = ranker
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
                vector=unit(unpack_vector(vector))
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
        query = np.asarray(unit(embedded), np.float32)
        ranked = ranker.rank(query, trigger_ref, limit, overrides)
        return MatchResult(
            trigger_type=trigger_type,
            trigger_ref=trigger_ref,
            query_model=self._embeddings.name,
            snapshot_version=None if ranker.version == "none" else ranker.version,
            candidates=self._candidates(ranked, changed),
        )

    def _candidates(self, ranked: list[Ranked], read: Mapping[str, tuple[Pathway, bytes | None]]) -> list[Candidate]:
        """The ranked pathways as stored now (those read as changes are not read again)."""
        stored = {**read, **self._store.get_many(r.pathway_id for r in ranked if r.pathway_id not in read)}
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


def view_of(pathway: Pathway, now: datetime) -> PathwayView:
    """The admin view of a pathway, with its radar."""
    shown = set(PathwayView.model_fields) - {"dimensions"}
    return PathwayView(**pathway.model_dump(include=shown), dimensions=pathway_dimensions(pathway, now))
