"""The pathway library through the reasoning function on moto: extraction at close, match, hit,
backfill with snapshots, decay, stats, compare, and the radar's pathway axes."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowledger.jobs import run_job
from flowledger.llm.ports import ModelTransportError
from flowledger.pathways.snapshot import pointer_key
from flowledger.services import Services

WRITER = {"sub": "agent-researcher", "scope": "reasoning.write", "patient_id": ""}
ADMIN = "arn:aws:sts::123456789012:assumed-role/operator/jane"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
Call = Callable[..., tuple[int, Any]]


@pytest.fixture
def clock(services: Services) -> Callable[[datetime], None]:
    now = [T0]
    services.clock = lambda: now[0]

    def set_to(moment: datetime) -> None:
        now[0] = moment

    return set_to


@pytest.fixture
def call(services: Services, load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any) -> Call:
    handler = load_function("reasoning").handler

    def invoke(
        method: str, path: str, body: Any = None, who: dict[str, str] | None = None, admin: bool = True, **query: str
    ) -> tuple[int, Any]:
        event = rest_event(
            method, path, body=body, authorizer=who, user_arn=ADMIN if admin and who is None else None, query=query
        )
        response = handler(event, lambda_context)
        return response["statusCode"], json.loads(response["body"])

    return invoke


@pytest.fixture(autouse=True)
def same_services(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler uses the test's services (and its clock)."""
    monkeypatch.setattr("flowledger.api.app.bootstrap", lambda: services)


def flow(
    call: Call,
    ref: str,
    confidence: float = 0.95,
    outcome: str = "recommendation_delivered",
    summary: str = "Retrieved guideline passages",
) -> tuple[str, Any]:
    status, body = call(
        "POST",
        "/api/reasoning/flows",
        {"trigger_type": "user_question", "trigger_ref": ref, "trigger_summary": "A question about a lab trend"},
        WRITER,
    )
    assert status == 201, body
    flow_id = body["flow_id"]
    step = {"step_kind": "retrieval", "agent": "researcher", "summary_text": summary, "confidence": confidence}
    assert call("POST", f"/api/reasoning/flows/{flow_id}/steps", step, WRITER)[0] == 201
    closing = {
        "state": "completed",
        "outcome": {"type": outcome, "summary": "Recommended a follow-up", "confidence": 0.96},
    }
    status, closed = call("PATCH", f"/api/reasoning/flows/{flow_id}", closing, WRITER)
    assert status == 200, closed
    return flow_id, closed


def events(services: Services, action: str) -> list[Any]:
    return [e for chain in services.ledger.chain_ids() for e in services.ledger.read_chain(chain) if e.action == action]


def match(call: Call, ref: str, **query: str) -> Any:
    status, body = call(
        "GET", "/admin/v1/reasoning/pathways/match", trigger_type="user_question", trigger_ref=ref, **query
    )
    assert status == 200, body
    return body


@pytest.mark.usefixtures("clock")
def test_only_qualifying_closes_extract_and_each_skip_names_its_reason(call: Call, services: Services) -> None:
    flow(call, "chat/q-1")
    flow(call, "chat/q-2", confidence=0.85)
    flow(call, "chat/q-3", outcome="no_action")
    flow(call, "chat/q-4", summary="Reviewed metformin 500mg")
    flow(call, "benchmark/ev_1/case-1")  # qualifies in every other way: an evaluation run never seeds one
    assert len(events(services, "reasoning.pathway.extracted")) == 1
    reasons = sorted(e.payload["disqualifier"] for e in events(services, "reasoning.pathway.skipped"))
    assert reasons == ["benchmark", "low_confidence", "outcome_type", "unsafe_summary"]
    assert [c["pathway"]["trigger_ref"] for c in match(call, "chat/q-1")["candidates"]] == ["chat/q-1"]


@pytest.mark.usefixtures("clock")
def test_re_extraction_returns_the_same_pathway_without_a_second(call: Call, services: Services) -> None:
    flow_id, _ = flow(call, "chat/q-1")
    status, body = call("POST", "/admin/v1/reasoning/pathways/extract", {"flow_id": flow_id})
    assert status == 200 and body["created"] is False and body["disqualifier"] == "already_extracted"
    assert len(events(services, "reasoning.pathway.extracted")) == 1
    assert call("POST", "/admin/v1/reasoning/pathways/extract", {"flow_id": "fl_" + "0" * 26})[0] == 404


def test_matching_is_structural_first_then_blended_after_the_backfill(
    call: Call, services: Services, clock: Callable[[datetime], None]
) -> None:
    for ref in ("bench/run-1/case-1", "bench/run-1", "bench/run-2/case-9"):
        flow(call, ref)
    before = match(call, "bench/run-1/case-1")
    assert [(c["pathway"]["trigger_ref"], c["score"], c["reason"]) for c in before["candidates"]] == [
        ("bench/run-1/case-1", 1.0, "exact_ref"),
        ("bench/run-1", 0.7, "prefix_ref"),
        ("bench/run-2/case-9", 0.3, "trigger_type_only"),
    ]
    assert before["snapshot_version"] is None
    clock(T0 + timedelta(minutes=5))
    result = run_job("pathway_embedding_backfill", services)
    assert result["embedded"] == 3 and result["families"] == 1
    assert run_job("pathway_embedding_backfill", services)["embedded"] == 0  # idempotent
    pointer = services.aws.s3.get_object(
        Bucket=services.aws.bucket_name("artifacts"), Key=pointer_key("hash_bucket_v1", "user_question")
    )
    assert json.loads(pointer["Body"].read())["count"] == 3
    after = match(call, "bench/run-1/case-1")
    assert after["snapshot_version"] is not None
    assert [c["reason"] for c in after["candidates"]] == [
        "exact_ref+semantic",
        "prefix_ref+semantic",
        "trigger_type_only+semantic",
    ]
    assert after["candidates"][0]["score"] == pytest.approx(0.3 + 0.7)  # same text, cosine 1
    assert set(after["candidates"][0]["pathway"]["dimensions"]) == {
        "confidence",
        "coverage",
        "maturity",
        "recency",
        "consensus",
        "risk",
    }
    assert len(events(services, "reasoning.pathway.match_requested")) == 2
    assert [e.payload["top_reason"] for e in events(services, "reasoning.pathway.matched")] == [
        "exact_ref",
        "exact_ref+semantic",
    ]


@pytest.mark.usefixtures("clock")
def test_a_hit_counts_at_once_and_breaks_ties(call: Call, services: Services) -> None:
    for ref in ("chat/a", "chat/b"):
        flow(call, ref)
    tied = match(call, "chat/zzz")["candidates"]
    assert [c["score"] for c in tied] == [0.3, 0.3]
    second = tied[1]["pathway"]["pathway_id"]
    for _ in range(3):
        status, body = call("POST", f"/admin/v1/reasoning/pathways/{second}/hit")
        assert status == 200
    assert body["hit_count"] == 3 and body["last_hit_at"] == "2026-11-30T09:00:00.000000Z"
    assert {e.actor for e in events(services, "reasoning.pathway.hit")} == {ADMIN}
    assert match(call, "chat/zzz")["candidates"][0]["pathway"]["pathway_id"] == second  # ties go to the most hit
    run_job("pathway_embedding_backfill", services)
    call("POST", f"/admin/v1/reasoning/pathways/{second}/hit")  # after the snapshot: read as a change since
    fresh = [c for c in match(call, "chat/zzz")["candidates"] if c["pathway"]["pathway_id"] == second]
    assert fresh[0]["pathway"]["hit_count"] == 4
    assert call("POST", "/admin/v1/reasoning/pathways/pw_" + "0" * 26 + "/hit")[0] == 404
    assert call("POST", "/admin/v1/reasoning/pathways/nope/hit")[0] == 422


def test_decay_demotes_cold_then_stale_once_and_matching_skips_them(
    call: Call, services: Services, clock: Callable[[datetime], None]
) -> None:
    clock(T0)
    flow(call, "chat/cold")
    flow(call, "chat/used")
    used = next(c for c in match(call, "chat/used")["candidates"] if c["reason"] == "exact_ref")["pathway"][
        "pathway_id"
    ]
    assert call("POST", f"/admin/v1/reasoning/pathways/{used}/hit")[0] == 200
    run_job("pathway_embedding_backfill", services)  # demotions after this snapshot come in as changes
    clock(T0 + timedelta(days=29))
    assert run_job("pathway_decay", services)["demoted_cold"] == 0
    clock(T0 + timedelta(days=31))
    first = run_job("pathway_decay", services)
    assert (first["demoted_cold"], first["demoted_stale"]) == (1, 0)
    assert [c["pathway"]["trigger_ref"] for c in match(call, "chat/cold")["candidates"]] == ["chat/used"]
    clock(T0 + timedelta(days=91))
    second = run_job("pathway_decay", services)
    assert (second["demoted_cold"], second["demoted_stale"]) == (0, 1)
    assert run_job("pathway_decay", services)["demoted_stale"] == 0  # idempotent
    assert match(call, "chat/used")["candidates"] == []
    demoted = events(services, "reasoning.pathway.demoted")
    assert sorted(e.payload["reason"] for e in demoted) == ["cold_no_hits_30d", "stale_no_recent_hits_90d"]
    assert all(set(e.payload) == {"pathway_id", "reason", "hit_count", "age_days", "trigger_type"} for e in demoted)
    assert len(events(services, "memory.job.pathway_decay.started")) == 4
    assert len(events(services, "memory.job.pathway_decay.completed")) == 4
    status, body = call("POST", f"/admin/v1/reasoning/pathways/{used}/hit")
    assert (status, body["error"]) == (409, "conflict")
    assert call("GET", f"/admin/v1/reasoning/pathways/{used}")[1]["demotion_reason"] == "stale_no_recent_hits_90d"


@pytest.mark.usefixtures("clock")
def test_stats_count_the_library_and_classify_maturity(call: Call, services: Services) -> None:
    refs = [f"chat/{n}" for n in range(5)]
    for ref in refs:
        flow(call, ref)
    _, stats = call("GET", "/admin/v1/reasoning/pathways/stats")
    assert (stats["total"], stats["active"], stats["embedded"]) == (5, 5, 0)
    assert stats["maturity_by_trigger_type"] == {"user_question": "growing"} and stats["top_hits"] == []
    top = match(call, "chat/0")["candidates"][0]["pathway"]["pathway_id"]
    for _ in range(3):
        call("POST", f"/admin/v1/reasoning/pathways/{top}/hit")
    run_job("pathway_embedding_backfill", services)
    _, stats = call("GET", "/admin/v1/reasoning/pathways/stats")
    assert stats["maturity_by_trigger_type"] == {"user_question": "mature"}
    assert stats["by_model"] == {"hash_bucket_v1": 5} and stats["by_trigger_type"] == {"user_question": 5}
    assert stats["top_hits"] == [{"pathway_id": top, "trigger_type": "user_question", "hit_count": 3}]
    assert [e.actor for e in events(services, "admin.reasoning.pathway.stats_read")] == [ADMIN, ADMIN]


@pytest.mark.usefixtures("clock")
def test_a_close_takes_maturity_and_recency_from_the_family(call: Call, services: Services) -> None:
    _, first = flow(call, "chat/0")
    # No snapshot yet: the library cannot say, so both axes are not rated (not a neutral 3, not low).
    unrated = {"score": None, "bucket": "not_rated"}
    assert first["dimensions_snapshot"]["maturity"] == first["dimensions_snapshot"]["recency"] == unrated
    for n in range(1, 5):
        flow(call, f"chat/{n}")
    top = match(call, "chat/0")["candidates"][0]["pathway"]["pathway_id"]
    for _ in range(3):
        call("POST", f"/admin/v1/reasoning/pathways/{top}/hit")
    run_job("pathway_embedding_backfill", services)
    _, later = flow(call, "chat/5")
    assert later["dimensions_snapshot"]["maturity"]["bucket"] == "high"  # a mature family
    assert later["dimensions_snapshot"]["recency"]["score"] == 7  # hit just now


@pytest.mark.usefixtures("clock")
def test_compare_ranks_deltas_and_names_the_dominant(call: Call, services: Services) -> None:
    flow(call, "chat/a")
    flow(call, "chat/b", confidence=0.99)
    ids = [c["pathway"]["pathway_id"] for c in match(call, "chat/a")["candidates"]]
    hit = ids[1]
    for _ in range(5):
        call("POST", f"/admin/v1/reasoning/pathways/{hit}/hit")
    status, body = call("POST", "/admin/v1/reasoning/pathways/compare", {"pathway_ids": ids})
    assert status == 200 and body["dominant"] == hit
    assert body["deltas"][0] == {"axis": "maturity", "first": 0, "second": 7, "delta": 7}
    assert call("POST", "/admin/v1/reasoning/pathways/compare", {"pathway_ids": [ids[0], ids[0]]})[0] == 422
    assert call("POST", "/admin/v1/reasoning/pathways/compare", {"pathway_ids": ids[:1]})[0] == 422


def test_every_pathway_route_needs_an_iam_principal(call: Call) -> None:
    for method, path, body in (
        ("GET", "/admin/v1/reasoning/pathways/stats", None),
        ("POST", "/admin/v1/reasoning/pathways/compare", {"pathway_ids": ["pw_" + "0" * 26, "pw_" + "1" * 26]}),
        ("POST", "/admin/v1/reasoning/pathways/extract", {"flow_id": "fl_" + "0" * 26}),
        ("POST", "/admin/v1/reasoning/pathways/pw_" + "0" * 26 + "/hit", None),
    ):
        assert call(method, path, body, admin=False)[0] == 403
    status, _ = call(
        "GET", "/admin/v1/reasoning/pathways/match", admin=False, trigger_type="user_question", trigger_ref="x"
    )
    assert status == 403


@pytest.mark.usefixtures("clock")
def test_a_failing_extraction_never_fails_the_close(
    call: Call, services: Services, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_: Any) -> None:
        raise RuntimeError("the pathways table is unreachable")

    monkeypatch.setattr("flowledger.pathways.extraction.PathwayExtractor.extract", broken)
    _, closed = flow(call, "chat/q-1")
    assert closed["flow_state"] == "completed"
    assert events(services, "reasoning.pathway.extracted") == []
    assert "reasoning.pathway.extraction_failed" in capsys.readouterr().out  # the EMF metric


@pytest.mark.usefixtures("clock")
def test_a_family_without_pathways_matches_nothing(call: Call, services: Services) -> None:
    status, body = call(
        "GET", "/admin/v1/reasoning/pathways/match", trigger_type="lab_trend", trigger_ref="hba1c/rising"
    )
    assert (status, body["candidates"], body["snapshot_version"]) == (200, [], None)
    flow(call, "chat/only")
    run_job("pathway_embedding_backfill", services)  # publishes user_question only
    assert match(call, "chat/only")["candidates"][0]["reason"] == "exact_ref+semantic"


@pytest.mark.usefixtures("clock")
def test_an_unreachable_embedding_model_is_503(call: Call, services: Services) -> None:
    class Down:
        name = "hash_bucket_v1"

        def embed(self, texts: Any) -> Any:
            raise ModelTransportError("connection refused")

    services.__dict__["pathway_embeddings"] = Down()  # the cached property, replaced
    status, body = call("GET", "/admin/v1/reasoning/pathways/match", trigger_type="user_question", trigger_ref="x")
    assert (status, body["error"]) == (503, "upstream_unavailable")
