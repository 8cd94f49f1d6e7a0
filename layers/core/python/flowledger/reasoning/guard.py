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

_DOSE_UNITS = r"(?:mg|mcg|µg|ug|g|ml|mL|l|units?|iu|IU|mmol|meq|mEq|tabs?|tablets?|caps?|capsules?|puffs?|drops?)"
# Digit patterns use digit lookarounds rather than word boundaries, and keyword patterns have no
# leading boundary, so a fragment glued to other text ("notesMRN: 123", "6789Reviewed") still counts.
BANNED: dict[str, re.Pattern[str]] = {
    "mrn": re.compile(r"(?:MRN|medical\s+record(?:\s+(?:number|no\.?|#))?)\s*[:#]?\s*[A-Z0-9-]{4,}", re.I),
    "long_id": re.compile(r"(?<!\d)(?<!\d\.)\d{9,10}(?!\d|\.\d)"),
    "ssn": re.compile(r"(?<!\d)\d{3}[-\s]\d{2}[-\s]\d{4}(?!\d)"),
    "dob": re.compile(r"(?:DOB|D\.O\.B\.?|date\s+of\s+birth|born(?:\s+on)?)(?![a-z])\s*[:\-]?", re.I),
    "iso_date": re.compile(r"(?<!\d)(?:19|20)\d{2}[-/.](?:0?[1-9]|1[0-2])[-/.](?:0?[1-9]|[12]\d|3[01])(?!\d)"),
    "phone": re.compile(r"(?:\+?1[\s.-]?)?(?:\(\d{3}\)|(?<!\d)\d{3})[\s.-]?\d{3}[\s.-]?\d{4}(?!\d)"),
    "email": re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"),
    "medication_dose": re.compile(rf"[A-Za-z][A-Za-z-]{{2,}}\s+\d+(?:[.,]\d+)?\s*{_DOSE_UNITS}(?![a-z])"),
    "icd10": re.compile(r"(?<![A-Za-z0-9])[A-TV-Z]\d[0-9A-Z](?:\.[0-9A-Z]{1,4})?(?![a-z0-9])"),
    "titled_name": re.compile(
        r"(?:Dr|Mr|Mrs|Ms|Miss|Mx|Prof|Nurse|Patient)\.?\s+[A-Z][a-z'\u2019-]+(?:\s+[A-Z][a-z'\u2019-]+)?"
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
