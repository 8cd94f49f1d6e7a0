"""The summary guard: a table of examples per pattern, and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowledger.reasoning.guard import BANNED, check_summary, guard_counts

UNSAFE = {
    "mrn": ["MRN: 12345678", "medical record number 88-1234", "mrn#A99812"],
    "long_id": ["matched record 123456789", "id 0123456789 reviewed"],
    "ssn": ["SSN 123-45-6789 on file", "checked 123 45 6789"],
    "dob": ["DOB: 1970-01-01", "date of birth confirmed", "born on the 3rd"],
    "iso_date": ["visit on 2024-03-15", "lab from 2023/11/02"],
    "phone": ["call (555) 123-4567", "phone 555.123.4567", "+1 555 123 4567"],
    "email": ["sent to jane.doe@example.com"],
    "medication_dose": ["reviewed metformin 500mg", "Lisinopril 10 mg daily", "insulin 12 units"],
    "icd10": ["coded E11.9", "diagnosis I10 noted", "code M54.5"],
    "titled_name": ["Dr. Jane Smith agreed", "spoke with Mrs Patel", "Dr Who"],
}
SAFE = [
    "Reviewed recent medications",
    "Retrieved three relevant guideline passages",
    "Compared lab trends over the last quarter",
    "Critic found the claim well supported",
    "Asked the care team to confirm the dose",
    "Summarised 4 documents",
]


@pytest.mark.parametrize(("pattern", "text"), [(p, t) for p, texts in UNSAFE.items() for t in texts])
def test_each_banned_pattern_is_caught(pattern: str, text: str) -> None:
    verdict = check_summary(text)
    assert not verdict.safe and pattern in verdict.reasons


@pytest.mark.parametrize("text", SAFE)
def test_summaries_that_describe_the_step_pass(text: str) -> None:
    assert check_summary(text).safe


def test_every_pattern_has_examples() -> None:
    assert set(UNSAFE) == set(BANNED)


@given(
    st.sampled_from(SAFE),
    st.sampled_from([t for texts in UNSAFE.values() for t in texts]),
    st.sampled_from(["", " ", ". ", " then "]),
)
def test_a_banned_fragment_anywhere_makes_the_summary_unsafe(safe: str, unsafe: str, glue: str) -> None:
    assert not check_summary(safe + glue + unsafe).safe
    assert not check_summary(unsafe + glue + safe).safe


@given(st.text(alphabet=st.characters(whitelist_categories=("Ll",)) | st.just(" "), max_size=280))
def test_lowercase_prose_without_digits_or_at_signs_passes(text: str) -> None:
    verdict = check_summary(text)
    assert verdict.safe or verdict.reasons == ("dob",)  # "born" / "date of birth" in prose still flags


@given(st.text(max_size=300))
def test_over_long_summaries_are_unsafe(text: str) -> None:
    assert check_summary(text + "x" * 281).safe is False


def test_counts_summarise_the_verdicts() -> None:
    safe, counts = guard_counts(["Reviewed labs", "called 555-123-4567", "Dr. Who agreed"])
    assert not safe
    assert counts == {"checked": 3, "unsafe": 2, "hit_phone": 1, "hit_titled_name": 1}
