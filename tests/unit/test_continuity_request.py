"""The chat request's source fields: Compare needs its roles (422), selections are explicit, and a
UI-only field (a panel being open) changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from flowledger.continuity.request import MAX_COMPARE_TARGETS, MAX_SELECTED_DOCUMENTS, SourceRequest
from flowledger.ids import new_id

A, B, C = (new_id("dc_") for _ in range(3))


def refused(**fields: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        SourceRequest.model_validate(fields)
    return str(caught.value)


def test_defaults_are_a_chat_with_relevance_and_no_prior() -> None:
    request = SourceRequest()
    assert (request.selection_mode, request.action_mode, request.include_prior) == ("relevance", "chat", False)
    assert request.selected_ids == ()


@pytest.mark.parametrize(
    "fields",
    [
        {"action_mode": "compare"},
        {"action_mode": "compare", "source": A},
        {"action_mode": "compare", "targets": [B]},
        {"action_mode": "compare", "selection_mode": "all"},
    ],
)
def test_compare_without_an_explicit_source_and_targets_is_refused(fields: dict[str, Any]) -> None:
    assert "compare needs an explicit source and at least one target" in refused(**fields)


def test_compare_refuses_all_documents_rather_than_guessing() -> None:
    message = refused(action_mode="compare", source=A, targets=[B], selection_mode="all")
    assert "compare takes only its source and targets" in message


def test_compare_source_cannot_be_a_target_and_targets_are_bounded() -> None:
    assert "cannot also be one of its targets" in refused(action_mode="compare", source=A, targets=[B, A])
    many = [new_id("dc_") for _ in range(MAX_COMPARE_TARGETS + 1)]
    assert "targets" in refused(action_mode="compare", source=A, targets=many)
    ok = SourceRequest(action_mode="compare", source=A, targets=many[:MAX_COMPARE_TARGETS])
    assert ok.selected_ids == (A, *many[:MAX_COMPARE_TARGETS])


def test_source_and_targets_belong_to_compare_only() -> None:
    assert "compare only" in refused(source=A, targets=[B])


def test_a_selection_is_explicit_bounded_and_checked() -> None:
    assert "needs document_ids" in refused(selection_mode="selected")
    assert "only with selection_mode selected" in refused(document_ids=[A])
    assert "twice" in refused(selection_mode="selected", document_ids=[A, A])
    assert "document_ids" in refused(selection_mode="selected", document_ids=["doc_ops"])
    too_many = [new_id("dc_") for _ in range(MAX_SELECTED_DOCUMENTS + 1)]
    assert "document_ids" in refused(selection_mode="selected", document_ids=too_many)
    assert SourceRequest(selection_mode="selected", document_ids=[A, B]).selected_ids == (A, B)


def test_include_prior_is_strict_and_only_with_a_selection() -> None:
    assert "include_prior" in refused(include_prior=True)
    assert "include_prior" in refused(selection_mode="selected", document_ids=[A], include_prior="true")


def test_an_unknown_field_is_refused_not_ignored() -> None:
    assert "selection_mod" in refused(selection_mod="selected")


@pytest.mark.parametrize("panel", [{}, {"panel_open": True}, {"panel_open": False}, {"selection_panel_open": "x"}])
def test_selection_panel_open_or_closed_changes_nothing(panel: dict[str, Any]) -> None:
    body = {"selection_mode": "selected", "document_ids": [A, C], "action_mode": "analyze"}
    assert SourceRequest.model_validate({**body, **panel}) == SourceRequest.model_validate(body)
