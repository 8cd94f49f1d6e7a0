"""The summary guard: a table of examples per pattern, a safe corpus measured for false alarms, and properties."""

from __future__ import annotations

import string

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from flowledger.reasoning.guard import BANNED, check_summary, guard_counts

UNSAFE = {
    "mrn": [
        "MRN: 12345678",
        "medical record number 88-1234",
        "mrn#A99812",
        # Any punctuation between the label and the id, and the other labels of a patient's identifier.
        "MRN#12345",
        "MRN-12345",
        "MRN=88-1234",
        "MRN/12345",
        "MRN.12345",
        "MRN_12345",
        "MRN12345",
        "patient id/48213",
        "Patient ID=ABC123",
        "patient #A99812",
        "chart no. 55812",
        "member id: W123456",
    ],
    "long_id": [
        "matched record 123456789",
        "id 0123456789 reviewed",
        "matched member 123456789012",
        "card 1234 5678 9012 3456",
        "account 123-456-789-012",
        "NHS 943 476 5919",
    ],
    "ssn": [
        "SSN 123-45-6789 on file",
        "checked 123 45 6789",
        "123.45.6789",
        "123/45/6789",
        "123_45_6789",
        "123 - 45 - 6789",
        "ssn 123\u201345\u20136789",  # en dashes
    ],
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
        # Joined by a hyphen of any kind, spaced or not (a held-out corpus found "500-mg" passing).
        "metformin 500-mg daily",
        "0.5-mL twice",
        "insulin 12 - units",
        "500\u2011mg",  # a non-breaking hyphen
        "500\u2013mg",  # an en dash
        "2-tablets at night",
        "five-mg",
        "ten - milligrams",
    ],
    "icd10": [
        "coded E11.9",
        "diagnosis I10 noted",
        "code M54.5",
        # Every chapter (U included) and length, with and without the dot.
        "S72.001A",
        "O09.529",
        "U07.1",
        "Z99.89",
        "C50.911",
        "A00",
        "S72001A",
        "coded E119",
        "O09529",
        "code U071",
        "C4A.9",
        "M1A00X0",
        # In lower or mixed case (a held-out corpus found "e11.9" passing).
        "coded e11.9",
        "diagnosis i10 noted",
        "s72.001a",
        "S72.001a",
        "coded e119",
        "c4a.9",
    ],
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
        # Post-nominal titles after a name, and honorifics other than Dr.
        "John Smith MD agreed",
        "Jane Doe, RN",
        "Smith PhD reviewed",
        "Lee, M.D.",
        "Ann Lee DO signed",
        "Ravi Patel, PharmD",
        "Mx. Lee",
        "Sister Mary called",
        "Father Brown",
        "Rev. Green",
        "Sr. Agnes",
        "Nurse Jackie",
        "Professor Kaur",
        "Mme Dubois",
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
    # What the product's own agents write: tools, tables, versions, times, month keys, error codes.
    "Called query_sql: ok, 1 result",
    "Called query_logs: ok, 37 results",
    "Called search_knowledge: empty, 0 results",
    "Routed the turn to table_question",
    "The model proposed 2 tool calls",
    "The evidence guard accepted every claim",
    "Released with outcome published",
    "Queried orders_2026 grouped by region",
    "Read table sales_q3_2025: 20 rows, 12 shown",
    "Wrote 1 row to audit_log_2026",
    "Ran migration 0042_add_orders_index",
    "Deployed v2.1.3 of the checkout service",
    "Node 18.19.0 runtime on arm64",
    "p95 latency 120 ms",
    "P95 latency 340 ms",  # a percentile before "latency", not the ICD-10 code P95
    "P99 latency 1.2 s on the checkout route",
    "Error rate rose from 0.2% to 4.1% at 02:14 UTC",
    "Scanned 1,204 log lines between 01:00 and 03:00 UTC",
    "Totals for month 2026-05 by region",
    "Compared November with October totals",
    "Found error E1234 in 37 log lines",
    "Matched error code E5021 in the payment logs",
    "Logged warning W1001 twice",
    "Exit code 137 after 3 retries",
    "HTTP 503 from the upstream in 14 of 200 requests",
    "Retrieved 3 passages from runbook RB-204",
    "Checked 4 hosts in us-east-1",
    "Cache hit ratio 93.5% over 10,000 lookups",
    "Escalated to the RN on duty",
    "Paged the on-call engineer",
    "Checked NPM packages for 2 advisories",
    "Validated the MRN field format",
    "Version 123.45 of the index",
    "Sister service payments-api returned 502",
    "Ran the E2E suite",  # no ICD-10 code has a letter third but C4A, C7A, C7B, D3A, M1A and Z3A
    "Checked B2B orders against the W3C schema",
    # Hyphens between numbers, and the lowercase shapes engineers write that a lowercase code rule meets.
    "Ran 2-3 retries on steps 3-4",
    "Built for x86_64 and arm64",
    "Transcoded the h264 stream",
    "Verified the sha256 digest of 12 files",
    "Checked the i18n strings in 3 locales",
    "Deployed v12.3 after 2 checks",
    "P99.9 latency 2.1 s on the checkout route",
]
# The price of being conservative, kept measured: each is refused today. Move one to SAFE when a
# rule learns to tell it apart.
KNOWN_FALSE_ALARMS = {
    "Compared 3 ML models": "medication_dose",  # "3 ML" reads as a dose in any case
    "Split the work into 4 units": "medication_dose",
    "Reviewed the MR report": "titled_name",  # "MR" is a title in capitals
    "Used 2 H100 GPUs": "icd10",  # so has H100 (H10.0)
    "The service returned E1234": "icd10",  # an error code is told apart only after an error word
    "Consulted MD guidance": "titled_name",  # a capitalised first word reads as a name before MD
    "Master Patient Index lookup": "titled_name",  # "Patient Index" reads as a titled name
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
    # And a code with a lowercase letter glued after a lowercase word reads as part of it, as "arm64" must.
    lowercase_code = unsafe[0].islower() and "icd10" in check_summary(unsafe).reasons
    if glue or not (safe[-1].isupper() or safe[-1].isdigit() or (lowercase_code and safe[-1].islower())):
        assert not check_summary(safe + glue + unsafe).safe
    # Likewise a unit or title glued to a word in capitals ("40 MGHTTP", "RNHTTP") reads as one word, as
    # "RNA" or "NPM" must; glued to a capitalised word ("RNReviewed") it still counts.
    if glue or not safe[:2].isupper():
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


DASHES = ["-", "\u2010", "\u2011", "\u2012", "\u2013", "\u2014", "\u2212", "\ufe63", "\uff0d"]


@given(
    st.sampled_from(UNITS).flatmap(any_casing),
    st.integers(min_value=1, max_value=5000).map(str) | st.floats(0.05, 99, allow_nan=False).map(lambda f: f"{f:.2f}"),
    st.sampled_from(DASHES),
    st.sampled_from(["", " "]),
    st.sampled_from(["", " "]),
    st.sampled_from(["", "metformin ", "Dose was "]),
)
def test_a_dose_joined_to_its_unit_by_any_hyphen_is_refused(
    unit: str, amount: str, dash: str, space_before: str, space_after: str, before: str
) -> None:
    text = f"{before}{amount}{space_before}{dash}{space_after}{unit} daily"
    assert "medication_dose" in check_summary(text).reasons


@given(
    st.sampled_from(["one", "two", "five", "ten", "twenty", "half"]),
    st.sampled_from(DASHES),
    st.sampled_from(["mg", "mcg", "ml", "µg", "iu", "mmol", "milligrams", "micrograms", "millilitres"]).flatmap(
        any_casing
    ),
)
def test_a_spelled_dose_joined_by_any_hyphen_is_refused(number: str, dash: str, unit: str) -> None:
    assert "medication_dose" in check_summary(f"Gave {number}{dash}{unit} at night").reasons


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


# ---- any separator, every chapter, every title: the shapes the seed bans, generated --------------------------

PUNCTUATION = string.punctuation + "\u2013\u2014\u00b7 "  # ASCII punctuation, en and em dashes, middle dot, space
ID_LABELS = ["MRN", "mrn", "medical record number", "Medical Record No.", "patient id", "Patient ID", "patient #"]
ID_LABELS += ["patient number", "chart no", "member id", "patient identifier"]


@given(
    st.sampled_from(ID_LABELS),
    st.text(PUNCTUATION, max_size=3),
    st.text(string.ascii_uppercase + string.digits, min_size=3, max_size=9),
    st.sampled_from(string.digits),
    st.sampled_from(["", "Checked ", "Matched the "]),
)
def test_a_labelled_id_with_any_separator_is_refused(label: str, gap: str, head: str, digit: str, before: str) -> None:
    assert "mrn" in check_summary(f"{before}{label}{gap}{digit}{head} on file").reasons


def ssn_gap() -> st.SearchStrategy[str]:
    """One punctuation character with optional spaces around it, or spaces alone."""
    spaces = st.sampled_from(["", " "])
    mark = st.sampled_from([c for c in PUNCTUATION if c != " "])
    return st.builds(lambda a, m, b: a + m + b, spaces, mark, spaces) | st.sampled_from([" ", "  "])


@given(
    st.text(string.digits, min_size=3, max_size=3),
    st.text(string.digits, min_size=2, max_size=2),
    st.text(string.digits, min_size=4, max_size=4),
    ssn_gap(),
    ssn_gap(),
)
def test_an_ssn_with_any_separator_is_refused(area: str, group: str, serial: str, first: str, second: str) -> None:
    assert "ssn" in check_summary(f"Verified {area}{first}{group}{second}{serial} today").reasons


ALNUM = string.ascii_uppercase + string.digits


@given(
    st.sampled_from(string.ascii_uppercase),
    st.sampled_from(string.digits),
    st.sampled_from(string.digits),
    st.text(ALNUM, max_size=4),
    st.booleans(),
    st.sampled_from(["Coded ", "diagnosis ", "", "Reviewed notes; "]),
)
def test_an_icd10_code_of_any_chapter_and_length_is_refused(
    letter: str, digit: str, third: str, tail: str, dotted: bool, before: str
) -> None:
    code = letter + digit + third + ("." + tail if dotted and tail else tail)
    assert "icd10" in check_summary(f"{before}{code} for the visit").reasons


@given(
    st.sampled_from(string.ascii_uppercase.replace("V", "")),
    st.sampled_from(string.digits),
    st.sampled_from(string.digits),
    st.text(string.digits, max_size=3),
    st.sampled_from(["", "a", "X"]),
    st.booleans(),
    st.sampled_from(["Coded ", "diagnosis ", "", "Reviewed notes; "]),
    st.data(),
)
def test_an_icd10_code_with_a_lowercase_letter_is_refused(
    letter: str, digit: str, third: str, tail: str, extension: str, dotted: bool, before: str, data: st.DataObject
) -> None:
    """Any chapter but V (a lowercase v-number is a version), any length, dotted or not, in any casing that has a
    lowercase letter; the engineering shapes x86, x64, h264 and h265 aside."""
    code = letter + digit + third + ("." if dotted and tail else "") + tail + (extension if len(tail) == 3 else "")
    cased = data.draw(any_casing(code).filter(lambda c: any(ch.islower() for ch in c)))
    assume(cased.lower() not in {"x86", "x64", "h264", "h265"})
    assert "icd10" in check_summary(f"{before}{cased} for the visit").reasons


@given(
    st.sampled_from(["error", "Error", "error code", "ERR", "exit code", "status", "warning", "alarm"]),
    st.sampled_from(["", ":", " #", "="]),
    st.sampled_from(string.ascii_uppercase),
    st.text(string.digits, min_size=3, max_size=5),
)
def test_an_error_code_after_an_error_word_is_not_a_diagnosis(word: str, mark: str, letter: str, digits: str) -> None:
    assert check_summary(f"Found {word}{mark} {letter}{digits} in 12 log lines").reasons == ()


HONORIFICS = ["Mr.", "Mrs", "Ms.", "Mx.", "Miss", "Prof.", "Professor", "Sister", "Brother", "Father", "Nurse"]
HONORIFICS += ["Doctor", "Rev.", "Reverend", "Rabbi", "Sr.", "Fr.", "Mme", "Sir", "Dame", "Lady"]
POST_NOMINALS = ["MD", "M.D.", "DO", "RN", "R.N.", "NP", "PhD", "Ph.D.", "PA-C", "DDS", "PharmD", "DNP", "MBBS"]
NAMES = ["Smith", "O'Neill", "Kaur", "Lee", "Jane Doe", "John Smith", "Ana María"]


@given(st.sampled_from(HONORIFICS), st.sampled_from(NAMES), st.sampled_from(["", "Spoke with ", "Reviewed notes; "]))
def test_a_name_after_any_honorific_is_refused(title: str, name: str, before: str) -> None:
    assert "titled_name" in check_summary(f"{before}{title} {name} agreed").reasons


@given(
    st.sampled_from(NAMES),
    st.sampled_from([" ", ", "]),
    st.sampled_from(POST_NOMINALS),
    st.sampled_from(["", "spoke with ", "Reviewed notes; "]),
    st.sampled_from(["", " agreed", ". Then closed"]),
)
def test_a_name_before_a_post_nominal_title_is_refused(
    name: str, comma: str, title: str, before: str, after: str
) -> None:
    assert "titled_name" in check_summary(f"{before}{name}{comma}{title}{after}").reasons


@given(
    st.sampled_from(["orders", "sales_q3", "audit_log", "payments", "claims"]),
    st.integers(2020, 2030),
    st.integers(0, 99),
    st.integers(0, 20),
    st.sampled_from(["query_sql", "query_logs", "search_knowledge", "table_plan"]),
    st.sampled_from(
        [
            "Queried {table}_{year} with {tool}: ok, {n} results",
            "Deployed v{k}.{n}.{k} after {n} checks",
            "Called {tool}: {n} rows from {table}_{year} in {k}{n} ms",
            "p95 latency {n}{k} ms; P99 latency {k}.{n} s",
            "Month {year}-0{k} to {year}-1{k}: {n} groups, {k} shown",
            "Found error E{n}{k}{k} in {n} log lines at {k}:{n:02d} UTC",
        ]
    ),
)
def test_tool_table_version_and_error_code_summaries_pass(
    table: str, year: int, n: int, k: int, tool: str, template: str
) -> None:
    text = template.format(table=table, year=year, n=n, k=min(k, 9), tool=tool)
    assert check_summary(text).reasons == (), text


def test_the_false_alarm_rate_over_every_safe_text_stays_under_10_percent() -> None:
    """The measured price of the guard: the safe corpus and the known false alarms, refused share."""
    texts = SAFE + list(KNOWN_FALSE_ALARMS)
    refused = [t for t in texts if not check_summary(t).safe]
    assert len(texts) >= 80 and refused == list(KNOWN_FALSE_ALARMS)
    assert len(refused) / len(texts) < 0.10  # 7 of 94 today
