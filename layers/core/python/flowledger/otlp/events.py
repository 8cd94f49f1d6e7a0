"""An OpenTelemetry log record read as a step of its span's flow: a ``gen_ai.evaluation.result`` event becomes a
recorded evaluation of the step it judges (its name, score and label as facts, its explanation sealed), any
other event (``gen_ai.choice``, ``gen_ai.user.message``...) a step of kind ``event`` with its body sealed.

The record's step hangs from its span's step (the span id is its parent), so the flow shows each evaluation
beside the model call or tool it is about. A record carries no id of its own: its step id is a digest of the
record as sent, so a record sent twice (an exporter's retry) is the same step, written once. A record outside a
span (no trace or span id) has no step to belong to and is refused, by its position in the request.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from flowledger.otlp.mapping import SpanRefused, SpanStep, agent_of, attributes, safe_name, sorted_out, value_of
from flowledger.reasoning.guard import check_summary

EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_KIND = "evaluation"
EVENT_KIND = "event"
# The evaluation's facts; its explanation is free text, so it is sealed.
EVALUATION_FACTS = ("gen_ai.evaluation.name", "gen_ai.evaluation.score.value", "gen_ai.evaluation.score.label")
EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"
SEALED_BODY = "body"


def record_step(record: LogRecord, resource: Mapping[str, Any]) -> SpanStep:
    """The step ``record`` is; :class:`SpanRefused` when it belongs to no span."""
    if len(record.trace_id) != 16 or not any(record.trace_id):
        raise SpanRefused("a log record outside a trace has no flow to belong to")
    if len(record.span_id) != 8 or not any(record.span_id):
        raise SpanRefused("a log record outside a span has no step to belong to")
    trace_id, span_id = record.trace_id.hex(), record.span_id.hex()
    attrs = attributes(record.attributes)
    event = record.event_name or attrs.get("event.name")
    name = safe_name(event) or ""
    own_id = hashlib.sha256(b"flowledger.otlp.record\0" + record.SerializeToString(deterministic=True)).hexdigest()
    if event == EVALUATION_EVENT:
        return _evaluation(record, attrs, trace_id, span_id, own_id[:16], resource)
    inputs, outputs, unmapped = sorted_out({k: v for k, v in attrs.items() if k != "event.name"})
    if record.HasField("body"):
        outputs[SEALED_BODY] = value_of(record.body)
    summary = f"Event {name}" if name and check_summary(f"Event {name}").safe else "Event"
    return SpanStep(
        trace_id=trace_id,
        span_id=own_id[:16],
        parent_span_id=span_id,
        linked_span_ids=(),
        kind=EVENT_KIND,
        agent=agent_of(attrs, resource),
        summary=summary,
        inputs=inputs,
        outputs=outputs,
        unmapped=unmapped,
        facts={"event": name} if name else {},
    )


def _evaluation(
    record: LogRecord, attrs: Mapping[str, Any], trace_id: str, span_id: str, own_id: str, resource: Mapping[str, Any]
) -> SpanStep:
    evaluation = safe_name(attrs.get("gen_ai.evaluation.name"))
    label = safe_name(attrs.get("gen_ai.evaluation.score.label"))
    score = attrs.get("gen_ai.evaluation.score.value")
    score = score if isinstance(score, int | float) and not isinstance(score, bool) and math.isfinite(score) else None
    text = f"Evaluation {evaluation}" if evaluation else "Evaluation"
    if score is not None:
        text += f": {score:g}"
    if label:
        text += f" ({label})" if score is not None else f": {label}"
    facts = {
        key: value
        for key, value in (("evaluation", evaluation), ("score", score), ("label", label))
        if value is not None
    }
    outputs: dict[str, Any] = {}
    if EVALUATION_EXPLANATION in attrs:
        outputs[EVALUATION_EXPLANATION] = attrs[EVALUATION_EXPLANATION]
    if record.HasField("body"):
        outputs[SEALED_BODY] = value_of(record.body)
    known = {*EVALUATION_FACTS, EVALUATION_EXPLANATION, "event.name", "gen_ai.response.id", "error.type"}
    return SpanStep(
        trace_id=trace_id,
        span_id=own_id,
        parent_span_id=span_id,
        linked_span_ids=(),
        kind=EVALUATION_KIND,
        agent=agent_of(attrs, resource),
        summary=text if check_summary(text).safe else "Evaluation",
        failed="error.type" in attrs,
        outputs=outputs,
        unmapped=tuple(sorted(key for key in attrs if key not in known)),
        facts=facts,
    )
