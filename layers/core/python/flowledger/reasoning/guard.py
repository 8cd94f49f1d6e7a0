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
from typing import Protocol

MAX_SUMMARY_CHARS = 280

_DOSE_UNITS = (
    r"(?:(?:mg|mcg|ml)s?|µg|μg|ug|ng|gm?|l|iu|units?|mmol|meq|tabs?|tablets?|caps?|capsules?|puffs?|drops?"
    r"|(?:milli|micro|nano)?gram(?:me)?s?|(?:milli)?lit(?:re|er)s?|international\s+units?)"
)
_SPELLED_DOSE_UNITS = r"(?:(?:milli|micro|nano)?gram(?:me)?s?|(?:milli)?lit(?:re|er)s?|international\s+units?)"
# What joins a dose's number to its unit: nothing, spaces, or a hyphen of any kind with spaces or not
# ("500mg", "500 mg", "500-mg", "500 - mg", and the same with a non-breaking hyphen, an en or em dash, a minus).
_DASHES = "\\-\u2010\u2011\u2012\u2013\u2014\u2212\ufe63\uff0d"
_DOSE_JOIN = rf"(?:\s*[{_DASHES}]\s*|\s*)"
# Abbreviated units a spelled number takes only through a hyphen ("five-mg"): "one tab" is an interface.
_HYPHENED_ABBREVIATED_UNITS = r"(?:(?:mg|mcg|ml)s?|µg|μg|iu|mmol|meq)"
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
# Labels that name a patient's identifier, whatever joins them to it: "MRN: 123", "MRN#123", "MRN-123",
# "MRN=123", "patient id/48213", "Patient #A1234". The value holds a digit, so "the MRN field" is no id.
_ID_LABEL = (
    r"(?:MRN|medical\s+record(?:\s+(?:number|no\.?|#))?"
    r"|(?:patient|chart|member|subscriber|health\s+plan)\s*(?:id(?:entifier)?|number|no\.?|#))"
)
_ID_VALUE = r"(?=[A-Z0-9-]*\d)[A-Z0-9][A-Z0-9-]{3,}"
# One to three characters of any punctuation (or spaces) between an SSN's groups: 123-45-6789, 123.45.6789,
# 123 45 6789, 123/45/6789, 123_45_6789, 123 - 45 - 6789. A group that is part of a decimal is no group.
_SSN_GAP = r"(?:\s*[^\sA-Za-z0-9]\s*|\s+)"
# Post-nominal titles after a name: "John Smith MD", "Jane Doe, RN", "Smith PhD", "Lee, M.D.".
_POST_NOMINALS = (
    r"(?:M\.?D|D\.?O|R\.?N|N\.?P|Ph\.?D|PA-C|DDS|DMD|PharmD|DNP|FNP|MBBS|MBChB|FRCP|FACP|LPN|APRN|CRNA|CNM"
    r"|LCSW|MSN|BSN|DPT|MPH)\.?"
)
_NAME_WORD = r"[A-Z\u00c0-\u00d6\u00d8-\u00de][a-z\u00df-\u00f6\u00f8-\u00ff'\u2019-]+"  # Latin letters, accents too
# A name word starts a word, or a capital glued to a lowercase letter ("notesJohn Smith MD").
_NAME_START = r"(?:(?<![A-Za-z\u00c0-\u00ff])|(?<=[a-z])(?=[A-Z]))"
# A title ends where a word would not go on; a capital starting a glued word ("MDReviewed") ends it too,
# but "RNA" or "NPM" is a word of its own.
_TITLE_END = r"(?![a-z])(?!(?<=[A-Z])[A-Z](?![a-z]))"
# Spelled-out honorifics before a capitalised name ("Sister Mary", "Father Brown"), and abbreviated ones
# that need their dot ("Rev. Green", "Sr. Agnes"). "Master" (Master Patient Index) and "Judge" (a judge
# model) are left out: in step summaries they are mostly not titles.
_HONORIFICS = (
    r"(?:(?:Miss|Mx|Nurse|Patient|Doctor|Sister|Brother|Father|Mother|Reverend|Rabbi|Pastor|Imam|Sir|Dame|Lady"
    r"|Lord|Madam|Madame|Mme|Mlle|Mister|Professor|Matron|Midwife|Captain|Sergeant|Colonel|Lieutenant|Herr|Frau"
    r"|Se[nñ]ora?)\.?\s+"
    r"|(?:Sra?|Fr|Rev|Capt|Sgt|Col|Lt|Hon|Br)\.\s*)"
)


class _Icd10:
    """ICD-10 codes of every chapter (A00-Z99), 3 to 7 characters, with or without the dot.

    A code is a letter, two digits (or C4A, C7A, C7B, D3A, M1A, Z3A), then up to four more (after a dot or not):
    ``I10``, ``E11.9``, ``E119``, ``U07.1``, ``S72.001A``, ``S72001A``, in any case (``e11.9``, ``i10``,
    ``s72.001a``). Two contexts tell an undotted shape apart, at the price of missing a code written right
    after them: an error word before it ("error E1234", "exit code A100", "status E42") makes it an error
    code, and "P50/P90/P95/P99/P999" before "latency", "ms" or "response time" a percentile (so is "P99.9"
    there). Any other dotted code is a code whatever comes before it. Lowercase undotted codes take digits
    and a last letter only after three digits (``s72001a``), so ``i18n`` is no code.

    A code in capitals may be glued to a lowercase word ("notesS72.001A"); one with a lowercase letter must
    start a word of its own, since ``arm64``, ``sha256`` and ``utf8`` end in the same shape (a capitalised
    word glued after it still counts: "e119Reviewed"). Three
    lowercase shapes are read as what engineers write, not codes: a version (``v2.1``, ``v12.3``, though
    that misses the lowercase transport-accident codes V00-V99), an architecture (``x86``, ``x64``) and a
    video codec (``h264``, ``h265``).
    """

    # A code starts a word, or is glued to a lowercase one ("notesS72.001A"); it may not go on in lowercase.
    # Its third character is a digit but in ICD-10-CM's six categories C4A, C7A, C7B, D3A, M1A and Z3A,
    # so "E2E" or "B2B" is no code.
    _CODE = re.compile(
        r"(?:(?<![A-Za-z0-9])|(?<=[a-z]))[A-Z]\d(?:\d|(?<=C[47]|D3|M1|Z3)A|(?<=C7)B)"
        r"(?P<dotted>\.[0-9A-Z]{1,4})?(?(dotted)|[0-9A-Z]{0,4})(?![a-z0-9])"
    )
    # With a lowercase letter: any case, standing alone (the lookahead keeps capital-only codes to _CODE).
    _LOWER_CODE = re.compile(
        r"(?<![A-Za-z0-9])(?=[A-Za-z0-9.]{0,7}[a-z])[A-Za-z]\d(?:\d|(?<=[Cc][47]|[Dd]3|[Mm]1|[Zz]3)[Aa]|(?<=[Cc]7)[Bb])"
        r"(?P<dotted>\.[0-9A-Za-z]{1,4})?(?(dotted)|\d{0,3}(?:(?<=\d{3})[A-Za-z])?)(?![a-z0-9])(?![A-Z](?![a-z]))"
    )
    _ENGINEERING = re.compile(r"v\d.*|x86|x64|h26[45]")
    _ERROR_BEFORE = re.compile(
        r"(?:error|err|errno|fault|warning|warn|alarm|alert|exit|status|event)(?:\s+code)?[\s:#=-]*$", re.I
    )
    _PERCENTILE = re.compile(r"P(?:50|75|90|95|99|999|99\.9|99\.99)", re.I)
    _PERCENTILE_AFTER = re.compile(r"\s*(?:latency|response|duration|ms\b|s\b|percentile)", re.I)

    def search(self, text: str) -> re.Match[str] | None:
        """The first code in ``text`` that no context explains away."""
        capitals = list(self._CODE.finditer(text))
        lower = [m for m in self._LOWER_CODE.finditer(text) if not self._ENGINEERING.fullmatch(m.group())]
        for match in sorted(capitals + lower, key=lambda m: m.start()):
            if self._PERCENTILE.fullmatch(match.group()) and self._PERCENTILE_AFTER.match(text, match.end()):
                continue
            if match.group("dotted"):
                return match
            if self._ERROR_BEFORE.search(text, 0, match.start()):
                continue
            return match
        return None


class _Pattern(Protocol):
    def search(self, text: str) -> re.Match[str] | None: ...


# Digit patterns use digit lookarounds rather than word boundaries, and keyword patterns have no
# leading boundary, so a fragment glued to other text ("notesMRN: 123", "6789Reviewed") still counts.
BANNED: dict[str, _Pattern] = {
    "mrn": re.compile(rf"{_ID_LABEL}[\W_]{{0,3}}{_ID_VALUE}", re.I),
    # Nine or more digits in a row, or in groups joined by one space or dash ("1234 5678 9012"); a
    # colon, slash or decimal point ends a run, so times, slashed dates and decimals stay short.
    "long_id": re.compile(r"(?<!\d)(?<!\d\.)(?=(?:\d[ -]?){8}\d)"),
    "ssn": re.compile(rf"(?<!\d)(?<!\d[.,])\d{{3}}{_SSN_GAP}\d{{2}}{_SSN_GAP}\d{{4}}(?!\d)(?![.,]\d)"),
    "dob": re.compile(r"(?:DOB|D\.O\.B\.?|date\s+of\s+birth|born(?:\s+on)?)(?![a-z])\s*[:\-]?", re.I),
    "iso_date": re.compile(r"(?<!\d)(?:19|20)\d{2}[-/.](?:0?[1-9]|1[0-2])[-/.](?:0?[1-9]|[12]\d|3[01])(?!\d)"),
    "phone": re.compile(r"(?:\+?1[\s.-]?)?(?:\(\d{3}\)|(?<!\d)\d{3})[\s.-]?\d{3}[\s.-]?\d{4}(?!\d)"),
    "email": re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"),
    "medication_dose": re.compile(
        rf"(?:{_DOSE_START}\d+(?:[.,]\d+)?{_DOSE_JOIN}{_DOSE_UNITS}"
        rf"|{_NUMBER_WORDS}(?:\s*[{_DASHES}]\s*|\s+){_SPELLED_DOSE_UNITS}"
        rf"|{_NUMBER_WORDS}\s*[{_DASHES}]\s*{_HYPHENED_ABBREVIATED_UNITS}){_UNIT_END}",
        re.I,
    ),
    "icd10": _Icd10(),
    "titled_name": re.compile(
        rf"(?:{_ANY_CASE_TITLE}(?:\.\s*|\s+)(?i:[a-z][a-z'\u2019-]+)"
        rf"|{_HONORIFICS}{_NAME_WORD}"
        rf"|{_NAME_START}{_NAME_WORD}(?:\s+{_NAME_WORD})*,?\s+{_POST_NOMINALS}{_TITLE_END})"
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
