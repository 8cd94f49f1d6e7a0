"""The seed's fixed precedence, row by row: explicit selection > Analyze All > history grounding >
relevance search; a selection never merged with prior sources unless include_prior; Analyze All
exhaustive within its limit (over it a 422), Chat/Search All relevance-bounded."""

from __future__ import annotations

from typing import Any

import pytest

from flowledger.api.errors import status_for
from flowledger.continuity.precedence import (
    MAX_ANALYZE_ALL_DOCUMENTS,
    AnalyzeLimitExceeded,
    SourceReason,
    TooManySources,
    resolve_sources,
)
from flowledger.continuity.refs import GroundedRef
from flowledger.continuity.request import SourceRequest
from flowledger.ids import new_id
from tests.unit.test_continuity_refs import ref_fields

PDF, OTHER = new_id("dc_"), new_id("dc_")
TABLE = GroundedRef.model_validate(ref_fields())
NOTES = GroundedRef.model_validate(
    ref_fields(file_name="notes.md", extension=".md", source_kind="narrative", last_engine="narrative")
)
PRIOR = (TABLE, NOTES)
BOTH = frozenset({"narrative", "tabular"})
NARRATIVE = frozenset({"narrative"})

# request, prior refs, catalog size -> basis, reason, explicit ids, prior refs kept, search, exhaustive, engines
ROWS: list[tuple[str, dict[str, Any], tuple[GroundedRef, ...], tuple[Any, ...]]] = [
    (
        "1a compare",
        {"action_mode": "compare", "source": PDF, "targets": [OTHER]},
        PRIOR,
        ("selected", SourceReason.COMPARE_EXPLICIT, (PDF, OTHER), (), False, False, BOTH),
    ),
    (
        "1b selection supersedes history",
        {"selection_mode": "selected", "document_ids": [PDF]},
        PRIOR,
        ("selected", SourceReason.EXPLICIT_SELECTION, (PDF,), (), False, False, BOTH),
    ),
    (
        "1c selection with prior",
        {"selection_mode": "selected", "document_ids": [PDF], "include_prior": True},
        PRIOR,
        ("selected", SourceReason.EXPLICIT_SELECTION_WITH_PRIOR, (PDF,), PRIOR, False, False, BOTH),
    ),
    (
        "2a analyze all",
        {"selection_mode": "all", "action_mode": "analyze"},
        PRIOR,
        ("all", SourceReason.ANALYZE_ALL_EXHAUSTIVE, (), (), False, True, BOTH),
    ),
    (
        "2b chat all",
        {"selection_mode": "all", "action_mode": "chat"},
        PRIOR,
        ("all", SourceReason.ALL_RELEVANCE_BOUNDED, (), (), True, False, NARRATIVE),
    ),
    (
        "2b search all",
        {"selection_mode": "all", "action_mode": "search"},
        (),
        ("all", SourceReason.ALL_RELEVANCE_BOUNDED, (), (), True, False, NARRATIVE),
    ),
    (
        "3a history",
        {"selection_mode": "history"},
        (TABLE,),
        ("history", SourceReason.HISTORY_GROUNDING, (), (TABLE,), False, False, frozenset({"tabular"})),
    ),
    (
        "3b relevance with prior refs",
        {"selection_mode": "relevance"},
        (TABLE,),
        ("history", SourceReason.HISTORY_THEN_RELEVANCE, (), (TABLE,), True, False, BOTH),
    ),
    (
        "4 no selection and no grounded refs",
        {},
        (),
        ("relevance", SourceReason.NO_GROUNDED_REFS, (), (), True, False, NARRATIVE),
    ),
    (
        "4 history asked, none grounded",
        {"selection_mode": "history", "action_mode": "analyze"},
        (),
        ("relevance", SourceReason.NO_GROUNDED_REFS, (), (), True, False, NARRATIVE),
    ),
]


@pytest.mark.parametrize(("name", "fields", "prior", "expected"), ROWS, ids=[row[0] for row in ROWS])
def test_each_precedence_row(
    name: str, fields: dict[str, Any], prior: tuple[GroundedRef, ...], expected: tuple[Any, ...]
) -> None:
    plan = resolve_sources(SourceRequest.model_validate(fields), prior, catalog_size=3)
    got = (
        plan.basis,
        plan.reason,
        plan.document_ids,
        plan.prior_refs,
        plan.search,
        plan.exhaustive,
        plan.candidate_engines,
    )
    assert got == expected


def test_include_prior_does_not_repeat_a_selected_prior_source() -> None:
    request = SourceRequest(selection_mode="selected", document_ids=[TABLE.document_id], include_prior=True)
    plan = resolve_sources(request, PRIOR)
    assert plan.document_ids == (TABLE.document_id,) and plan.prior_refs == (NOTES,)


def test_include_prior_over_the_per_turn_bound_is_a_422() -> None:
    selection = [new_id("dc_") for _ in range(99)]
    request = SourceRequest(selection_mode="selected", document_ids=selection, include_prior=True)
    with pytest.raises(TooManySources, match="101 documents") as caught:
        resolve_sources(request, PRIOR)
    assert status_for(caught.value) == 422


def test_analyze_all_within_its_limit_is_exhaustive_and_over_it_a_422() -> None:
    request = SourceRequest(selection_mode="all", action_mode="analyze")
    plan = resolve_sources(request, (), catalog_size=MAX_ANALYZE_ALL_DOCUMENTS)
    assert plan.exhaustive and plan.catalog_size == MAX_ANALYZE_ALL_DOCUMENTS and not plan.search
    with pytest.raises(AnalyzeLimitExceeded, match=f"at most {MAX_ANALYZE_ALL_DOCUMENTS} documents") as caught:
        resolve_sources(request, (), catalog_size=MAX_ANALYZE_ALL_DOCUMENTS + 1)
    assert status_for(caught.value) == 422


def test_panel_state_does_not_change_the_plan() -> None:
    body = {"selection_mode": "selected", "document_ids": [PDF]}
    plans = {
        resolve_sources(SourceRequest.model_validate({**body, **panel}), PRIOR)
        for panel in ({}, {"panel_open": True}, {"panel_open": False})
    }
    assert len(plans) == 1
