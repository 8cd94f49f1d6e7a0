from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from flowledger.llm.embeddings import DIMENSIONS, HashBucketEmbedding, cosine


def test_hash_bucket_vectors_are_deterministic_normalised_and_128_wide() -> None:
    model = HashBucketEmbedding()
    first, again = model.embed(["the audit ledger checkpoints"]), model.embed(["the audit ledger checkpoints"])
    assert first == again and len(first[0]) == DIMENSIONS
    assert math.isclose(math.sqrt(sum(x * x for x in first[0])), 1.0)


def test_shared_words_make_texts_closer() -> None:
    ledger, checkpoints, consent = HashBucketEmbedding().embed(
        ["ledger checkpoint merkle root", "merkle checkpoint of the ledger", "patients give consent"]
    )
    assert cosine(ledger, checkpoints) > cosine(ledger, consent)


@given(st.lists(st.floats(-10, 10), min_size=3, max_size=3), st.lists(st.floats(-10, 10), min_size=3, max_size=3))
def test_cosine_is_bounded_and_symmetric(a: list[float], b: list[float]) -> None:
    value = cosine(a, b)
    assert -1.0000001 <= value <= 1.0000001 and math.isclose(value, cosine(b, a), abs_tol=1e-12)
