"""The local all-MiniLM-L6-v2 adapter giving real semantic matches offline: the model runs in this process
(sentence-transformers on torch, some 8 s of CPU to load), which is why it sits with the real-model tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from flowledger.config import load_settings
from flowledger.jobs import run_job
from flowledger.llm.embeddings import MiniLMEmbedding, cosine, pathway_embeddings_for
from flowledger.pathways.library import PathwayLibrary
from flowledger.reasoning.models import FlowView
from flowledger.services import Services
from tests.integration.test_pathway_embeddings import seed, with_model

pytestmark = pytest.mark.realmodel


def test_minilm_matches_by_meaning_offline(services: Services, qualifying_flow: Callable[[str, str], FlowView]) -> None:
    model = pathway_embeddings_for(load_settings(pathway_embedding_model="minilm_l6_v2"))
    assert isinstance(model, MiniLMEmbedding)
    angina, dyspnea, taxes = model.embed(
        ["chest pain on exertion", "angina with shortness of breath", "filing a late tax return"]
    )
    assert len(angina) == 384 and cosine(angina, dyspnea) > cosine(angina, taxes) + 0.2
    minilm = with_model(services, pathway_embedding_model="minilm_l6_v2")
    seed(minilm, qualifying_flow, ["angina with shortness of breath", "filing a late tax return"])
    assert run_job("pathway_embedding_backfill", minilm)["embedded"] == 2
    ranked = PathwayLibrary(minilm).match("user:op", "user_question", "chest pain on exertion", 2).candidates
    assert [c.pathway.trigger_ref for c in ranked] == ["angina with shortness of breath", "filing a late tax return"]
    assert all(c.reason == "trigger_type_only+semantic" for c in ranked) and ranked[0].score > ranked[1].score
