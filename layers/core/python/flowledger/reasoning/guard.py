"""The summary guard: does a ≤280-character summary look like it names a patient?

Conservative by design: it prefers a false alarm (a flow stays admin-only) to a miss (PHI on a
patient screen). A summary should describe the step, not the content: "Reviewed recent
medications" passes; "reviewed metformin 500mg" does not.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

MAX_SUMMARY_CHARS = 280

_DOSE_UNITS = (
    r"(?:(?:mg|mcg|ml)s?|µg|μg|ug|ng|gm?|l|iu|units?|mmol|meq|tabs?|tablets?|caps?|capsules?|puffs?|drops?"
    r"|(?:milli|micro|nano)?gram(?:me)?s?|(?:milli)?lit(?:re|er)s?|international\s+units?)"
)
_SPELLED_DOSE_UNITS = r"(?:(?:milli|micro|nano)?gram(?:me)?s?|(?:milli)?lit(?:re|er)s?|international\s+units?)"
# A dose's number may be glued to a lowercase drug name ("metformin500mg") but not to a digit or a capital,
# so ids such as "fl_01ARZ3NDEKTSV4RRFFQ69G5FAV" hold no dose.
_DOSE_START = r"(?-i:(?<![A-Z0-9]))"
# A unit ends where a word would not go on, glued text aside: "500mgReviewed" and "40 MGReviewed" are
# doses, "2 GB" and "3 mgmt" are not.
_UNIT_END = r"(?-i:(?![a-z])(?!(?<=[A-Z])[A-Z](?![a-z])))"
_NUMBER_WORDS = (
    r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty"
    r"|hundred|thousand|half|quarter)"
)
# Abbreviated titles match in any case. They must start a word, be capitalised after a lowercase letter
# ("notesDr. Smith"), or (but for "ms", as in "items.") be followed by a dot ("notesdr. smith"), so
# "items checked" is no title. Lowercase "ms" is milliseconds unless a dot follows it, and no "ms" or
# "mS" right after a number is a title ("340 ms later"); "MS" and "Ms" are, even glued to a number
# ("level 8MS Kaur"), since a unit is not written that way before a name.
_ANY_CASE_TITLE = (
    r"(?:(?:(?<![A-Za-z])|(?<=[a-z])(?=[A-Z]))(?:(?i:mrs|mr|dr|prof)|MS|Ms|(?<!\d)(?<!\d\s)(?:mS|ms(?=\.)))"
    r"|(?i:mrs|mr|dr|prof)(?=\.))"
)
# Digit patterns use digit lookarounds rather than word boundaries, and keyword patterns have no
# leading boundary, so a fragment glued to other text ("notesMRN: 123", "6789Reviewed") still counts.
BANNED: dict[str, re.Pattern[str]] = {
    "mrn": re.compile(r"(?:MRN|medical\s+record(?:\s+(?:number|no\.?|#))?)\s*[:#]?\s*[A-Z0-9-]{4,}", re.I),
    # Nine or more digits in a row, or in groups joined by one space or dash ("1234 5678 9012"); a
    # colon, slash or decimal point ends a run, so times, slashed dates and decimals stay short.
    "long_id": re.compile(r"(?<!\d)(?<!\d\.)(?=(?:\d[ -]?){8}\d)"),
    "ssn": re.compile(r"(?<!\d)\d{3}[-\s]\d{2}[-\s]\d{4}(?!\d)"),
    "dob": re.compile(r"(?:DOB|D\.O\.B\.?|date\s+of\s+birth|born(?:\s+on)?)(?![a-z])\s*[:\-]?", re.I),
    "iso_date": re.compile(r"(?<!\d)(?:19|20)\d{2}[-/.](?:0?[1-9]|1[0-2])[-/.](?:0?[1-9]|[12]\d|3[01])(?!\d)"),
    "phone": re.compile(r"(?:\+?1[\s.-]?)?(?:\(\d{3}\)|(?<!\d)\d{3})[\s.-]?\d{3}[\s.-]?\d{4}(?!\d)"),
    "email": re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"),
    "medication_dose": re.compile(
        rf"(?:{_DOSE_START}\d+(?:[.,]\d+)?\s*{_DOSE_UNITS}|{_NUMBER_WORDS}[\s-]+{_SPELLED_DOSE_UNITS}){_UNIT_END}", re.I
    ),
    "icd10": re.compile(r"(?<![A-Za-z0-9])[A-TV-Z]\d[0-9A-Z](?:\.[0-9A-Z]{1,4})?(?![a-z0-9])"),
    "titled_name": re.compile(
        rf"(?:{_ANY_CASE_TITLE}(?:\.\s*|\s+)(?i:[a-z][a-z'\u2019-]+)"
        r"|(?:Miss|Mx|Nurse|Patient|Doctor)\.?\s+[A-Z][a-z'\u2019-]+)"
    ),
}


@dataclass(frozen=True)
class Verdict:
    safe: bool
    reasons: tuple[str, ...]


def check_summary(text: str) -> Verdict:
    """Which banned patterns ``text`` matches (none means safe); over-long text is unsafe."""
    reasons = [name for name, pattern in BANNED.items() if pattern.search(text)]
    if len(text) > MAX_SUMMARY_CHARS:
        reasons.append("too_long")
    return Verdict(safe=not reasons, reasons=tuple(reasons))


def guard_counts(summaries: Iterable[str]) -> tuple[bool, dict[str, int]]:
    """Whether every summary passes, and counts: checked, unsafe, and hits per pattern."""
    counts: Counter[str] = Counter()
    for text in summaries:
        verdict = check_summary(text)
        counts["checked"] += 1
        if not verdict.safe:
            counts["unsafe"] += 1
        for reason in verdict.reasons:
            counts[f"hit_{reason}"] += 1
    return counts["unsafe"] == 0, {
        "checked": counts["checked"],
        "unsafe": counts["unsafe"],
        **{k: v for k, v in sorted(counts.items()) if k.startswith("hit_")},
    }
