"""Pathway scoring rules and the vectorised ranker against a one-by-one exact ranking."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from flowledger.ledger.events import timestamp
from flowledger.pathways.library import compare_views
from flowledger.pathways.models import PathwayView
from flowledger.pathways.radar import maturity_of, recency_score
from flowledger.pathways.ranking import Override, Ranker, composite, structural
from flowledger.reasoning.dimensions import Axis, Dimensions, bucket

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("bench/run-1/case-3", (1.0, "exact_ref")),
        ("bench/run-1", (0.7, "prefix_ref")),  # the pathway's ref prefixes the query's
        ("bench/run-1/case-3/retry", (0.7, "prefix_ref")),  # the query's ref prefixes the pathway's
        ("bench/run-2/case-3", (0.3, "trigger_type_only")),
    ],
)
def test_structural_scores(ref: str, expected: tuple[float, str]) -> None:
    assert structural("user_question", "bench/run-1/case-3", "user_question", ref) == expected


def test_another_family_scores_nothing() -> None:
    assert structural("user_question", "x", "lab_trend", "x") == (0.0, "none")


def test_composite_blends_and_clips_negative_cosine() -> None:
    assert composite(1.0, "exact_ref", None) == (1.0, "exact_ref")
    score, reason = composite(0.3, "trigger_type_only", 0.5)
    assert score == pytest.approx(0.3 * 0.3 + 0.7 * 0.5) and reason == "trigger_type_only+semantic"
    assert composite(0.7, "prefix_ref", -0.9)[0] == pytest.approx(0.21)  # never below the structural baseline share


def _family(n: int, seed: int, dims: int = 16, unembedded: float = 0.1) -> tuple[dict[str, object], np.ndarray]:
    rng = np.random.default_rng(seed)
    matrix = rng.normal(size=(n, dims)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    embedded = rng.random(n) >= unembedded
    matrix[~embedded] = 0.0
    refs = [f"case/{rng.integers(0, n // 3 + 1)}/{i % 7}" for i in range(n)]
    header = {
        "version": "v1",
        "created_at": "2026-11-30T00:00:00.000000Z",
        "model": "m",
        "trigger_type": "user_question",
        "ids": [f"pw_{i:026x}" for i in range(n)],
        "refs": refs,
        "hit_counts": rng.integers(0, 5, n).tolist(),
        "last_activity": ["2026-11-29T00:00:00.000000Z"] * n,
        "embedded": embedded.tolist(),
    }
    return header, matrix


def _exact(header: dict, matrix: np.ndarray, query: np.ndarray, ref: str, limit: int, overrides=None):  # type: ignore[no-untyped-def]
    overrides = overrides or {}
    cosines = matrix @ query  # every candidate scored in full (the same float32 product as the ranker's)
    rows = []
    for i, pathway_id in enumerate(header["ids"]):
        if pathway_id in overrides:
            continue
        base, reason = structural("user_question", ref, "user_question", header["refs"][i])
        cosine = float(cosines[i]) if header["embedded"][i] else None
        score, reason = composite(base, reason, cosine)
        rows.append((score, header["hit_counts"][i], pathway_id, reason))
    for pathway_id, change in overrides.items():
        if change.active:
            base, reason = structural("user_question", ref, "user_question", change.trigger_ref)
            cosine = float(np.asarray(change.vector, np.float32) @ query) if change.vector is not None else None
            score, reason = composite(base, reason, cosine)
            rows.append((score, change.hit_count, pathway_id, reason))
    rows.sort(key=lambda r: (-r[0], -r[1], r[2]))
    return [(r[2], round(r[0], 6), r[3]) for r in rows[:limit]]


@pytest.mark.parametrize("seed", range(6))
def test_the_ranker_returns_exactly_the_exact_ranking(seed: int) -> None:
    header, matrix = _family(400, seed)
    ranker = Ranker(header, matrix)
    rng = np.random.default_rng(100 + seed)
    query = rng.normal(size=16).astype(np.float32)
    query /= np.linalg.norm(query)
    ref = random.Random(seed).choice(header["refs"])  # type: ignore[arg-type]
    got = [(r.pathway_id, round(r.score, 6), r.reason) for r in ranker.rank(query, ref, 10)]
    assert got == _exact(header, matrix, query, ref, 10)


@pytest.mark.parametrize("seed", range(6))
def test_the_all_embedded_fast_path_returns_exactly_the_exact_ranking(seed: int) -> None:
    header, matrix = _family(500, seed, unembedded=0.0)
    header["hit_counts"] = [n % 3 for n in range(500)]  # many equal hit counts: ties fall to the id
    ranker = Ranker(header, matrix)
    query = np.random.default_rng(200 + seed).normal(size=16).astype(np.float32)
    query /= np.linalg.norm(query)
    got = [(r.pathway_id, round(r.score, 6), r.reason) for r in ranker.rank(query, "elsewhere", 10)]
    assert got == _exact(header, matrix, query, "elsewhere", 10)


def test_changes_since_the_snapshot_override_its_rows_and_demoted_ones_drop_out() -> None:
    header, matrix = _family(200, 7)
    ranker = Ranker(header, matrix)
    query = matrix[next(i for i, e in enumerate(header["embedded"]) if e)].copy()  # type: ignore[arg-type]
    best = ranker.rank(query, "nowhere", 3)
    demoted, boosted = best[0].pathway_id, header["ids"][150]  # type: ignore[index]
    overrides = {
        demoted: Override("nowhere", 0, None, active=False),
        boosted: Override("nowhere", 99, query.tolist(), active=True),
        "pw_new": Override("nowhere", 0, None, active=True),
    }
    got = [(r.pathway_id, round(r.score, 6), r.reason) for r in ranker.rank(query, "nowhere", 10, overrides)]
    assert got == _exact(header, matrix, query, "nowhere", 10, overrides)
    assert demoted not in [g[0] for g in got] and got[0][0] == boosted


def test_when_few_candidates_are_similar_ties_go_to_the_most_hit() -> None:
    header, matrix = _family(300, 3, unembedded=0.0)
    ranker = Ranker(header, matrix)
    query = -matrix[0]  # opposite to one row: most cosines are small or negative
    got = [(r.pathway_id, round(r.score, 6), r.reason) for r in ranker.rank(query, "nowhere", 25)]
    assert got == _exact(header, matrix, query, "nowhere", 25)


def test_an_empty_family_ranks_nothing() -> None:
    header, matrix = _family(0, 1)
    assert Ranker(header, matrix.reshape(0, 16)).rank(np.ones(16, np.float32) / 4, "x", 5) == []


@pytest.mark.parametrize(
    ("active", "high", "expected"),
    [(0, 0, "sparse"), (1, 0, "growing"), (5, 0, "growing"), (4, 1, "growing"), (5, 1, "mature")],
)
def test_maturity_buckets(active: int, high: int, expected: str) -> None:
    assert maturity_of(active, high) == expected


def test_recency_is_fresh_for_a_week_and_gone_at_ninety_days() -> None:
    assert recency_score(timestamp(NOW - timedelta(days=6)), NOW) == 7
    assert recency_score(timestamp(NOW - timedelta(days=90)), NOW) == 0
    assert 0 < recency_score(timestamp(NOW - timedelta(days=45)), NOW) < 7
    assert recency_score(None, NOW) == 0


def _view(pathway_id: str, **scores: int | None) -> PathwayView:
    axes = {a: 3 for a in ("confidence", "coverage", "maturity", "recency", "consensus", "risk")} | scores
    return PathwayView(
        pathway_id=pathway_id,
        seed_flow_id="fl_X",
        trigger_type="t",
        trigger_ref="r",
        trigger_summary="s",
        outcome_type="claim_created",
        hit_count=0,
        last_hit_at=None,
        created_at="2026-11-30T00:00:00.000000Z",
        embedding_model=None,
        demoted_at=None,
        demotion_reason=None,
        dimensions=Dimensions(**{a: Axis(score=s, bucket=bucket(s)) for a, s in axes.items()}),
    )


def test_comparison_ranks_deltas_and_picks_the_stronger() -> None:
    result = compare_views(_view("pw_a", recency=1, maturity=6), _view("pw_b", recency=7, coverage=4))
    assert [(d.axis, d.delta) for d in result.deltas[:3]] == [("recency", 6), ("maturity", -3), ("coverage", 1)]
    assert result.dominant == "pw_b" and "recency +6" in result.reasoning


def test_an_even_comparison_prefers_lower_risk_then_neither() -> None:
    assert compare_views(_view("pw_a", risk=2, coverage=2), _view("pw_b")).dominant == "pw_a"
    even = compare_views(_view("pw_a"), _view("pw_b"))
    assert even.dominant is None and "equal risk" in even.reasoning


def test_an_axis_not_rated_on_one_side_has_no_delta_and_counts_for_neither() -> None:
    # pw_a's 7 Consensus is not compared with a Consensus pw_b has no data for: without it they are even.
    result = compare_views(_view("pw_a", consensus=7), _view("pw_b", consensus=None))
    assert [(d.axis, d.first, d.second, d.delta) for d in result.deltas][-1] == ("consensus", 7, None, None)
    assert result.dominant is None and "equal risk" in result.reasoning
    unrated_risk = compare_views(_view("pw_a", risk=None), _view("pw_b", risk=1))
    assert unrated_risk.dominant is None and "risk not rated" in unrated_risk.reasoning


def test_ties_at_the_cut_off_go_to_the_most_hit_then_the_lower_id() -> None:
    header, matrix = _family(60, 5, unembedded=0.0)
    matrix[:] = matrix[0]  # every candidate embeds alike (bag-of-words twins do)
    header["hit_counts"] = [1] * 60
    header["hit_counts"][42] = 2
    header["ids"] = list(reversed(header["ids"]))  # the snapshot's row order is not the id order
    ranker = Ranker(header, matrix)
    got = [r.pathway_id for r in ranker.rank(matrix[0], "nowhere", 3)]
    ids = header["ids"]
    assert got == [ids[42], *sorted(i for n, i in enumerate(ids) if n != 42)[:2]]
