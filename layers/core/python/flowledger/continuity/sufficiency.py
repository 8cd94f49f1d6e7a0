"""Whether a follow-up can be answered from history, or which engines must run again.

Seed, Scope 2 "History sufficiency": *include whether the new question requires no document access,
narrative retrieval, tabular recomputation, or both engines. Requiring tabular recomputation: new
filters, new grouping/dimensions, fresh totals or comparisons, a question referring implicitly to the
previously used table. May use history: rephrasing the prior conclusion, a shorter summary, what the
previous result means.* Issue #14: *deterministic rules first (a changed source version, prior partial
coverage, or a new filter, grouping or total forces a rerun), then a strict-schema model assessment
whose answer is one of none | narrative | tabular | both, with a standalone rewrite of the follow-up*.

The deterministic rules, in order (each one that fires adds its engines and its reason):

1. ``SOURCE_VERSION_CHANGED``: a prior source has a newer version: its engine reruns.
2. ``SOURCE_NOT_REUSABLE``: a prior source is now unauthorised or deleted: history built on it is not
   reused; the remaining sources' engines rerun (a search when none remain).
3. ``PRIOR_PARTIAL_COVERAGE``: a prior source's evidence was partial or failed: its engine reruns.
4. Only when a prior source is a table, a tabular rerun is forced by the follow-up's text, compared
   with the prior stored plan:
   ``NEW_GROUPING`` ("by region", "per month", "for each store", "broken down by ...") naming a
   dimension the prior plan did not group by; ``NEW_FILTER`` a number or date not among the prior plan's
   values and limit, a quoted value not among them, or a filter phrase ("only", "excluding", "where",
   "more than", "between", "since", a month or quarter, "last year"); ``NEW_TOTAL`` an aggregate word
   ("total", "average", "how many", "highest", ...) whose function the prior plan did not compute;
   ``NEW_COMPARISON`` ("compare", "versus", "difference", "percentage", "growth"); ``FRESH_REQUESTED``
   ("recalculate", "refresh", "latest", "up to date"). These are conservative on purpose: a false
   positive costs one engine run, a false negative a stale answer.
5. ``HISTORY_REPHRASE``: nothing above fired and the follow-up asks to rephrase, shorten, summarise or
   explain the previous answer: history answers, no engine runs and the model is not asked.
6. ``IMPLICIT_TABLE``: nothing above fired, a prior source is a table and the follow-up mentions the
   table, sheet, rows or columns: a tabular rerun.

Unless rule 5 decided, the model is asked (``HISTORY_ASSESSMENT_SCHEMA``) and its answer is parsed
strictly: anything but exactly ``{"decision": <one of four>, "standalone_query": <text>}`` is not
guessed at; the turn reruns both engines (``ASSESSMENT_INVALID``, ``ASSESSMENT_UNAVAILABLE`` when the
call failed). The decision is the union of the forced engines and the model's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from flowledger.continuity.reauthorize import SourceOutcome, SourceStatus
from flowledger.continuity.refs import GroundedRef, SourceKind
from flowledger.llm.ports import ChatModel, JsonSchema, Message, ModelError, ModelInvalidOutput
from flowledger.tabular.plan import TabularPlan

Decision = Literal["none", "narrative", "tabular", "both"]
DECISIONS: tuple[Decision, ...] = ("none", "narrative", "tabular", "both")
MAX_REWRITE_CHARS = 4000  # a chat query's own bound
ASSESSMENT_TIMEOUT_SECONDS = 20.0
ASSESSMENT_MAX_TOKENS = 384  # a decision, reasons and an optional rewrite of the follow-up


class SufficiencyReason(StrEnum):
    SOURCE_VERSION_CHANGED = "SOURCE_VERSION_CHANGED"
    SOURCE_NOT_REUSABLE = "SOURCE_NOT_REUSABLE"
    PRIOR_PARTIAL_COVERAGE = "PRIOR_PARTIAL_COVERAGE"
    NEW_GROUPING = "NEW_GROUPING"
    NEW_FILTER = "NEW_FILTER"
    NEW_TOTAL = "NEW_TOTAL"
    NEW_COMPARISON = "NEW_COMPARISON"
    FRESH_REQUESTED = "FRESH_REQUESTED"
    HISTORY_REPHRASE = "HISTORY_REPHRASE"
    IMPLICIT_TABLE = "IMPLICIT_TABLE"
    MODEL_ASSESSMENT = "MODEL_ASSESSMENT"
    ASSESSMENT_INVALID = "ASSESSMENT_INVALID"
    ASSESSMENT_UNAVAILABLE = "ASSESSMENT_UNAVAILABLE"


HISTORY_ASSESSMENT_SCHEMA = JsonSchema(
    "history_assessment",
    {
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "enum": list(DECISIONS),
                "description": "none: the conversation answers it; narrative: search the documents' text; "
                "tabular: compute on the previous table again; both: both",
            },
            "standalone_query": {
                "type": "string",
                "description": "the follow-up rewritten to be understood without the conversation",
            },
        },
        "required": ["decision", "standalone_query"],
        "additionalProperties": False,
    },
)

_SYSTEM = (
    "You decide whether a follow-up question in a conversation needs the documents again. Answer with "
    "the JSON object the schema asks for: decision is none when the previous answer already answers it "
    "(a rephrasing, a shorter version, what it means), narrative to search the documents' text, tabular "
    "to compute on the previous table again, both for both; standalone_query is the follow-up rewritten "
    "so that it can be understood without the conversation."
)


class HistoryAssessment(BaseModel):
    """The model's answer, exactly: strict strings, no other field, one of the four decisions."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    decision: Decision
    standalone_query: Annotated[str, StringConstraints(strict=True, min_length=1, max_length=MAX_REWRITE_CHARS)]


@dataclass(frozen=True)
class SufficiencyDecision:
    """What a follow-up needs: ``decision`` (none: answer from history), the primary reason, every rule
    that fired (``reasons``), the standalone ``rewrite`` for the search, and what the model call cost."""

    decision: Decision
    reason: SufficiencyReason
    reasons: tuple[SufficiencyReason, ...]
    rewrite: str
    model_calls: int = 0
    tokens: int = 0

    @property
    def engines(self) -> frozenset[SourceKind]:
        return _ENGINES[self.decision]


_ENGINES: dict[Decision, frozenset[SourceKind]] = {
    "none": frozenset(),
    "narrative": frozenset({"narrative"}),
    "tabular": frozenset({"tabular"}),
    "both": frozenset({"narrative", "tabular"}),
}


def _decision_of(engines: Iterable[SourceKind]) -> Decision:
    wanted = frozenset(engines)
    return next(decision for decision, kinds in _ENGINES.items() if kinds == wanted)


# ---- the deterministic rules ----------------------------------------------------------------------

_GROUPING = re.compile(
    r"\b(?:broken down by|break(?:ing)? (?:it |that |this )?down by|grouped by|group(?:ed)? by|split by|"
    r"by|per|for each|for every|each|across)\s+([a-z][a-z0-9_-]*)"
)
_NOT_A_DIMENSION = frozenset(
    {
        *("the", "a", "an", "way", "now", "then", "default", "far", "hand", "itself", "me", "you", "us", "them"),
        *("that", "this", "it", "which", "what", "how", "chance", "all", "means", "contrast", "comparison"),
        *("one", "more", "less", "name", "mistake", "accident", "of", "other", "time", "and", "so"),
    }
)
# "in 2 sentences", "under 50 words": a number about the answer's form, not a filter on the table.
_FORM_NUMBERS = re.compile(
    r"\b(?:in|to|with|under|within) \d+ (?:sentences?|words?|lines?|bullets?|bullet points?|paragraphs?|points?)\b"
)
_NUMBER = re.compile(r"\d+(?:[.,:/-]\d+)*")
_QUOTED = re.compile(r"\"([^\"]{1,200})\"|'([^']{1,200})'")
_FILTER_PHRASE = re.compile(
    r"\b(?:only|exclud\w*|except|without|where|filter\w*|limited to|restrict\w*|above|below|more than|less than|"
    r"greater than|fewer than|at least|at most|between|(?:after|before|since|until) (?:the|last)|"
    r"last (?:year|quarter|month|week)|this (?:year|quarter|month|week)|yesterday|today|q[1-4]|january|february|"
    r"march|april|(?:in|for|during|since|until|of) may|june|july|august|september|october|november|december)\b"
)
_AGGREGATE_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(?:total|totals|sum|sums|overall)\b"), "sum"),
    (re.compile(r"\b(?:average|averages|avg)\b"), "avg"),
    (re.compile(r"\bmedian\b"), "median"),
    (re.compile(r"\b(?:how many|count|counts|number of)\b"), "count"),
    (re.compile(r"\b(?:distinct|unique)\b"), "count_distinct"),
    (re.compile(r"\b(?:max|maximum|highest|largest|biggest|top)\b"), "max"),
    (re.compile(r"\b(?:min|minimum|lowest|smallest|bottom)\b"), "min"),
)
_COMPARISON = re.compile(
    r"\b(?:compare|compared|comparison|versus|vs|difference|differences|percent|percentage|share of|ratio|growth|"
    r"increase|decrease|trend)\b"
)
_FRESH = re.compile(
    r"\b(?:recalculate|recompute|re-?run|refresh|recount|redo|latest|up[ -]to[ -]date|current figures|current data)\b"
)
_REPHRASE = (
    re.compile(
        r"\b(?:rephrase|reword|paraphrase|restate|in other words|simplify|simpler|shorten|shorter|briefer|"
        r"more concise|more briefly|tl;?dr|translate|put (?:that|this|it) differently|in plain (?:english|words))\b"
    ),
    re.compile(r"\bexplain\b.*\b(?:that|this|it|your|previous|last|above|answer|result|response)\b"),
    re.compile(r"\bwhat (?:does|did|do) (?:that|this|it|you|your (?:answer|result)) mean\b"),
    re.compile(r"\bsummar(?:y|ise|ize)\b.*\b(?:that|this|it|your|previous|above|answer|response)\b"),
)
_IMPLICIT_TABLE = re.compile(r"\b(?:table|tables|sheet|spreadsheet|rows?|columns?|csv|xlsx|dataset|figures)\b")


def _normalized(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
    return " ".join(text.lower().split())


def _words(name: str) -> set[str]:
    """A column name's words, singular and plural alike: ``sales_region`` -> {sales, region}."""
    return {word.removesuffix("s") for word in re.split(r"[\s_-]+", name.lower()) if word}


def new_grouping(text: str, plan: TabularPlan | None) -> bool:
    """Whether ``text`` groups by a dimension the prior plan did not group by (one of its words counts)."""
    grouped = set().union(*(_words(column) for column in plan.group_by)) if plan else set()
    for match in _GROUPING.finditer(text):
        word = match.group(1)
        if word in _NOT_A_DIMENSION or word[0].isdigit():
            continue
        if word.removesuffix("s") not in grouped:
            return True
    return False


def _plan_literals(plan: TabularPlan | None) -> tuple[set[str], set[str]]:
    """The numbers and the texts the prior plan holds (filter values and limit), lowercased."""
    if plan is None:
        return set(), set()
    values: list[Any] = [plan.limit]
    for item in plan.filters:
        values.extend(item.value if isinstance(item.value, list) else [item.value])
    texts = {value.lower() for value in values if isinstance(value, str)}
    numbers = {number for value in values if value is not None for number in _NUMBER.findall(_literal(value))}
    return numbers, texts


def _literal(value: Any) -> str:
    # 2024.0 is written 2024 in a question: an integral float matches its integer.
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def new_filter(text: str, plan: TabularPlan | None) -> bool:
    """Whether ``text`` brings a number, date or quoted value the prior plan did not hold, or a filter phrase."""
    numbers, texts = _plan_literals(plan)
    text = _FORM_NUMBERS.sub(" ", text)
    if any(number.replace(",", "") not in numbers and number not in numbers for number in _NUMBER.findall(text)):
        return True
    if any((a or b) not in texts for a, b in _QUOTED.findall(text)):
        return True
    return _FILTER_PHRASE.search(text) is not None


def new_total(text: str, plan: TabularPlan | None) -> bool:
    """Whether ``text`` asks for an aggregate the prior plan did not compute."""
    computed = {aggregate.function for aggregate in plan.aggregates} if plan else set()
    return any(pattern.search(text) and function not in computed for pattern, function in _AGGREGATE_WORDS)


def asks_to_rephrase(text: str) -> bool:
    """Whether ``text`` asks to rephrase, shorten, summarise or explain the previous answer."""
    return any(pattern.search(text) for pattern in _REPHRASE)


@dataclass(frozen=True)
class _Forced:
    engines: frozenset[SourceKind]
    reasons: tuple[SufficiencyReason, ...]
    history_ok: bool  # rule 5 decided: history answers


def deterministic_rules(
    follow_up: str, prior_refs: Sequence[GroundedRef], prior_plan: TabularPlan | None, outcomes: Sequence[SourceOutcome]
) -> _Forced:
    """Rules 1-6 of the module docstring: the engines they force and why, or that history answers."""
    engines: set[SourceKind] = set()
    reasons: list[SufficiencyReason] = []

    def force(reason: SufficiencyReason, kinds: Iterable[SourceKind]) -> None:
        engines.update(kinds)
        reasons.append(reason)

    by_status = {status: [o.ref for o in outcomes if o.status is status] for status in SourceStatus}
    dropped = {ref.document_id for ref in by_status[SourceStatus.UNAUTHORISED] + by_status[SourceStatus.MISSING]}
    kept = [ref for ref in prior_refs if ref.document_id not in dropped]
    if by_status[SourceStatus.CHANGED]:
        force(SufficiencyReason.SOURCE_VERSION_CHANGED, {ref.source_kind for ref in by_status[SourceStatus.CHANGED]})
    if dropped:
        force(SufficiencyReason.SOURCE_NOT_REUSABLE, {ref.source_kind for ref in kept} or {"narrative"})
    incomplete = [ref for ref in kept if ref.evidence_status in ("partial", "failed")]
    if incomplete:
        force(SufficiencyReason.PRIOR_PARTIAL_COVERAGE, {ref.source_kind for ref in incomplete})
    text = _normalized(follow_up)
    tabular = any(ref.source_kind == "tabular" for ref in kept)
    if tabular:
        checks = (
            (SufficiencyReason.NEW_GROUPING, new_grouping(text, prior_plan)),
            (SufficiencyReason.NEW_FILTER, new_filter(text, prior_plan)),
            (SufficiencyReason.NEW_TOTAL, new_total(text, prior_plan)),
            (SufficiencyReason.NEW_COMPARISON, _COMPARISON.search(text) is not None),
            (SufficiencyReason.FRESH_REQUESTED, _FRESH.search(text) is not None),
        )
        for reason, fired in checks:
            if fired:
                force(reason, {"tabular"})
    if not reasons and asks_to_rephrase(text):
        return _Forced(frozenset(), (SufficiencyReason.HISTORY_REPHRASE,), history_ok=True)
    if not reasons and tabular and _IMPLICIT_TABLE.search(text):
        force(SufficiencyReason.IMPLICIT_TABLE, {"tabular"})
    return _Forced(frozenset(engines), tuple(reasons), history_ok=False)


# ---- the model assessment -------------------------------------------------------------------------


def parse_assessment(data: Any) -> HistoryAssessment | None:
    """The model's object if it is exactly a :class:`HistoryAssessment`, else None (never repaired)."""
    if not isinstance(data, dict):
        return None
    try:
        assessment = HistoryAssessment.model_validate(data)
    except ValidationError:
        return None
    return assessment if assessment.standalone_query.strip() else None


def _prompt(follow_up: str, prior_refs: Sequence[GroundedRef], prior_plan: TabularPlan | None) -> list[Message]:
    context = {
        "follow_up": follow_up,
        "previous_sources": [
            {"file_name": ref.file_name, "kind": ref.source_kind, "evidence": ref.evidence_status} for ref in prior_refs
        ],
        "previous_table_plan": None
        if prior_plan is None
        else {
            "group_by": prior_plan.group_by,
            "aggregates": [f"{a.function}({a.column or '*'})" for a in prior_plan.aggregates],
            "filters": [f"{f.column} {f.op}" for f in prior_plan.filters],
        },
    }
    return [Message("system", _SYSTEM), Message("user", json.dumps(context, ensure_ascii=False))]


def assess(
    follow_up: str,
    prior_refs: Sequence[GroundedRef],
    prior_plan: TabularPlan | None,
    model: ChatModel,
    *,
    outcomes: Sequence[SourceOutcome] = (),
    timeout_seconds: float = ASSESSMENT_TIMEOUT_SECONDS,
) -> SufficiencyDecision:
    """What the follow-up needs: the deterministic rules, then (unless they said history) one model call.

    ``outcomes`` are the prior sources' reauthorisation outcomes (``reauthorize``), which rules 1 and 2
    read. ``model`` is the port: any :class:`ChatModel`. One call, no retry here (a caller's retry policy
    may wrap the model); a failed or invalid answer reruns both engines, never a guess.
    """
    forced = deterministic_rules(follow_up, prior_refs, prior_plan, outcomes)
    if forced.history_ok:
        return SufficiencyDecision("none", SufficiencyReason.HISTORY_REPHRASE, forced.reasons, follow_up)
    try:
        reply = model.complete(
            _prompt(follow_up, prior_refs, prior_plan),
            schema=HISTORY_ASSESSMENT_SCHEMA,
            timeout_seconds=timeout_seconds,
            max_tokens=ASSESSMENT_MAX_TOKENS,
        )
    except ModelInvalidOutput:  # the adapter found no JSON object: invalid, and never dug out of the text
        return _rerun_both(follow_up, forced, SufficiencyReason.ASSESSMENT_INVALID, tokens=0)
    except ModelError:
        return _rerun_both(follow_up, forced, SufficiencyReason.ASSESSMENT_UNAVAILABLE, tokens=0)
    assessment = parse_assessment(reply.data)
    if assessment is None:
        return _rerun_both(follow_up, forced, SufficiencyReason.ASSESSMENT_INVALID, tokens=reply.usage.total)
    engines = forced.engines | _ENGINES[assessment.decision]
    reasons = (*forced.reasons, SufficiencyReason.MODEL_ASSESSMENT)
    return SufficiencyDecision(
        _decision_of(engines), reasons[0], reasons, assessment.standalone_query, 1, reply.usage.total
    )


def _rerun_both(follow_up: str, forced: _Forced, reason: SufficiencyReason, tokens: int) -> SufficiencyDecision:
    reasons = (*forced.reasons, reason)
    return SufficiencyDecision("both", reasons[0], reasons, follow_up, 1, tokens)
