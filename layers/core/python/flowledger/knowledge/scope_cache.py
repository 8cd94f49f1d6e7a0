"""One scope's chunks held in memory, and the bounded LRU of them a process keeps (no I/O here).

A scope is cached with the version marker it was read at; the index re-reads a scope only when its
stored version differs. The cache holds at most ``MAX_CACHED_SCOPES`` scopes and ``MAX_CACHED_CHUNKS``
chunks in all, evicting the least recently used first, so a process's memory does not grow with the
number of workspaces or conversations it has served.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from flowledger.knowledge.bm25 import tokenize
from flowledger.knowledge.scopes import MAX_LOOKUP_CHUNKS

MAX_CACHED_SCOPES = 128
"""Scopes a process keeps loaded; at least ``MAX_SCOPES_PER_LOOKUP``, so one lookup never evicts its own scopes."""

MAX_CACHED_CHUNKS = MAX_LOOKUP_CHUNKS
"""Chunks a process keeps loaded in all (roughly 10 KB each with their terms and vector: about 200 MB)."""


@dataclass(frozen=True)
class Chunk:
    """One searchable piece of the current version of a document."""

    document_id: str
    title: str
    version: int
    text: str
    embedding: list[float] | None = None
    embedding_model: str | None = None


@dataclass(frozen=True)
class ScopeCorpus:
    """The current chunks of one scope at one version, with the postings BM25 needs.

    ``postings`` maps a term to the chunks holding it and how often, so a lookup touches only the
    chunks that share a word with the query.
    """

    scope: str
    version: int
    chunks: tuple[Chunk, ...]
    lengths: tuple[int, ...]
    postings: dict[str, tuple[tuple[int, int], ...]] = field(repr=False)

    @property
    def total_length(self) -> int:
        return sum(self.lengths)

    @classmethod
    def build(cls, scope: str, version: int, chunks: list[Chunk]) -> ScopeCorpus:
        """Tokenize ``chunks`` once, when the scope is loaded (terms interned: one string per word)."""
        lengths: list[int] = []
        postings: dict[str, list[tuple[int, int]]] = {}
        for index, chunk in enumerate(chunks):
            counts = Counter(sys.intern(term) for term in tokenize(chunk.text))
            lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                postings.setdefault(term, []).append((index, tf))
        return cls(scope, version, tuple(chunks), tuple(lengths), {t: tuple(p) for t, p in postings.items()})


class ScopeCache:
    """A thread-safe LRU of :class:`ScopeCorpus`, bounded in scopes and in total chunks."""

    def __init__(self, max_scopes: int = MAX_CACHED_SCOPES, max_chunks: int = MAX_CACHED_CHUNKS) -> None:
        self.max_scopes, self.max_chunks = max_scopes, max_chunks
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, ScopeCorpus] = OrderedDict()
        self._chunks = 0

    def get(self, scope: str) -> ScopeCorpus | None:
        """The cached corpus of ``scope`` (now the most recently used), or None."""
        with self._lock:
            corpus = self._entries.get(scope)
            if corpus is not None:
                self._entries.move_to_end(scope)
            return corpus

    def put(self, corpus: ScopeCorpus) -> None:
        """Keep ``corpus`` (replacing its scope's older version), then evict the least recently used
        until both bounds hold. A corpus larger than the whole cache is not kept at all."""
        with self._lock:
            old = self._entries.pop(corpus.scope, None)
            if old is not None:
                self._chunks -= len(old.chunks)
            if len(corpus.chunks) > self.max_chunks:
                return
            self._entries[corpus.scope] = corpus
            self._chunks += len(corpus.chunks)
            while len(self._entries) > self.max_scopes or self._chunks > self.max_chunks:
                _, evicted = self._entries.popitem(last=False)
                self._chunks -= len(evicted.chunks)

    @property
    def scopes(self) -> tuple[str, ...]:
        """The cached scopes, least recently used first."""
        with self._lock:
            return tuple(self._entries)

    @property
    def chunk_count(self) -> int:
        """Chunks held in all (kept as a running total, checked against the entries in the tests)."""
        with self._lock:
            return self._chunks
