"""Pathway embeddings: re-embedding on a model change (OpenAI adapter on a scripted server). The local
all-MiniLM-L6-v2 adapter's real semantic matches are tests/realmodel/test_minilm_embeddings.py's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowledger.config import load_settings
from flowledger.jobs import run_job
from flowledger.pathways.extraction import PathwayExtractor
from flowledger.pathways.library import PathwayLibrary
from flowledger.reasoning.models import FlowView
from flowledger.services import Services

STEPS = [{"step_kind": "retrieval", "confidence": 0.95}]


def seed(services: Services, make: Callable[[str, str], FlowView], refs: list[str]) -> None:
    for n, ref in enumerate(refs):
        assert PathwayExtractor(services).extract(make(f"fl_01JEMBEDDINGS{n:013d}", ref), STEPS, "agent").created


def with_model(services: Services, **settings: Any) -> Services:
    return Services(settings=load_settings(**settings), aws=services.aws, clock=services.clock)


def test_a_model_change_re_embeds_every_pathway_once(
    services: Services, scripted_openai: Any, qualifying_flow: Callable[[str, str], FlowView]
) -> None:
    seed(services, qualifying_flow, ["chat/one", "chat/two", "chat/three"])
    assert run_job("pathway_embedding_backfill", services)["embedded"] == 3
    openai = with_model(
        services, pathway_embedding_model="openai_text_3_small", openai_base_url=scripted_openai.base_url
    )
    assert run_job("pathway_embedding_backfill", openai)["embedded"] == 3
    assert run_job("pathway_embedding_backfill", openai)["embedded"] == 0
    assert {request["dimensions"] for request in scripted_openai.requests} == {128}
    stats = PathwayLibrary(openai).stats()
    assert stats.by_model == {"openai_text_3_small": 3} and stats.embedded == 3
    result = PathwayLibrary(openai).match("user:op", "user_question", "chat/one", 3)
    assert result.query_model == "openai_text_3_small" and result.candidates[0].reason == "exact_ref+semantic"
