"""Which sources a turn is grounded on: the seed's fixed precedence, as one pure function.

Seed, "Selection Precedence": *1. current explicit selection (selected); 2. Analyze All Documents (all,
Analyze only); 3. history grounding (history); 4. relevance candidates (relevance, Chat/Search). Current
explicit selection must never be silently merged with stale prior sources unless the user asks to
include both.* Seed, "All Documents semantics": *Chat/Search: relevance-bounded; Analyze: exhaustive
authorized catalog within limits; Compare: explicit Source and Targets only*.

The rows, first match wins (``PRECEDENCE`` lists them with their reason codes):

===  ===============================================  ==========================  =====================
row  request                                          reason                      sources
===  ===============================================  ==========================  =====================
1a   compare (source and targets)                     COMPARE_EXPLICIT            source, then targets
1b   selected, include_prior false                    EXPLICIT_SELECTION          the selection only
1c   selected, include_prior true                     EXPLICIT_SELECTION_WITH_PRIOR  selection, then prior
2a   all + analyze                                    ANALYZE_ALL_EXHAUSTIVE      every readable document
2b   all + chat or search                             ALL_RELEVANCE_BOUNDED       a search of every scope
3a   history, prior refs                              HISTORY_GROUNDING           prior refs, no search
3b   relevance, prior refs                            HISTORY_THEN_RELEVANCE      prior refs, then search
4    history or relevance, no prior refs              NO_GROUNDED_REFS            a search of every scope
===  ===============================================  ==========================  =====================

``history`` and ``relevance`` differ in one thing: ``history`` answers from the prior sources only, while
``relevance`` (the default) lets a search of the readable scopes add to them (the seed's "authorized
fallback search"). Tables are not in the search index, so a search only ever finds narrative sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from flowledger.continuity.refs import GroundedRef, SourceKind
from flowledger.continuity.request import MAX_SOURCES_PER_TURN, SourceRequest
from flowledger.errors import InvalidInput

MAX_ANALYZE_ALL_DOCUMENTS = MAX_SOURCES_PER_TURN
"""Analyze All reads every readable document, at most this many; more is a 422, never a silent cut."""

Basis = Literal["selected", "all", "history", "relevance"]
ENGINES: frozenset[SourceKind] = frozenset({"narrative", "tabular"})
SEARCHABLE: frozenset[SourceKind] = frozenset({"narrative"})  # only narrative kinds are indexed


class SourceReason(StrEnum):
    """Why a plan took the sources it took: one fixed code per precedence row."""

    COMPARE_EXPLICIT = "COMPARE_EXPLICIT"
    EXPLICIT_SELECTION = "EXPLICIT_SELECTION"
    EXPLICIT_SELECTION_WITH_PRIOR = "EXPLICIT_SELECTION_WITH_PRIOR"
    ANALYZE_ALL_EXHAUSTIVE = "ANALYZE_ALL_EXHAUSTIVE"
    ALL_RELEVANCE_BOUNDED = "ALL_RELEVANCE_BOUNDED"
    HISTORY_GROUNDING = "HISTORY_GROUNDING"
    HISTORY_THEN_RELEVANCE = "HISTORY_THEN_RELEVANCE"
    NO_GROUNDED_REFS = "NO_GROUNDED_REFS"


class AnalyzeLimitExceeded(InvalidInput):
    """Analyze All would read more documents than it may; nothing is read (422)."""

    code = "analyze_limit_exceeded"


class TooManySources(InvalidInput):
    """An explicit selection with the prior sources merged in passes the per-turn bound (422)."""

    code = "too_many_sources"


@dataclass(frozen=True)
class SourcePlan:
    """The sources of one turn, why, and which engines may run on them.

    ``document_ids``: the explicit documents to resolve (a selection, a compare's source then targets);
    ``prior_refs``: previous sources to reauthorise before reuse; ``search``: whether a relevance search
    of the readable scopes runs (bounded by the index's limits); ``exhaustive``: every readable document
    is read (Analyze All), ``catalog_size`` of them. ``candidate_engines`` are the engines that may be
    needed; the sufficiency assessment narrows them to those that must run.
    """

    basis: Basis
    reason: SourceReason
    action_mode: str
    document_ids: tuple[str, ...] = ()
    prior_refs: tuple[GroundedRef, ...] = ()
    search: bool = False
    exhaustive: bool = False
    catalog_size: int | None = None
    candidate_engines: frozenset[SourceKind] = frozenset()


def resolve_sources(
    request: SourceRequest, prior_refs: Sequence[GroundedRef], *, catalog_size: int | None = None
) -> SourcePlan:
    """The turn's :class:`SourcePlan` by the seed's fixed precedence (see the module's table).

    ``prior_refs``: the session's latest grounded refs (empty when none). ``catalog_size``: how many
    documents the caller may read, needed only for Analyze All, which refuses more than
    ``MAX_ANALYZE_ALL_DOCUMENTS`` (:class:`AnalyzeLimitExceeded`, 422) rather than read some of them.
    """
    prior = tuple(prior_refs)
    mode = request.action_mode
    if mode == "compare":
        return SourcePlan(
            "selected", SourceReason.COMPARE_EXPLICIT, mode, request.selected_ids, (), False, False, None, ENGINES
        )
    if request.selection_mode == "selected":
        if not request.include_prior:
            # Never merged with the prior sources unless asked: a new selection supersedes them.
            return SourcePlan(
                "selected", SourceReason.EXPLICIT_SELECTION, mode, request.selected_ids, candidate_engines=ENGINES
            )
        selected = set(request.selected_ids)
        merged = tuple(ref for ref in prior if ref.document_id not in selected)
        if len(selected) + len(merged) > MAX_SOURCES_PER_TURN:
            raise TooManySources(
                f"the selection and the previous sources make {len(selected) + len(merged)} documents; "
                f"a turn reads at most {MAX_SOURCES_PER_TURN}"
            )
        return SourcePlan(
            "selected",
            SourceReason.EXPLICIT_SELECTION_WITH_PRIOR,
            mode,
            request.selected_ids,
            merged,
            candidate_engines=ENGINES,
        )
    if request.selection_mode == "all":
        if mode == "analyze":
            return _analyze_all(catalog_size)
        return SourcePlan("all", SourceReason.ALL_RELEVANCE_BOUNDED, mode, search=True, candidate_engines=SEARCHABLE)
    if prior:
        engines = frozenset(ref.source_kind for ref in prior)
        if request.selection_mode == "history":
            return SourcePlan(
                "history", SourceReason.HISTORY_GROUNDING, mode, prior_refs=prior, candidate_engines=engines
            )
        return SourcePlan(
            "history",
            SourceReason.HISTORY_THEN_RELEVANCE,
            mode,
            prior_refs=prior,
            search=True,
            candidate_engines=engines | SEARCHABLE,
        )
    return SourcePlan("relevance", SourceReason.NO_GROUNDED_REFS, mode, search=True, candidate_engines=SEARCHABLE)


def _analyze_all(catalog_size: int | None) -> SourcePlan:
    if catalog_size is None or catalog_size < 0:
        raise ValueError("Analyze All needs the size of the caller's readable catalog")
    if catalog_size > MAX_ANALYZE_ALL_DOCUMENTS:
        raise AnalyzeLimitExceeded(
            f"Analyze All Documents reads at most {MAX_ANALYZE_ALL_DOCUMENTS} documents and you may read "
            f"{catalog_size}; select the documents to analyze (selection_mode selected)"
        )
    return SourcePlan(
        "all",
        SourceReason.ANALYZE_ALL_EXHAUSTIVE,
        "analyze",
        exhaustive=True,
        catalog_size=catalog_size,
        candidate_engines=ENGINES,
    )
