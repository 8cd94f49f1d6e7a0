"""An OTLP export request written as flows: one trace is one flow, each span a step, through the same
:class:`FlowService` writes as the flows API (the caller's ``reasoning.write`` principal, one audited
transaction per batch of steps, sealed contents, a retried batch never written twice).

Ids derive from the trace and span ids alone, so a span sent twice (an exporter's retry) is the same step
with the same content and is skipped, a trace split over many requests lands in one flow, and a span whose
parent came in an earlier request finds it by the parent's span id.

What is refused is refused span by span and said: a span that cannot be a step, a span of a trace whose
flow another writer opened or that is closed, a batch the flow service refuses (each of its spans named).
Nothing is dropped silently. Edges: a span's parent, and its links within the trace (together at most
:data:`MAX_PARENTS`). A parent that is neither in the request nor already recorded leaves the span attached
to the flow itself, with the missing parent's span id kept in its facts (``orphan_of``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import hmac
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from pydantic import ValidationError

from flowledger.errors import (
    BacklogContention,
    Conflict,
    FlowledgerError,
    InvalidInput,
    LedgerContention,
    PayloadTooLarge,
    RateLimited,
    SubjectErased,
    UpstreamUnavailable,
)
from flowledger.identity import Principal
from flowledger.ids import crockford
from flowledger.ledger.events import AuditEntry
from flowledger.otlp.events import record_step
from flowledger.otlp.mapping import SpanRefused, SpanStep, attributes, is_flow_span, safe_name, span_step
from flowledger.otlp.waiting import Waiting, WaitingRoom
from flowledger.reasoning.guard import check_summary
from flowledger.reasoning.models import MAX_PARENTS, MAX_STEP_PAYLOAD_BYTES, FlowStart, PiiFields, StepCreate
from flowledger.reasoning.service import MAX_STEPS_PER_BATCH, FlowService, payload_bytes
from flowledger.services import Services

TRIGGER_TYPE = "otlp"
MAX_ERROR_MESSAGE_CHARS = 4000  # partial_success.error_message: each refusal named, within reason
FACTS = "otel"
# What a retry of the whole request can fix: these end the request (429/503 with Retry-After), and the retry
# writes nothing twice. Every other refusal is the span's own and is said in partial_success.
# Held spans a request writes at most when their parent comes (a trace's children sent before its root may be
# thousands); the otlp_release job writes the rest within a minute.
MAX_RELEASED_PER_REQUEST = 1_000
RETRIABLE = (LedgerContention, BacklogContention, UpstreamUnavailable, RateLimited)
# The resource or span attribute naming the patient a trace is about (documented in docs/otlp.md).
PATIENT_ATTRIBUTE = (
    "flowledger.patient_id"  # the unsealed input holding a step's facts (model, tokens, unmapped attribute names)
)


@dataclass
class FlowTally:
    """What one request did to one flow."""

    recorded: int = 0
    already_recorded: int = 0
    refused: int = 0
    waiting: int = 0  # held for a parent that has not arrived (otlp.waiting): taken, written later
    released: int = 0  # spans of earlier requests that waited for this one's, written now
    released_refused: int = 0  # of those, refused by the flow service (a closed or full flow)
    flow_spans: int = 0  # a Flowledger export's own flow span: the flow itself, not a step


@dataclass
class Ingested:
    """What one request did: steps written and already held, and each span refused with its reason."""

    spans: int = 0  # spans or log records the request held
    refused: list[str] = field(default_factory=list)  # "span <id>: <reason>"
    flows: dict[str, FlowTally] = field(default_factory=dict)  # flow id: its tally, in the order met

    @property
    def recorded(self) -> int:
        return sum(tally.recorded for tally in self.flows.values())

    @property
    def already_recorded(self) -> int:
        return sum(tally.already_recorded for tally in self.flows.values())

    @property
    def flow_ids(self) -> list[str]:
        return list(self.flows)

    def refuse(self, label: str, reason: str, tally: FlowTally | None = None) -> None:
        self.refused.append(f"{label}: {reason}")
        if tally is not None:
            tally.refused += 1

    @property
    def error_message(self) -> str:
        """``partial_success.error_message``: every refused span and why (cut, and said to be, when long)."""
        text = "; ".join(self.refused)
        if len(text) <= MAX_ERROR_MESSAGE_CHARS:
            return text
        return text[: MAX_ERROR_MESSAGE_CHARS - 40].rsplit("; ", 1)[0] + f"; and {len(self.refused)} refused in all"


def flow_id_of(trace_id: str) -> str:
    """The flow of a trace (hex id): ``fl_`` and a ULID-shaped digest of it, the same for every request."""
    return "fl_" + crockford(int.from_bytes(_digest("flow", trace_id)[:16]) >> 2)


def step_id_of(trace_id: str, span_id: str) -> str:
    """A span's step (hex ids): ``st_`` and a ULID-shaped digest of the trace and span ids."""
    return "st_" + crockford(int.from_bytes(_digest("step", trace_id + span_id)[:16]) >> 2)


@dataclass(frozen=True)
class Item:
    """One span or log record of a request, before it is read: what to call it in a refusal, the trace it
    names, how to read it as a step, and the attributes that may name its patient."""

    label: str  # "span <id>", "log record <where>"
    trace_id: bytes
    read: Callable[[], SpanStep]  # raises SpanRefused
    service: str
    patient: Any


def ingest_traces(services: Services, principal: Principal, request: ExportTraceServiceRequest) -> Ingested:
    """Write the request's spans as steps of their traces' flows; refuse, span by span, what cannot be."""
    return _ingest(services, principal, _spans_of(request))


def ingest_logs(services: Services, principal: Principal, request: ExportLogsServiceRequest) -> Ingested:
    """Write the request's log records as steps under their spans' steps (``otlp.events``); refuse, record by
    record, what cannot be."""
    return _ingest(services, principal, _records_of(request))


def _spans_of(request: ExportTraceServiceRequest) -> Iterator[Item]:
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        service = str(resource.get("service.name") or "unknown_service")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if is_flow_span(span):
                    yield Item(f"span {span.span_id.hex()}", span.trace_id, _flow_itself, service, None)
                    continue
                yield Item(
                    f"span {span.span_id.hex() or '(no id)'}",
                    span.trace_id,
                    functools.partial(span_step, span, resource),
                    service,
                    attributes(span.attributes).get(PATIENT_ATTRIBUTE, resource.get(PATIENT_ATTRIBUTE)),
                )


class FlowItself(Exception):
    """The span is the flow's own (``mapping.is_flow_span``): taken as the flow, not written as a step."""


def _flow_itself() -> SpanStep:
    raise FlowItself


def _records_of(request: ExportLogsServiceRequest) -> Iterator[Item]:
    for r, resource_logs in enumerate(request.resource_logs):
        resource = attributes(resource_logs.resource.attributes)
        service = str(resource.get("service.name") or "unknown_service")
        for s, scope_logs in enumerate(resource_logs.scope_logs):
            for n, record in enumerate(scope_logs.log_records):
                yield Item(
                    f"log record resourceLogs[{r}].scopeLogs[{s}].logRecords[{n}]",
                    record.trace_id,
                    functools.partial(record_step, record, resource),
                    service,
                    resource.get(PATIENT_ATTRIBUTE),
                )


def _ingest(services: Services, principal: Principal, items: Iterator[Item]) -> Ingested:
    done = Ingested()
    traces: dict[str, list[tuple[SpanStep, Origin]]] = defaultdict(list)  # trace: (step, where it came from)
    labels: dict[str, str] = {}  # a step's span id: what a refusal calls it
    for item in items:
        done.spans += 1
        try:
            step = item.read()
        except FlowItself:
            done.flows.setdefault(flow_id_of(item.trace_id.hex()), FlowTally()).flow_spans += 1
            continue
        except SpanRefused as exc:
            # counted in its trace's receipt when it names one
            named = len(item.trace_id) == 16 and any(item.trace_id)
            tally = done.flows.setdefault(flow_id_of(item.trace_id.hex()), FlowTally()) if named else None
            done.refuse(item.label, exc.reason, tally)
            continue
        labels[step.span_id] = item.label
        patient = None if item.patient is None else str(item.patient)
        traces[step.trace_id].append((step, Origin(item.service, patient)))
    flows = FlowService(services)
    for trace_id, spans in traces.items():
        flow_id = flow_id_of(trace_id)
        tally = done.flows.setdefault(flow_id, FlowTally())
        try:
            _open_flow(flows, principal, flow_id, trace_id, _origin_of(spans))
        except RETRIABLE:
            raise
        except FlowledgerError as exc:
            for step, _ in spans:
                done.refuse(labels[step.span_id], exc.message, tally)
            continue
        _write_steps(services, flows, principal, flow_id, [step for step, _ in spans], done, tally, labels)
    return done


@dataclass(frozen=True)
class Origin:
    """Where a span came from: its resource's ``service.name`` and the patient it names, if any."""

    service: str
    patient_id: str | None


def _origin_of(spans: list[tuple[SpanStep, Origin]]) -> Origin:
    """The trace's origin: its first span's service, and the first patient any of its spans names."""
    patient = next((origin.patient_id for _, origin in spans if origin.patient_id is not None), None)
    return Origin(spans[0][1].service, patient)


def record_receipts(
    services: Services, principal: Principal, signal: str, body: bytes, kind: str, done: Ingested
) -> list[str]:
    """The request's receipts: one audit event per flow it touched (so the flow's evidence bundle holds it),
    each with the SHA-256 of the body as received and what was taken and refused; one under the body's own
    subject when no flow was. Counts and hashes only: nothing a span said. Returns the events' ids."""
    digest = hashlib.sha256(body).hexdigest()
    common = {
        "body_bytes": len(body),
        "content_type": "protobuf" if kind.endswith("protobuf") else "json",
        "signal": signal,
        "request_items": done.spans,
        "request_refused": len(done.refused),
    }
    subjects = {f"flow:{flow_id}": tally for flow_id, tally in done.flows.items()} or {f"otlp:{digest}": FlowTally()}
    return [
        services.ledger.append(
            AuditEntry(
                action="reasoning.otlp.received",
                actor=principal.actor,
                subject=subject,
                payload={
                    **common,
                    **_body_digest(services, subject, body, digest),
                    "recorded": tally.recorded,
                    "already_recorded": tally.already_recorded,
                    "refused": tally.refused,
                    "waiting": tally.waiting,
                    "released": tally.released,
                    "released_refused": tally.released_refused,
                    "flow_spans": tally.flow_spans,
                },
            )
        ).event_id
        for subject, tally in subjects.items()
    ]


def _body_digest(services: Services, subject: str, body: bytes, digest: str) -> dict[str, str]:
    """What a receipt commits to of the body: its SHA-256, or for a patient's flow an HMAC-SHA256 keyed with the
    patient's salt (``body_hmac``), so that once they are erased no digest of their words can be matched."""
    flow_id = subject.removeprefix("flow:")
    subject_id = services.sealer.subject_of_flow(flow_id) if subject.startswith("flow:") else None
    if subject_id is None:
        return {"body_sha256": digest}
    try:
        salt = services.subject_keys.key(subject_id, create=False).salt
    except SubjectErased:
        return {"body_hmac": "erased"}  # refused whole: the flow's patient was erased
    return {"body_hmac": hmac.new(salt, body, hashlib.sha256).hexdigest()}


def _open_flow(flows: FlowService, principal: Principal, flow_id: str, trace_id: str, origin: Origin) -> None:
    """The trace's flow, opened by the first request that carries one of its spans."""
    summary = f"Trace from {origin.service}"
    try:
        body = FlowStart(
            flow_id=flow_id,
            trigger_type=TRIGGER_TYPE,
            trigger_ref=f"otlp/{trace_id}",
            trigger_summary=summary
            if check_summary(summary).safe and len(summary) <= 280
            else "Trace received over OTLP",
            trace_id=trace_id,
            patient_id=origin.patient_id,
        )
    except ValidationError:
        raise InvalidInput(f"{PATIENT_ATTRIBUTE} is not a patient id") from None
    # An earlier request may have opened it; whether this caller may write to it, the steps' guard decides.
    with contextlib.suppress(Conflict):
        flows.start_flow(principal, body, source="otlp", source_service=safe_name(origin.service))


def _write_steps(
    services: Services,
    flows: FlowService,
    principal: Principal,
    flow_id: str,
    steps: list[SpanStep],
    done: Ingested,
    tally: FlowTally,
    labels: dict[str, str],
) -> None:
    """Write the request's steps of one flow; hold those whose parent has not arrived (``otlp.waiting``), then
    release what waited for the steps just written, or waited long enough."""
    trace = steps[0].trace_id
    here = {step.span_id for step in steps}
    outside = sorted({edge for step in steps for edge in _edges(step) if edge not in here})
    recorded = flows.recorded_steps(flow_id, [step_id_of(trace, span_id) for span_id in outside])
    known = here | {span_id for span_id in outside if step_id_of(trace, span_id) in recorded}
    room, settings, now = WaitingRoom(services), services.settings, services.clock().timestamp()
    waiting = _to_hold(flows, flow_id, steps, known) if settings.otlp_parent_wait_seconds else {}
    release_at = now + settings.otlp_parent_wait_seconds
    held = [
        Waiting(step, waiting[step.span_id], labels[step.span_id], principal, release_at)
        for step in _parents_first(steps)
        if step.span_id in waiting
    ]
    room.hold(flow_id, held)
    tally.waiting += len(held)
    writable = [step for step in steps if step.span_id not in waiting]
    _write(flows, principal, flow_id, writable, known - set(waiting), done, tally, labels)
    if release(flows, room, flow_id, now, tally, written={step.span_id for step in writable}):
        room.flag(flow_id, True)  # more were waiting than a request writes: the job goes on with them


def _to_hold(flows: FlowService, flow_id: str, steps: list[SpanStep], known: set[str]) -> dict[str, str]:
    """The steps that must wait, each with the span it waits for: a missing edge, or a step that itself waits.
    A step already recorded (an earlier copy, written after its wait) never waits again."""

    def waits(recorded: set[str]) -> dict[str, str]:
        held: dict[str, str] = {}
        for step in _parents_first(steps):
            if step.span_id in recorded:
                continue
            blocking = next((edge for edge in _edges(step) if edge not in known or edge in held), None)
            if blocking is not None:
                held[step.span_id] = blocking
        return held

    candidates = waits(set())
    if not candidates:
        return {}
    trace = steps[0].trace_id
    already = flows.recorded_steps(flow_id, [step_id_of(trace, span_id) for span_id in candidates])
    return waits({span_id for span_id in candidates if step_id_of(trace, span_id) in already})


def release(
    flows: FlowService, room: WaitingRoom, flow_id: str, now: float, tally: FlowTally, written: set[str] | None = None
) -> bool:
    """Write up to :data:`MAX_RELEASED_PER_REQUEST` held spans of the flow that can be written now: their edges
    are recorded (or released with them), or their wait is over (then under the flow itself, ``orphan_of`` the
    missing parent). Each is then forgotten. Returns whether more may be (left to the ``otlp_release`` job).

    ``written``: the span ids a request just wrote; only the spans waiting for those (and for them) are read.
    None (the job): the spans waiting for any recorded span, else those whose wait is over."""
    if written is None:
        trace, awaited = room.awaited(flow_id)
        stored = flows.recorded_steps(flow_id, [step_id_of(trace, p) for p in sorted(awaited)]) if trace else set()
        written = {p for p in awaited if trace and step_id_of(trace, p) in stored}
        held, more = room.waiting_for(flow_id, written, MAX_RELEASED_PER_REQUEST)
        if not held:
            held, more = room.due(flow_id, now, MAX_RELEASED_PER_REQUEST)
    else:
        held, more = room.waiting_for(flow_id, written, MAX_RELEASED_PER_REQUEST)
    if held:
        _release_held(flows, room, flow_id, held, now, tally, complete=not more)
    return more


def _release_held(
    flows: FlowService,
    room: WaitingRoom,
    flow_id: str,
    held: list[Waiting],
    now: float,
    tally: FlowTally,
    complete: bool,
) -> None:
    trace = held[0].step.trace_id
    edges = sorted({edge for waiting in held for edge in _edges(waiting.step)})
    stored = flows.recorded_steps(flow_id, [step_id_of(trace, edge) for edge in edges])
    known = {edge for edge in edges if step_id_of(trace, edge) in stored}
    ready: dict[str, Waiting] = {}
    changed = True
    while changed:  # a released span lets the spans that waited for it go too
        changed = False
        for waiting in held:
            span_id = waiting.step.span_id
            if span_id in ready:
                continue
            if waiting.release_at <= now or all(edge in known or edge in ready for edge in _edges(waiting.step)):
                ready[span_id] = waiting
                changed = True
    by_writer: dict[str, list[Waiting]] = defaultdict(list)
    for waiting in ready.values():
        by_writer[waiting.writer.id].append(waiting)
    for group in by_writer.values():
        labels = {waiting.step.span_id: waiting.label for waiting in group}
        released = Ingested()
        own = released.flows.setdefault(flow_id, FlowTally())
        _write(flows, group[0].writer, flow_id, [w.step for w in group], known | set(ready), released, own, labels)
        tally.released += own.recorded + own.already_recorded
        tally.released_refused += own.refused
    # A span that still waits, now for another of its edges (its parent came, a link has not), is held under that
    # one, keeping its time.
    still = [w for w in held if w.step.span_id not in ready]
    moved = {
        w.key: dataclasses.replace(w, parent=blocking)
        for w in still
        if (blocking := next((e for e in _edges(w.step) if e not in known and e not in ready), w.parent)) != w.parent
    }
    room.hold(flow_id, list(moved.values()))
    # Only when every span held for those parents was read does a parent no span waits for leave the marker.
    room.remove(
        flow_id,
        [*ready.values(), *(w for w in still if w.key in moved)],
        [moved.get(w.key, w) for w in still] if complete else None,
    )


def _write(
    flows: FlowService,
    principal: Principal,
    flow_id: str,
    steps: list[SpanStep],
    known: set[str],
    done: Ingested,
    tally: FlowTally,
    labels: dict[str, str],
) -> None:
    bodies: list[tuple[str, StepCreate]] = []
    for step in _parents_first(steps):
        try:
            bodies.append((step.span_id, _step_body(step, known)))
        except FlowledgerError as exc:
            done.refuse(labels[step.span_id], exc.message, tally)
    for start in range(0, len(bodies), MAX_STEPS_PER_BATCH):
        chunk = bodies[start : start + MAX_STEPS_PER_BATCH]
        try:
            result = flows.add_steps(principal, flow_id, [body for _, body in chunk])
        except RETRIABLE:
            raise
        except FlowledgerError as exc:
            for span_id, _ in chunk:
                done.refuse(labels[span_id], exc.message, tally)
            continue
        tally.recorded += len(result.recorded)
        tally.already_recorded += len(result.already_recorded)


def _edges(step: SpanStep) -> list[str]:
    """The span ids a step hangs from: its parent, then its links, at most :data:`MAX_PARENTS`."""
    edges = [step.parent_span_id] if step.parent_span_id else []
    edges += [link for link in step.linked_span_ids if link not in edges and link != step.span_id]
    return edges[:MAX_PARENTS]


def _parents_first(steps: list[SpanStep]) -> Iterator[SpanStep]:
    """The request's steps with every parent before its children (a batch's own rule); a cycle, which
    spans cannot form unless an exporter is broken, is broken at the first step met again."""
    by_id = {step.span_id: step for step in steps}
    placed: set[str] = set()
    visiting: set[str] = set()

    def place(step: SpanStep) -> Iterator[SpanStep]:
        if step.span_id in placed or step.span_id in visiting:
            return
        visiting.add(step.span_id)
        for edge in _edges(step):
            if edge in by_id:
                yield from place(by_id[edge])
        visiting.discard(step.span_id)
        placed.add(step.span_id)
        yield step

    for step in steps:
        yield from place(step)


def _step_body(step: SpanStep, known: set[str]) -> StepCreate:
    """The step a span is: contents sealed, facts plain, edges to the spans the flow holds or this request brings."""
    edges = _edges(step)
    parents = [step_id_of(step.trace_id, edge) for edge in edges if edge in known]
    facts: dict[str, Any] = {"span_id": step.span_id}
    for name, value in (
        ("model", step.model),
        ("input_tokens", step.input_tokens),
        ("output_tokens", step.output_tokens),
        ("tool", step.tool),
        ("orphan_of", next((edge for edge in edges if edge not in known), None)),
    ):
        if value is not None:
            facts[name] = value
    facts.update(step.facts)
    if step.unmapped:
        facts["unmapped"] = list(step.unmapped)
    inputs, outputs = {**step.inputs, FACTS: facts}, dict(step.outputs)
    body = StepCreate(
        step_id=step_id_of(step.trace_id, step.span_id),
        step_kind=step.kind,
        agent=step.agent,
        summary_text=step.summary,
        inputs=inputs,
        outputs=outputs,
        pii_fields=PiiFields(inputs=sorted(step.inputs), outputs=sorted(step.outputs)),
        latency_ms=step.latency_ms,
        parent_step_ids=parents,
    )
    size = payload_bytes(body)  # as the flow service measures it, so the span is refused alone, not its batch
    if size > MAX_STEP_PAYLOAD_BYTES:
        raise PayloadTooLarge(f"its contents are {size} bytes; a step holds {MAX_STEP_PAYLOAD_BYTES} at most")
    return body


def _digest(purpose: str, value: str) -> bytes:
    return hashlib.sha256(f"flowledger.otlp.{purpose}\0{value}".encode()).digest()
