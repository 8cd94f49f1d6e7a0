"""Ranking across scopes against single-corpus BM25, the bounded scope cache, and the scope rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowledger.errors import InvalidInput
from flowledger.knowledge.bm25 import Bm25
from flowledger.knowledge.ranking import rank
from flowledger.knowledge.scope_cache import MAX_CACHED_CHUNKS, MAX_CACHED_SCOPES, Chunk, ScopeCache, ScopeCorpus
from flowledger.knowledge.scopes import (
    MAX_LOOKUP_CHUNKS,
    MAX_SCOPES_PER_LOOKUP,
    check_document_key,
    check_lookup_scopes,
    check_scope,
)
from tests.hypothesis_profiles import examples

WORDS = ["ledger", "merkle", "zebra", "giraffe", "checkout", "queue", "restart", "the", "of", "runbook"]
texts = st.lists(st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join), min_size=1, max_size=12)


def corpus(scope: str, bodies: list[str], version: int = 1) -> ScopeCorpus:
    return ScopeCorpus.build(scope, version, [Chunk(f"doc_{scope}_{n}", "T", 1, text) for n, text in enumerate(bodies)])


@settings(max_examples=examples(200), deadline=None)
@given(texts, st.integers(min_value=0, max_value=12), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
def test_ranking_split_scopes_equals_bm25_over_their_union(bodies: list[str], cut: int, query_words: list[str]) -> None:
    query = " ".join(query_words)
    split = [corpus("a", bodies[:cut]), corpus("b", bodies[cut:])]
    ranked = [(r.chunk.text, r.score) for r in rank(split, query)]
    expected = [(bodies[s.index], s.score) for s in Bm25(bodies).score(query)]
    assert ranked == expected  # the same scores to the last bit, in the same order


def test_a_hit_says_which_scope_it_came_from() -> None:
    ranked = rank([corpus("workspace:a", ["zebra herd"]), corpus("global", ["giraffe herd"])], "zebra")
    assert [(r.scope, r.chunk.text) for r in ranked] == [("workspace:a", "zebra herd")]


def test_the_cache_evicts_the_least_recently_used_within_both_bounds() -> None:
    cache = ScopeCache(max_scopes=3, max_chunks=5)
    for name, size in (("a", 1), ("b", 2), ("c", 1)):
        cache.put(corpus(name, ["zebra"] * size))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put(corpus("d", ["zebra"]))  # four scopes: b, the least recent, goes
    assert (cache.scopes, cache.chunk_count) == (("c", "a", "d"), 3)
    cache.put(corpus("e", ["zebra"] * 3))  # 6 chunks in four scopes: c, the least recent, goes
    assert (cache.scopes, cache.chunk_count) == (("a", "d", "e"), 5)
    cache.put(corpus("f", ["zebra"] * 4))  # 9 chunks: a, d and then e go
    assert (cache.scopes, cache.chunk_count) == (("f",), 4)
    cache.put(corpus("f", ["zebra"], version=2))  # a new version replaces the old, and its count
    assert (cache.scopes, cache.chunk_count, cache.get("f").version) == (("f",), 1, 2)  # type: ignore[union-attr]
    cache.put(corpus("huge", ["zebra"] * 6))  # larger than the whole cache: not kept, nothing evicted
    assert (cache.scopes, cache.chunk_count) == (("f",), 1)


def test_one_lookup_fits_the_cache() -> None:
    assert MAX_CACHED_SCOPES >= MAX_SCOPES_PER_LOOKUP and MAX_CACHED_CHUNKS >= MAX_LOOKUP_CHUNKS


@pytest.mark.parametrize("scope", ["global", "workspace:ws_01", "conversation:ses_01J0ABCDEF", "workspace:a.b-c"])
def test_scopes_of_each_kind_are_accepted(scope: str) -> None:
    assert check_scope(scope) == scope


@pytest.mark.parametrize("scope", ["", "Global", "workspace", "workspace:", "group:a", "workspace:a#b", "workspace:/a"])
def test_anything_else_is_not_a_scope(scope: str) -> None:
    with pytest.raises(InvalidInput, match="not a knowledge scope"):
        check_scope(scope)


def test_lookup_scopes_are_deduplicated_in_order_and_bounded() -> None:
    assert check_lookup_scopes(["workspace:b", "global", "workspace:b"]) == ("workspace:b", "global")
    with pytest.raises(InvalidInput, match="at most 100 scopes"):
        check_lookup_scopes([f"workspace:w{n}" for n in range(101)])


@pytest.mark.parametrize("key", ["doc_0123456789abcdef", "fam_01J0", "A-1"])
def test_document_keys(key: str) -> None:
    assert check_document_key(key) == key
    with pytest.raises(InvalidInput, match="not a document id"):
        check_document_key(key + "/x")
