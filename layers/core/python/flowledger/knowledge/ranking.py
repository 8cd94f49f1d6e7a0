"""Ranking over the union of several scopes' chunks: Okapi BM25, optionally blended with embeddings.

The union is scored as one corpus (its size, average length and document frequencies summed over the
scopes), so a lookup over one scope ranks exactly as :class:`~flowledger.knowledge.bm25.Bm25` over
that scope's chunks, and adding a scope to a lookup never changes how the others' chunks compare.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from flowledger.knowledge.bm25 import K1, B, tokenize
from flowledger.knowledge.scope_cache import Chunk, ScopeCorpus
from flowledger.llm.embeddings import cosine

# Hybrid ranking: half BM25 (scaled to the best hit), half embedding cosine. A chunk sharing no word
# with the query counts as evidence only when its meaning is at least this close.
SEMANTIC_ONLY_THRESHOLD = 0.5


@dataclass(frozen=True)
class RankedChunk:
    scope: str
    chunk: Chunk
    score: float


def bm25_union(corpora: Sequence[ScopeCorpus], query: str) -> dict[tuple[int, int], float]:
    """BM25 scores of the chunks sharing a term with ``query``, keyed by (corpus index, chunk index)."""
    n = sum(len(corpus.chunks) for corpus in corpora)
    if n == 0:
        return {}
    average = sum(corpus.total_length for corpus in corpora) / n
    scores: dict[tuple[int, int], float] = {}
    # Terms in query order, repeats included, each added per chunk: the same sums, in the same order, as Bm25.
    for term in tokenize(query):
        df = sum(len(corpus.postings.get(term, ())) for corpus in corpora)
        if df == 0:
            continue
        # The "plus one" IDF keeps scores positive for terms in more than half of the corpus.
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for c, corpus in enumerate(corpora):
            for index, tf in corpus.postings.get(term, ()):
                norm = tf + K1 * (1 - B + B * corpus.lengths[index] / average)
                scores[(c, index)] = scores.get((c, index), 0.0) + idf * tf * (K1 + 1) / norm
    return {key: score for key, score in scores.items() if score > 0}


def rank(
    corpora: Sequence[ScopeCorpus],
    query: str,
    query_vector: Sequence[float] | None = None,
    embedding_model: str | None = None,
) -> list[RankedChunk]:
    """The chunks of ``corpora`` for ``query``, best first (ties in corpus, then chunk, order).

    Without a query vector: BM25 alone. With one: half BM25 scaled to the best hit, half the cosine
    to chunks embedded by the same model; a chunk sharing no word counts when its cosine reaches
    ``SEMANTIC_ONLY_THRESHOLD``.
    """
    lexical = bm25_union(corpora, query)
    if query_vector is None:
        ranked = list(lexical.items())
    else:
        top = max(lexical.values(), default=0.0) or 1.0
        ranked = []
        for c, corpus in enumerate(corpora):
            for index, chunk in enumerate(corpus.chunks):
                semantic = (
                    max(0.0, cosine(query_vector, chunk.embedding))
                    if chunk.embedding and chunk.embedding_model == embedding_model
                    else 0.0
                )
                key = (c, index)
                if key in lexical or semantic >= SEMANTIC_ONLY_THRESHOLD:
                    ranked.append((key, 0.5 * lexical.get(key, 0.0) / top + 0.5 * semantic))
    ranked.sort(key=lambda pair: (-pair[1], pair[0]))
    return [RankedChunk(corpora[c].scope, corpora[c].chunks[i], score) for (c, i), score in ranked]
