"""The summary guard: a table of examples per pattern, a safe corpus measured for false alarms, and properties."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from flowledger.reasoning.guard import BANNED, check_summary, guard_counts

UNSAFE = {
    "mrn": ["MRN: 12345678", "medical record number 88-1234", "mrn#A99812"],
    "long_id": [
        "matched record 123456789",
        "id 0123456789 reviewed",
        "matched member 123456789012",
        "card 1234 5678 9012 3456",
        "account 123-456-789-012",
        "NHS 943 476 5919",
    ],
    "ssn": ["SSN 123-45-6789 on file", "checked 123 45 6789"],
    "dob": ["DOB: 1970-01-01", "date of birth confirmed", "born on the 3rd"],
    "iso_date": ["visit on 2024-03-15", "lab from 2023/11/02"],
    "phone": ["call (555) 123-4567", "phone 555.123.4567", "+1 555 123 4567"],
    "email": ["sent to jane.doe@example.com"],
    "medication_dose": [
        "reviewed metformin 500mg",
        "Lisinopril 10 mg daily",
        "insulin 12 units",
        "Atorvastatin 40 MG",
        "metformin500mg",
        "500 milligrams",
        "given 2.5 Micrograms",
        "five hundred milligrams",
        "10 millilitres twice a day",
        "20 milliliters",
        "8 IU at night",
        "250 µg inhaled",
        "dose 1,000mg",
    ],
    "icd10": ["coded E11.9", "diagnosis I10 noted", "code M54.5"],
    "titled_name": [
        "Dr. Jane Smith agreed",
        "read at level 8MS Kaur agreed",  # a title glued to a number is still a title
        "spoke with Mrs Patel",
        "Dr Who",
        "Dr. smith",
        "asked dr jones",
        "DR SMITH signed",
        "PROF. o'neill reviewed",
        "mr. lee called",
        "spoke to ms. kaur",  # glued to a word, lowercase "ms." is "items." and passes
        "MS Kaur agreed",
        "Dr.Smith",
    ],
}
# Realistic step summaries: most mention numbers, durations, counts, percentages or versions. None
# may be refused; a rule that refuses one of these costs a patient a readable flow.
SAFE = [
    "Reviewed recent medications",
    "Retrieved three relevant guideline passages",
    "Compared lab trends over the last quarter",
    "Critic found the claim well supported",
    "Asked the care team to confirm the dose",
    "Summarised 4 documents",
    "Retrieved 3 passages in 120 ms",
    "Confidence 0.93 after 2 retries",
    "Checked 12 claims",
    "Ran step 4 of 7",
    "Model v1.2",
    "p95 latency 340 ms",
    "p95 latency 340 ms across 3 runs",
    "Ranked 25 candidates; kept the top 5",
    "Coverage 87% of the question's claims",
    "Drafted an answer in 2.4 s using 1,536 tokens",
    "Used 2 GB of memory for the index",
    "Embedding model v3.1.0 returned 384 dimensions",
    "Retried the search 3 times after a timeout of 30 s",
    "Critic scored the draft 0.81, below the 0.85 threshold",
    "Merged 2 parent steps into one verdict",
    "Fetched 10 of 250 passages from the knowledge base",
    "Latency in ms reported for 4 tool calls",
    "Profiled 3 steps; the slowest took 1.2 s",
    "Drafted a reply citing 2 guidelines",
    "Ran from 10:30 to 11:45 on 3 shards",
    "Step took 0:00:12.345 end to end",
    "Similarity 0.123456789 for the best match",
    "Processed 1,234,567 tokens in 12 batches",
    "Cache miss rate 3% over 1000 lookups",
    "Queued 1 follow-up research request",
    "Checked 40 items against the policy",
    "Checked 40 items. Then ranked the top 5",
    "Queried 2 LLMs in parallel",
    "Answered in 340 ms. Then closed the step",
    "Linked parent step st_01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "Prompt template version 12 used",
    "Rejected 2 of 9 claims as unsupported",
    "Answered in 4 sentences at reading level 8",
    "Waited 5 min for the upstream model",
    "Selected pathway 3 of 4 by score 0.72",
    "Reviewed the doctor's notes summary",
    "Compared 2 drafts; the second scored 12% higher",
    "Completed 100% of planned checks in 45 s",
]
# The price of being conservative, kept measured: each is refused today. Move one to SAFE when a
# rule learns to tell it apart.
KNOWN_FALSE_ALARMS = {
    "Compared 3 ML models": "medication_dose",  # "3 ML" reads as a dose in any case
    "Split the work into 4 units": "medication_dose",
    "Reviewed the MR report": "titled_name",  # "MR" is a title in capitals
    "P95 latency 340 ms": "icd10",  # P95 is also an ICD-10 code
}


@pytest.mark.parametrize(("pattern", "text"), [(p, t) for p, texts in UNSAFE.items() for t in texts])
def test_each_banned_pattern_is_caught(pattern: str, text: str) -> None:
    verdict = check_summary(text)
    assert not verdict.safe and pattern in verdict.reasons


@pytest.mark.parametrize("text", SAFE)
def test_summaries_that_describe_the_step_pass(text: str) -> None:
    assert check_summary(text).reasons == ()


def test_false_alarm_rate_on_the_safe_corpus_is_zero() -> None:
    safe, counts = guard_counts(SAFE)
    assert len(SAFE) >= 40
    assert (safe, counts["checked"], counts["unsafe"]) == (True, len(SAFE), 0)


@pytest.mark.parametrize(("text", "reason"), KNOWN_FALSE_ALARMS.items())
def test_known_false_alarms_are_refused(text: str, reason: str) -> None:
    assert check_summary(text).reasons == (reason,)


def test_every_pattern_has_examples() -> None:
    assert set(UNSAFE) == set(BANNED)


@given(
    # Summaries start with a capital; glued to a lowercase word a unit reads as part of it ("500mgp95").
    st.sampled_from([s for s in SAFE if s[0].isupper()]),
    st.sampled_from([t for texts in UNSAFE.values() for t in texts]),
    st.sampled_from(["", " ", ". ", " then "]),
)
def test_a_banned_fragment_anywhere_makes_the_summary_unsafe(safe: str, unsafe: str, glue: str) -> None:
    # A summary ending in an id ("...69G5FAV") glued to the fragment makes one token ("...FAV10 ml",
    # "...FAVDr Who"), which the guard reads as part of the id by design: a number after a capital is no dose.
    if glue or not (safe[-1].isupper() or safe[-1].isdigit()):
        assert not check_summary(safe + glue + unsafe).safe
    assert not check_summary(unsafe + glue + safe).safe


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("reviewed metformin 500mgReviewed recent medications", "medication_dose"),
        ("Atorvastatin 40 MGReviewed recent medications", "medication_dose"),
        ("Summarised 4 documentsDr. Jane Smith agreed", "titled_name"),
        ("Reviewed recent medicationsmr. lee called", "titled_name"),
        ("Checked 12 claimsMS Kaur agreed", "titled_name"),
        ("matched 1234567890Reviewed", "long_id"),
    ],
)
def test_a_fragment_glued_to_a_word_still_counts(text: str, pattern: str) -> None:
    assert pattern in check_summary(text).reasons


def any_casing(word: str) -> st.SearchStrategy[str]:
    flips = st.lists(st.booleans(), min_size=len(word), max_size=len(word))
    return flips.map(lambda upper: "".join(c.upper() if u else c.lower() for c, u in zip(word, upper, strict=True)))


UNITS = ["mg", "mcg", "µg", "ug", "g", "ml", "iu", "units", "mmol", "milligrams", "micrograms", "grams"]
UNITS += ["millilitres", "milliliters", "tablets", "capsules", "drops", "puffs"]


@given(
    st.sampled_from(UNITS).flatmap(any_casing),
    st.integers(min_value=1, max_value=5000).map(str) | st.floats(0.05, 99, allow_nan=False).map(lambda f: f"{f:.2f}"),
    st.sampled_from(["", " ", "  "]),
    st.sampled_from(["", "metformin ", "reviewed metformin", "Dose was "]),
)
def test_a_dose_in_any_casing_with_or_without_a_space_is_refused(unit: str, amount: str, gap: str, before: str) -> None:
    assert "medication_dose" in check_summary(f"{before}{amount}{gap}{unit} daily").reasons


@given(
    st.sampled_from(["dr", "mr", "mrs", "ms", "prof"]).flatmap(any_casing),
    st.sampled_from([". ", ".", " "]),
    st.sampled_from(["smith", "o'neill", "kaur", "lee"]).flatmap(any_casing),
    st.sampled_from(["", "spoke with ", "Reviewed notes; "]),
)
def test_a_titled_name_in_any_casing_is_refused(title: str, separator: str, name: str, before: str) -> None:
    assume(not (title == "ms" and "." not in separator))  # lowercase "ms" without a dot is milliseconds
    assert "titled_name" in check_summary(f"{before}{title}{separator}{name} agreed").reasons


def digit_groups(min_digits: int, max_digits: int) -> st.SearchStrategy[str]:
    """A digit string cut into groups joined by a single space or dash, as ids are written."""

    def cut(digits: str, cuts: list[int], separator: str) -> str:
        points = sorted(set(cuts))
        return separator.join(digits[a:b] for a, b in zip([0, *points], [*points, len(digits)], strict=True))

    return st.text("0123456789", min_size=min_digits, max_size=max_digits).flatmap(
        lambda d: st.builds(
            cut, st.just(d), st.lists(st.integers(1, len(d) - 1), max_size=4), st.sampled_from([" ", "-"])
        )
    )


@given(digit_groups(9, 24), st.sampled_from(["", "matched ", "id "]), st.sampled_from(["", " reviewed"]))
def test_nine_or_more_digits_in_a_run_or_in_groups_are_refused(run: str, before: str, after: str) -> None:
    assert "long_id" in check_summary(before + run + after).reasons


@given(digit_groups(2, 8))
def test_fewer_than_nine_digits_are_not_an_id(run: str) -> None:
    assert "long_id" not in check_summary(f"Ran {run} checks").reasons


@given(
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 59),
    st.integers(0, 999_999),
    st.sampled_from(["Ran from {h}:{m:02d} to {h}:{s:02d}", "Took {h}:{m:02d}:{s:02d}.{f}", "Score {h}.{f}{f}"]),
)
def test_times_and_decimals_are_not_ids(h: int, m: int, s: int, f: int, template: str) -> None:
    assert "long_id" not in check_summary(template.format(h=h, m=m, s=s, f=f)).reasons


@given(
    st.integers(0, 99_999_999),
    st.integers(0, 100),
    st.integers(1, 20),
    st.sampled_from(
        [
            "Retrieved {n} passages in {n} ms",
            "Confidence 0.{p} after {k} retries",
            "Checked {n} claims",
            "Ran step {k} of {n}",
            "Model v{k}.{p}",
            "p95 latency {n} ms",
            "Coverage {p}% over {n} lookups",
            "Used {n} tokens in {k} s",
            "Waited {k} min, then {n} ms",
        ]
    ),
)
def test_step_summaries_with_counts_durations_and_versions_pass(n: int, p: int, k: int, template: str) -> None:
    assert check_summary(template.format(n=n, p=p, k=k)).reasons == ()


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
    # A phone number is ten digits in groups, so it is a long id too.
    assert counts == {"checked": 3, "unsafe": 2, "hit_long_id": 1, "hit_phone": 1, "hit_titled_name": 1}
