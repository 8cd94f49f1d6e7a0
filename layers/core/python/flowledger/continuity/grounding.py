"""One turn's grounding: which sources, which engines, what evidence, and what the session remembers.

The seed's follow-up decision flow, for the knowledge and the diagnosis paths alike (the chat use case
calls this before either executor, so both make the same decision):

1. ``preflight`` (before the run is written): every explicitly named document is readable (404 otherwise),
   the tables of a turn are within their bound, Analyze All is within its limit (422 otherwise);
2. ``ground``: the session's grounded refs, the fixed precedence (``resolve_sources``), reauthorisation of
   every prior source (``reauthorize``), the history sufficiency assessment when the turn rests on
   history (``assess``), then only the engines that decision needs, and the relevance search when the
   precedence allows one;
3. ``publish``: every source reauthorised once more, just before the answer goes out; the answer carries
   the disclosures (changed, revoked, deleted, partly covered) and its source context;
4. ``remember``: the turn's grounded refs (and the plans of its tables) stored on the session.

With native reruns off (the seed's rollback) no engine reruns on a prior source: a follow-up is answered
from history, with the authorised fallback search when history does not suffice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Any

from flowledger.chat.executors import Budget, RunCancelled
from flowledger.chat.models import PublicContent, PublicTable, SourceContext, SourceHow, SourceUse, StatusCode
from flowledger.chat.runs import RunStore
from flowledger.continuity.engines import (
    MAX_EVIDENCE_CHARS,
    Evidence,
    EvidenceDocument,
    NarrativeEngine,
    ScopedLookup,
    SourceRead,
    TabularEngine,
)
from flowledger.continuity.precedence import SourcePlan, resolve_sources
from flowledger.continuity.reauthorize import SourceOutcome, SourceStatus, disclosure, reauthorize
from flowledger.continuity.refs import GroundedRef, GroundedRefs, GroundedRefStore
from flowledger.continuity.request import MAX_SOURCES_PER_TURN, SourceRequest
from flowledger.continuity.sufficiency import (
    ASSESSMENT_MAX_TOKENS,
    ASSESSMENT_TIMEOUT_SECONDS,
    SufficiencyDecision,
    assess,
)
from flowledger.errors import InvalidInput, NotFound
from flowledger.identity import Principal
from flowledger.knowledge.scopes import GLOBAL, MAX_SCOPES_PER_LOOKUP
from flowledger.llm.ports import ChatModel
from flowledger.services import Services
from flowledger.tabular.plan import parse_plan
from flowledger.workspaces.documents import DocumentService
from flowledger.workspaces.models import NARRATIVE_KINDS, DocumentView
from flowledger.workspaces.service import WorkspaceService
from flowledger.workspaces.store import conversation_scope, counter_key

logger = logging.getLogger("flowledger.continuity")

MAX_TABLES_PER_TURN = 5
"""Tables one turn computes on (one plan, so one model call, each): more is a 422 before anything runs."""
MAX_EVIDENCE_TOTAL_CHARS = 24_000  # what the answer model reads in all; Analyze All shares it out
SEARCH_LIMIT = 4
HISTORY_TITLE = "Previous answer"


class TooManyTables(InvalidInput):
    """A turn names more tables than it may compute on (422)."""

    code = "too_many_tables"


class ContinuityDisabled(InvalidInput):
    """The request asks for a source behaviour while conversation continuity is switched off (422)."""

    code = "continuity_disabled"


@dataclass(frozen=True)
class Preflight:
    """What was checked before the run was written: the named documents and, for Analyze All, the catalog."""

    named: tuple[DocumentView, ...] = ()
    catalog: tuple[DocumentView, ...] | None = None
    # The session's grounded refs when the preflight read them (include_prior), so the turn reads them once.
    grounded: GroundedRefs | None = None
    grounded_read: bool = False


@dataclass
class Grounding:
    """What one turn was grounded on, how it was decided, and what the session will remember."""

    plan: SourcePlan
    reasons: tuple[str, ...]
    ran: tuple[str, ...]  # what ran, in order: "narrative", "tabular" and "search" (a search is narrative)
    evidence: list[EvidenceDocument]
    uses: list[SourceUse]
    refs: list[GroundedRef]
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)
    disclosures: list[str] = field(default_factory=list)
    rewrite: str | None = None
    outcomes: tuple[str, ...] = ()  # each prior source's reauthorisation reason code, in order
    tabular_runs: list[dict[str, Any]] = field(default_factory=list)  # stored on the run for replay

    @property
    def engines_run(self) -> tuple[str, ...]:
        """The native engines that ran, sorted; a relevance search counts as the narrative engine."""
        return tuple(sorted({"narrative" if engine == "search" else engine for engine in self.ran}))

    @property
    def decision(self) -> str:
        """``history`` when no engine ran, else ``narrative``, ``tabular`` or ``both``."""
        engines = self.engines_run
        return {(): "history", ("narrative",): "narrative", ("tabular",): "tabular"}.get(engines, "both")

    @property
    def source_context(self) -> SourceContext:
        return SourceContext(
            basis=self.plan.basis,
            decision=self.decision,
            engines=list(self.engines_run),
            sources=self.uses[:MAX_SOURCES_PER_TURN],
        )

    def record(self) -> dict[str, Any]:
        """The decision as the run keeps it: codes, counts and plans, never evidence text."""
        return {
            "basis": self.plan.basis,
            "source_reason": self.plan.reason.value,
            "decision": self.decision,
            "reasons": list(self.reasons),
            "engines_run": list(self.engines_run),
            "search": "search" in self.ran,
            "outcomes": list(self.outcomes),
            "sources": [use.model_dump(mode="json") for use in self.uses[:MAX_SOURCES_PER_TURN]],
            "tabular_plans": self.tabular_runs,
        }

    def flow_outputs(self) -> dict[str, Any]:
        """What the reasoning flow's step records: fixed codes and counts only (no names, no text)."""
        counts: dict[str, int] = {}
        for use in self.uses:
            counts[use.outcome] = counts.get(use.outcome, 0) + 1
        return {
            "basis": self.plan.basis,
            "source_reason": self.plan.reason.value,
            "decision": self.decision,
            "reasons": list(self.reasons),
            "engines_run": list(self.ran),
            "source_outcomes": counts,
            "reauthorisation": list(self.outcomes),
        }

    def summary(self) -> str:
        """A fixed-text summary of the decision for the reasoning flow."""
        ran = ", ".join(self.ran) or "no engine"
        return f"Grounded the turn on {self.plan.basis} ({self.decision}); ran {ran}; {len(self.uses)} sources"


class ContinuityService:
    """Grounds knowledge and diagnosis turns on their sources across a conversation."""

    def __init__(
        self,
        services: Services,
        model: ChatModel,
        index: ScopedLookup,
        *,
        native_reruns: bool = True,
        timeout: float = 20.0,
    ) -> None:
        self._s = services
        self._model = model
        self._native_reruns = native_reruns
        self._workspaces = WorkspaceService(services)
        self._documents = DocumentService(services, index=index)
        self._refs = GroundedRefStore(services)
        self._runs = RunStore(services)
        self._narrative = NarrativeEngine(index)
        self._tabular = TabularEngine(model, self._documents, timeout)

    # ---- before the run --------------------------------------------------------------------------

    def preflight(self, principal: Principal, request: SourceRequest, session_id: str | None) -> Preflight:
        """The checks that must pass before a run is written (404 for an unreadable document, 422 for limits)."""
        named = tuple(self._documents.get(principal, document_id) for document_id in request.selected_ids)
        catalog = None
        if request.selection_mode == "all" and request.action_mode == "analyze":
            scopes = self._workspaces.readable_scopes(principal, [session_id] if session_id else [])
            # The scopes' counters first: past the limit, the 422 comes before anything is listed.
            resolve_sources(request, (), catalog_size=self._counted(scopes))
            catalog = tuple(document for scope in scopes for document in self._live_documents(principal, scope))
            resolve_sources(request, (), catalog_size=len(catalog))
        tables = [document.document_id for document in (catalog or named) if document.kind not in NARRATIVE_KINDS]
        grounded, grounded_read = None, False
        if request.include_prior and session_id is not None:
            # The prior tables an explicit selection merges in are computed on too: they count.
            grounded, grounded_read = self._refs.get(principal.id, session_id), True
            prior = grounded.refs if grounded else []
            tables += [r.document_id for r in prior if r.source_kind == "tabular" and r.document_id not in tables]
        if len(tables) > MAX_TABLES_PER_TURN:
            raise TooManyTables(
                f"a turn computes on at most {MAX_TABLES_PER_TURN} tables and this one names {len(tables)}; "
                "select fewer"
            )
        return Preflight(named, catalog, grounded, grounded_read)

    def _counted(self, scopes: list[str]) -> int:
        db, table = self._s.aws.dynamodb, self._s.aws.table_name("documents")
        total = 0
        for start in range(0, len(scopes), 100):  # BatchGetItem takes 100 keys
            keys = [counter_key(scope) for scope in scopes[start : start + 100]]
            request = {table: {"Keys": keys, "ProjectionExpression": "documents"}}
            while request:
                response = db.batch_get_item(RequestItems=request)
                total += sum(int(item.get("documents", {}).get("N", "0")) for item in response["Responses"][table])
                request = response.get("UnprocessedKeys") or {}
        return total

    def _live_documents(self, principal: Principal, scope: str) -> list[DocumentView]:
        """The completed documents of one readable scope, through the documents service's own listing."""
        kind, _, ident = scope.partition(":")
        workspace_id, session_id = (ident, None) if kind == "workspace" else (None, ident)
        documents: list[DocumentView] = []
        cursor = None
        while True:
            page = self._documents.page(principal, workspace_id, session_id, 100, cursor)
            documents.extend(document for document in page.documents if document.current_version is not None)
            cursor = page.next_cursor
            if cursor is None:
                return documents

    # ---- the turn --------------------------------------------------------------------------------

    def ground(
        self,
        principal: Principal,
        session_id: str,
        continuing: bool,
        request: SourceRequest,
        query: str,
        budget: Budget,
        preflight: Preflight,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Generator[StatusCode, None, Grounding]:
        """Decide the turn's sources and run only the engines it needs; yields progress codes."""
        yield StatusCode.RESOLVING_SOURCES
        if preflight.grounded_read:
            grounded = preflight.grounded
        else:
            grounded = self._refs.get(principal.id, session_id) if continuing else None
        plan = resolve_sources(
            request,
            grounded.refs if grounded else (),
            catalog_size=None if preflight.catalog is None else len(preflight.catalog),
        )
        outcomes: list[SourceOutcome] = []
        if plan.prior_refs and grounded is not None:
            outcomes = reauthorize(
                principal,
                grounded.model_copy(update={"refs": list(plan.prior_refs)}),
                self._workspaces,
                self._documents,
            )
        turn = _Turn(plan, outcomes, grounded)
        if plan.basis == "history":
            yield from self._from_history(principal, session_id, query, budget, turn, cancelled)
        else:
            how: SourceHow = "all" if plan.basis == "all" else "selected"
            fresh = list(preflight.catalog if preflight.catalog is not None else preflight.named)
            kept = [outcome for outcome in outcomes if outcome.document is not None]
            self._drop_unusable(turn, rerun_kinds=frozenset({"narrative", "tabular"}))
            turn.reasons.append(plan.reason.value)
            # ``grounded``: a table still selected in a conversation is planned with its previous plan as
            # context, as a follow-up answered from history is (else "now by region" forgets "by month").
            yield from self._read(
                principal, query, fresh, how, plan.candidate_engines, budget, turn, cancelled, grounded
            )
            prior_docs = [outcome.document for outcome in kept if outcome.document is not None]
            yield from self._read(
                principal, query, prior_docs, "history", plan.candidate_engines, budget, turn, cancelled, grounded
            )
            if plan.search:
                self._search(principal, session_id, query, turn)
        return turn.grounding()

    def _from_history(
        self,
        principal: Principal,
        session_id: str,
        query: str,
        budget: Budget,
        turn: _Turn,
        cancelled: Callable[[], bool],
    ) -> Generator[StatusCode, None, None]:
        plan, grounded = turn.plan, turn.grounded
        assert grounded is not None
        prior_plan = next(
            (parse_plan(found) for ref in plan.prior_refs if (found := grounded.plan_for(ref)) is not None), None
        )
        budget.check_model_call()
        timeout, _ = budget.call_bounds(ASSESSMENT_TIMEOUT_SECONDS, ASSESSMENT_MAX_TOKENS)
        decision: SufficiencyDecision = assess(
            query, plan.prior_refs, prior_plan, self._model, outcomes=turn.outcomes, timeout_seconds=timeout
        )
        budget.model_calls += decision.model_calls
        budget.tokens += decision.tokens
        turn.reasons.extend(reason.value for reason in decision.reasons)
        turn.rewrite = decision.rewrite
        engines = set(decision.engines) if self._native_reruns else set()
        self._drop_unusable(turn, rerun_kinds=frozenset(engines))
        rerun: list[SourceOutcome] = []
        reused: list[SourceOutcome] = []
        for outcome in turn.outcomes:
            changed = outcome.status is SourceStatus.CHANGED
            if outcome.document is None or (changed and outcome.ref.source_kind not in engines):
                continue  # a changed source is read again or disclosed, never answered from history
            (rerun if outcome.ref.source_kind in engines else reused).append(outcome)
        yield from self._read(
            principal,
            decision.rewrite,
            [outcome.document for outcome in rerun if outcome.document is not None],
            "history",
            frozenset(engines),
            budget,
            turn,
            cancelled,
            grounded,
        )
        if reused:
            self._reuse_history(session_id, reused, turn)
        # Search: where the precedence allows it and history alone does not answer (in the rollback too).
        wants_search = decision.decision != "none" and (
            "narrative" in decision.engines or not self._native_reruns or not turn.evidence
        )
        if plan.search and wants_search:
            self._search(principal, session_id, decision.rewrite, turn)

    def _drop_unusable(self, turn: _Turn, *, rerun_kinds: frozenset[str]) -> None:
        """Prior sources that are not reused are disclosed, never dropped in silence."""
        not_reused = [
            outcome
            for outcome in turn.outcomes
            if outcome.status in (SourceStatus.UNAUTHORISED, SourceStatus.MISSING)
            or (outcome.status is SourceStatus.CHANGED and outcome.ref.source_kind not in rerun_kinds)
        ]
        for outcome in not_reused:
            code = {SourceStatus.UNAUTHORISED: "revoked", SourceStatus.MISSING: "deleted"}.get(
                outcome.status, "changed"
            )
            turn.uses.append(
                SourceUse(
                    document_id=outcome.ref.document_id,
                    file_name=outcome.ref.file_name,
                    version=outcome.ref.source_version,
                    how="history",
                    outcome=code,
                )
            )
        sentence = disclosure(not_reused)
        if sentence:
            turn.disclosures.append(sentence)
        changed_rerun = [
            o for o in turn.outcomes if o.status is SourceStatus.CHANGED and o.ref.source_kind in rerun_kinds
        ]
        if changed_rerun:
            names = ", ".join(o.ref.file_name for o in changed_rerun[:10])
            turn.disclosures.append(f"These sources changed since the previous answer and were read again: {names}.")

    def _read(
        self,
        principal: Principal,
        query: str,
        documents: list[DocumentView],
        how: SourceHow,
        engines: frozenset[str],
        budget: Budget,
        turn: _Turn,
        cancelled: Callable[[], bool],
        grounded: GroundedRefs | None,
    ) -> Generator[StatusCode, None, None]:
        narrative = [d for d in documents if d.kind in NARRATIVE_KINDS and "narrative" in engines]
        tables = [d for d in documents if d.kind not in NARRATIVE_KINDS and "tabular" in engines]
        if narrative:
            turn.add(self._narrative.read(query, narrative), how, rerun=how == "history")
            turn.ran("narrative")
        prior_plans = {ref.document_id: grounded.plan_for(ref) for ref in grounded.refs} if grounded else {}
        for table in tables:
            if cancelled():
                raise RunCancelled("the run was cancelled")
            yield StatusCode.ANALYZING_TABLE
            previous = prior_plans.get(table.document_id)
            evidence = self._tabular.read(principal, query, table, previous, budget, cancelled)
            turn.add(evidence, how, rerun=how == "history")
            turn.ran("tabular")
        if cancelled():
            raise RunCancelled("the run was cancelled")

    def _reuse_history(self, session_id: str, reused: list[SourceOutcome], turn: _Turn) -> None:
        """The previous answer as evidence, and the reused sources carried over with their stored plans."""
        assert turn.grounded is not None
        previous = self._runs.get(session_id, turn.grounded.run_id)
        text = previous.content.text if previous and previous.content else None
        if text is None:  # nothing saved to answer from: the sources were not reused after all
            return
        first = reused[0].ref
        turn.evidence.append(
            EvidenceDocument(
                first.document_id,
                f"{first.file_name} ({HISTORY_TITLE.lower()})",
                text[:MAX_EVIDENCE_CHARS],
                "history",
                first.source_version,
                kind="history",
            )
        )
        for outcome in reused:
            ref = outcome.ref.model_copy(update={"last_engine": "history"})
            turn.keep(ref, turn.grounded.plan_for(outcome.ref))
            turn.uses.append(
                SourceUse(
                    document_id=ref.document_id,
                    file_name=ref.file_name,
                    version=ref.source_version,
                    how="history",
                    engine="history",
                    outcome="reused",
                    evidence_status=ref.evidence_status,
                    coverage=ref.coverage,
                )
            )

    def _search(self, principal: Principal, session_id: str, query: str, turn: _Turn) -> None:
        """The relevance search of every scope the caller may read (and the global knowledge base)."""
        scopes = self._workspaces.readable_scopes(principal, [session_id])
        scopes = [conversation_scope(session_id), *[s for s in scopes if s != conversation_scope(session_id)]]
        scopes = [*scopes[: MAX_SCOPES_PER_LOOKUP - 1], GLOBAL]  # relevance-bounded: the first readable scopes
        result = self._narrative.search(query, scopes, SEARCH_LIMIT)
        turn.ran("search")
        seen = {document.document_id for document in turn.evidence}
        for hit in result.documents:
            if hit.document_id in seen:
                continue
            if hit.scope == GLOBAL:
                turn.evidence.append(
                    EvidenceDocument(hit.document_id, hit.title, hit.excerpt[:MAX_EVIDENCE_CHARS], "narrative")
                )
                continue
            try:
                family = self._documents.get(principal, hit.document_id)  # its own scope decides, not the hit's
            except NotFound:
                continue
            read = SourceRead(family, "narrative", "completed", 1.0)
            turn.add(Evidence([_hit_evidence(family, hit.excerpt)], [read]), "relevance", rerun=False)

    # ---- after the executor ----------------------------------------------------------------------

    def publish(
        self, principal: Principal, grounding: Grounding, content: PublicContent | None
    ) -> PublicContent | None:
        """Reauthorise every source once more, then the content with its disclosures and source context.

        A source the caller can no longer read is never published: its ref is dropped and, when the answer
        rested on it, the answer is replaced by a fixed text saying so. Returns None when nothing may go out.
        """
        revoked = []
        for ref in list(grounding.refs):
            try:
                family = self._documents.get(principal, ref.document_id)
            except NotFound:
                revoked.append(ref)
                continue
            if family.current_version != ref.source_version:
                grounding.disclosures.append(f"{ref.file_name} changed while this answer was prepared.")
        if revoked:
            gone = {ref.document_id for ref in revoked}
            # The answer rests on what it cites and, when it reused the previous answer, on every source
            # that answer rested on: if any of them is gone, nothing of it goes out.
            rested_on = {reference.document_id for reference in (content.references if content else [])}
            if any(document.engine == "history" for document in grounding.evidence):
                rested_on |= {use.document_id for use in grounding.uses if use.outcome == "reused"}
            grounding.refs = [ref for ref in grounding.refs if ref.document_id not in gone]
            grounding.uses = [
                use.model_copy(update={"outcome": "revoked"}) if use.document_id in gone else use
                for use in grounding.uses
            ]
            if content is not None and rested_on & gone:
                return None
        if content is None:
            return None
        versions = {document.document_id: document.version for document in grounding.evidence}
        references = [
            reference.model_copy(update={"version": versions.get(reference.document_id)})
            for reference in content.references
        ]
        tables = [
            document.table
            for document in grounding.evidence
            if document.table is not None and document.document_id not in {ref.document_id for ref in revoked}
        ][:MAX_TABLES_PER_TURN]
        limitations = " ".join(
            part
            for part in [content.limitations, *grounding.disclosures, *_coverage(grounding), *_cut_tables(tables)]
            if part
        )
        return content.model_copy(
            update={
                "references": references,
                "limitations": limitations[:2000] or None,
                "source_context": grounding.source_context,
                "tables": tables,
            }
        )

    def remember(self, principal: Principal, session_id: str, run_id: str, grounding: Grounding) -> None:
        """Store the turn's grounded refs on the session.

        A turn that grounded on nothing and reused nothing (a search that found only the global knowledge
        base, say) leaves the previous refs as they are; one whose prior sources were all dropped (revoked,
        deleted) stores that it has none, so later turns do not report the same loss again.
        """
        if not grounding.refs and not grounding.outcomes:
            return
        refs = grounding.refs[:MAX_SOURCES_PER_TURN]
        named = {ref.plan_fingerprint for ref in refs if ref.plan_fingerprint}
        plans = {key: plan for key, plan in grounding.plans.items() if key in named}
        self._refs.put(principal.id, GroundedRefs(session_id=session_id, run_id=run_id, refs=refs, plans=plans))


def _hit_evidence(family: DocumentView, excerpt: str) -> EvidenceDocument:
    return EvidenceDocument(
        family.document_id,
        family.title or family.file_name,
        excerpt[:MAX_EVIDENCE_CHARS],
        "narrative",
        family.current_version,
    )


def _coverage(grounding: Grounding) -> list[str]:
    partial = [use.file_name for use in grounding.uses if use.evidence_status == "partial"]
    failed = [use.file_name for use in grounding.uses if use.evidence_status == "failed" and use.outcome != "reused"]
    sentences = []
    if partial:
        sentences.append(f"Only part of these sources was covered: {', '.join(partial[:10])}.")
    if failed:
        sentences.append(f"These sources could not be read: {', '.join(failed[:10])}.")
    return sentences


def _cut_tables(tables: list[PublicTable]) -> list[str]:
    """One sentence per table answer whose rows were cut: how many of how many are shown."""
    return [
        f"{table.title}: the table shows {table.rows_shown} of {table.total_rows} rows."
        for table in tables
        if table.rows_shown < table.total_rows
    ]


class _Turn:
    """The grounding being built during one turn."""

    def __init__(self, plan: SourcePlan, outcomes: list[SourceOutcome], grounded: GroundedRefs | None) -> None:
        self.plan, self.outcomes, self.grounded = plan, outcomes, grounded
        self.reasons: list[str] = []
        self.evidence: list[EvidenceDocument] = []
        self.uses: list[SourceUse] = []
        self.refs: dict[str, GroundedRef] = {}
        self.plans: dict[str, dict[str, Any]] = {}
        self.disclosures: list[str] = []
        self.engines: list[str] = []
        self.tabular_runs: list[dict[str, Any]] = []
        self.rewrite: str | None = None

    def ran(self, engine: str) -> None:
        if engine not in self.engines:
            self.engines.append(engine)

    def keep(self, ref: GroundedRef, plan: dict[str, Any] | None) -> None:
        if ref.document_id not in self.refs and len(self.refs) < MAX_SOURCES_PER_TURN:
            self.refs[ref.document_id] = ref
            if plan is not None and ref.plan_fingerprint:
                self.plans[ref.plan_fingerprint] = plan

    def add(self, evidence: Evidence, how: SourceHow, *, rerun: bool) -> None:
        self.evidence.extend(evidence.documents)
        for read in evidence.reads:
            ref = GroundedRef.from_document(
                read.document,
                last_engine=read.engine,
                evidence_status=read.status,
                coverage=read.coverage,
                plan_fingerprint=read.plan_fingerprint,
            )
            self.keep(ref, read.plan)
            if read.plan is not None:
                self.tabular_runs.append(
                    {
                        "document_id": ref.document_id,
                        "version": ref.source_version,
                        "plan": read.plan,
                        "plan_fingerprint": read.plan_fingerprint,
                        "rows_digest": read.rows_digest,
                    }
                )
            self.uses.append(
                SourceUse(
                    document_id=ref.document_id,
                    file_name=ref.file_name,
                    version=ref.source_version,
                    how=how,
                    engine=read.engine,
                    outcome="failed" if read.status == "failed" else ("rerun" if rerun else "read"),
                    evidence_status=read.status,
                    coverage=read.coverage,
                )
            )

    def grounding(self) -> Grounding:
        return Grounding(
            plan=self.plan,
            reasons=tuple(dict.fromkeys(self.reasons)),
            ran=tuple(self.engines),
            evidence=_shared_out(self.evidence),
            uses=self.uses,
            refs=list(self.refs.values()),
            plans=self.plans,
            disclosures=self.disclosures,
            rewrite=self.rewrite,
            outcomes=tuple(outcome.reason.value for outcome in self.outcomes),
            tabular_runs=self.tabular_runs,
        )


def _shared_out(evidence: list[EvidenceDocument]) -> list[EvidenceDocument]:
    """Evidence within the answer model's total: each document's text cut to its share (Analyze All)."""
    if not evidence:
        return evidence
    share = max(200, MAX_EVIDENCE_TOTAL_CHARS // len(evidence))
    return [
        document if len(document.text) <= share else replace(document, text=document.text[:share])
        for document in evidence
    ]
