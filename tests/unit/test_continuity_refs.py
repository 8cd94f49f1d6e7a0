"""Grounded refs are safe by construction: a closed set of document-level fields, coverage consistent
with the evidence status, never a result, a locator or a secret, at most 100 per turn."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from flowledger.continuity.refs import GroundedRef, GroundedRefs
from flowledger.ids import new_id

WORKSPACE = new_id("ws_")


def ref_fields(**overrides: Any) -> dict[str, Any]:
    document_id = overrides.pop("document_id", new_id("dc_"))
    return {
        "document_id": document_id,
        "revision_family": document_id,
        "scope": "workspace",
        "scope_id": WORKSPACE,
        "file_name": "sales.csv",
        "extension": ".csv",
        "source_kind": "tabular",
        "source_version": 1,
        "last_engine": "tabular",
        "evidence_status": "completed",
        "coverage": 1.0,
        **overrides,
    }


def test_a_complete_ref_validates() -> None:
    ref = GroundedRef.model_validate(ref_fields())
    assert ref.scope_name == f"workspace:{WORKSPACE}"


@pytest.mark.parametrize("extra", ["rows", "result", "s3_key", "storage_key", "presigned_url", "api_key"])
def test_results_locators_and_secrets_have_no_field(extra: str) -> None:
    with pytest.raises(ValidationError, match="Extra inputs"):
        GroundedRef.model_validate(ref_fields(**{extra: "x"}))


@pytest.mark.parametrize(
    "name",
    ["AKIAABCDEFGHIJKLMNOP.csv", "x-X-Amz-Signature=abc.csv", "sk-abcdefghijklmnopqrstu.csv", "Bearer abc.csv"],
)
def test_a_file_name_carrying_a_locator_or_credential_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="never a locator or a credential"):
        GroundedRef.model_validate(ref_fields(file_name=name))


@pytest.mark.parametrize(
    ("status", "coverage", "ok"),
    [
        ("completed", 1.0, True),
        ("completed", 0.9, False),  # full coverage is never claimed when it was partial
        ("partial", 0.5, True),
        ("partial", 1.0, False),
        ("partial", 0.0, False),
        ("failed", 0.0, True),
        ("skipped", 0.2, False),
    ],
)
def test_coverage_agrees_with_the_evidence_status(status: str, coverage: float, ok: bool) -> None:
    fields = ref_fields(evidence_status=status, coverage=coverage)
    if ok:
        assert GroundedRef.model_validate(fields).coverage == coverage
    else:
        with pytest.raises(ValidationError, match="coverage"):
            GroundedRef.model_validate(fields)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"revision_family": new_id("dc_")}, "revision_family"),
        ({"scope": "conversation"}, "scope_id is not a conversation id"),
        ({"extension": ".xlsx"}, "extension is the file name's extension"),
        ({"source_kind": "narrative"}, "does not end in .csv"),
        ({"file_name": "notes.md", "extension": ".md"}, "a tabular source does not end in .md"),
        ({"source_version": 0}, "source_version"),
        ({"coverage": True}, "coverage"),
        ({"file_name": "a/b.csv"}, "file_name"),
    ],
)
def test_inconsistent_refs_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        GroundedRef.model_validate(ref_fields(**overrides))


def test_a_turn_holds_at_most_100_refs_each_document_once() -> None:
    session, run = new_id("ses_"), new_id("run_")
    refs = [ref_fields() for _ in range(100)]
    assert len(GroundedRefs(session_id=session, run_id=run, refs=refs).refs) == 100
    with pytest.raises(ValidationError, match="at most 100"):
        GroundedRefs.model_validate({"session_id": session, "run_id": run, "refs": [*refs, ref_fields()]})
    twice = ref_fields()
    with pytest.raises(ValidationError, match="each document once"):
        GroundedRefs.model_validate({"session_id": session, "run_id": run, "refs": [twice, twice]})
