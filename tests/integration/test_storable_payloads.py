"""Any JSON a step may carry, through the reasoning function on moto: refused with a 422 that names
where, or stored and read back exactly; either way the flow can be closed afterwards."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples
from tests.integration import test_reasoning_routes as reasoning
from tests.integration.test_reasoning_routes import ADMIN, WRITER, Call, close, open_flow

call = reasoning.call  # the reasoning function's handler on moto, as a fixture here too

EDGE_NUMBERS = [
    0,
    -0.0,
    10**38 - 1,
    -(10**38 - 1),
    10**38,
    10**40,
    1e-130,
    -1e-130,
    math.nextafter(1e-130, 0),
    math.nextafter(1e126, 0),
    1e126,
    1e-200,
    5e-324,
    1.7976931348623157e308,
    1e16,
    float("nan"),
    float("inf"),
    float("-inf"),
]
# Any text that is valid Unicode and means something: no C0 control character but tab, LF and CR
# (the others are refused with a 422 before the schema runs; the hostile strategies below send them).
CONTROLS = "".join(chr(c) for c in range(32) if chr(c) not in "\t\n\r")
TEXT = st.text(st.characters(codec="utf-8", exclude_characters=CONTROLS), max_size=6)
# Within DynamoDB's limits by construction: these must be stored, and come back as they went.
STORABLE_NUMBERS = (
    st.integers(min_value=-(10**38 - 1), max_value=10**38 - 1)
    | st.floats(min_value=1e-130, max_value=math.nextafter(1e126, 0))
    | st.floats(min_value=-math.nextafter(1e126, 0), max_value=-1e-130)
    | st.sampled_from([0, 0.0, -0.0, 1e16, 1e-130, -1e-130, 10**38 - 1])
)
STORABLE = st.recursive(
    st.none() | st.booleans() | STORABLE_NUMBERS | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT.filter(bool), inner, max_size=3),
    max_leaves=10,
)
STORABLE_FIELDS = st.dictionaries(TEXT.filter(lambda k: k not in ("", "__sealed__")), STORABLE, max_size=4)
# Anything JSON can say, the hostile parts often: empty, reserved and broken keys, numbers out of range.
KEYS = TEXT | st.sampled_from(["", "a", "__sealed__", "\ud800", "nul\x00"])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**45), max_value=10**45)
    | st.floats()
    | st.sampled_from(EDGE_NUMBERS)
    | TEXT
    | st.sampled_from(["", "\ud800", "lone \udfff surrogate", "\x1b[31m red", "nul \x00 inside"])
)
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3), max_leaves=10
)
ANY_FIELDS = st.dictionaries(KEYS, JSON, max_size=4)
# Half the examples storable by construction (must be stored), half anything (stored or refused).
PAYLOADS = st.tuples(st.just(True), STORABLE_FIELDS, STORABLE_FIELDS) | st.tuples(
    st.just(False), ANY_FIELDS, ANY_FIELDS
)


def exact(value: Any) -> str:
    """A JSON text that tells 1 from 1.0 and 0.0 from -0.0, for comparing what came back."""
    return json.dumps(value, sort_keys=True, allow_nan=True)


def read_back(call: Call, flow_id: str) -> dict[str, Any]:
    """The flow's one step as the admin flow page reads it, each sealed field opened through its own route."""
    status, page, _ = call("GET", f"/admin/v1/reasoning/flows/{flow_id}/steps", user_arn=ADMIN)
    assert status == 200, page
    (step,) = page["steps"]
    for side in ("inputs", "outputs"):
        for field in step["pii_fields"][side]:
            route = f"/admin/v1/reasoning/flows/{flow_id}/steps/{step['step_id']}/sealed"
            status, opened, _ = call("GET", route, user_arn=ADMIN, side=side, field=field)
            assert status == 200, opened
            step[side][field] = opened["value"]
    return dict(step)


def add_step(call: Call, flow_id: str, body: dict[str, Any]) -> tuple[int, Any]:
    step = {"step_kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved passages", **body}
    status, answer, _ = call("POST", f"/api/reasoning/flows/{flow_id}/steps", step, WRITER)
    return status, answer


@settings(
    max_examples=examples(60),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(payload=PAYLOADS, seal_first=st.booleans())
# Ints, floats and -0.0 on both sides, sealed and not: each must come back as the type it went.
@example(payload=(True, {"n": 1, "x": [1.0, -0.0, 10**37]}, {"n": 2, "f": 1.5, "m": {"z": 0}}), seal_first=True)
@example(payload=(True, {"n": 1, "x": [1.0, -0.0, 10**37]}, {"n": 2, "f": 1.5, "m": {"z": 0}}), seal_first=False)
def test_any_json_payload_is_refused_with_422_or_read_back_exactly_and_the_flow_closes(
    call: Call, payload: tuple[bool, dict[str, Any], dict[str, Any]], seal_first: bool
) -> None:
    storable, inputs, outputs = payload
    flow_id = open_flow(call)
    # Sealing the first input (when it has a name that could be declared) takes the PII path too.
    pii = [k for k in list(inputs)[:1] if k != "\ud800"] if seal_first else []
    status, answer = add_step(call, flow_id, {"inputs": inputs, "outputs": outputs, "pii_fields": {"inputs": pii}})
    assert status in ((201,) if storable else (201, 422)), answer
    if status == 422:
        assert answer["error"] == "validation_error"
        assert {f["type"] for f in answer["fields"]} <= {"not_storable", "reserved_key", "control_character"}, answer[
            "fields"
        ]
        assert all(f["loc"][:2] in (["body", "inputs"], ["body", "outputs"]) for f in answer["fields"])
    else:
        step = read_back(call, flow_id)
        assert (exact(step["inputs"]), exact(step["outputs"])) == (exact(inputs), exact(outputs))
    closed, body = close(call, flow_id)
    assert closed == 200, body


@pytest.mark.parametrize(
    ("body", "loc", "kind"),
    [
        ({"inputs": {"": 1}}, ["body", "inputs", ""], "not_storable"),
        ({"inputs": {"a": {"": "x"}}}, ["body", "inputs", "a", ""], "not_storable"),
        ({"outputs": {"n": 10**40}}, ["body", "outputs", "n"], "not_storable"),
        ({"outputs": {"n": [1, float("nan")]}}, ["body", "outputs", "n", 1], "not_storable"),
        ({"inputs": {"tiny": 1e-200}}, ["body", "inputs", "tiny"], "not_storable"),
        ({"inputs": {"text": "a\ud800"}}, ["body", "inputs", "text"], "not_storable"),
        ({"confidence": 1e-200}, ["body", "confidence"], "not_storable"),
        ({"inputs": {"x": {"__sealed__": "v1"}}}, ["body", "inputs", "x", "__sealed__"], "reserved_key"),
    ],
    ids=["empty-key", "nested-empty-key", "40-digits", "nan", "1e-200", "lone-surrogate", "confidence", "sealed"],
)
def test_a_step_dynamodb_cannot_hold_is_a_422_naming_where_without_the_value(
    call: Call, body: dict[str, Any], loc: list[Any], kind: str
) -> None:
    flow_id = open_flow(call)
    status, answer = add_step(call, flow_id, body)
    assert status == 422, answer
    assert [(f["loc"], f["type"]) for f in answer["fields"]] == [(loc, kind)]
    assert "input" not in answer["fields"][0]
    assert close(call, flow_id)[0] == 200


def test_a_close_whose_confidence_dynamodb_cannot_hold_is_a_422_and_a_good_close_still_works(call: Call) -> None:
    flow_id = open_flow(call)
    outcome = {"type": "recommendation_delivered", "summary": "Recommended a follow-up test", "confidence": 1e-200}
    status, answer, _ = call(
        "PATCH", f"/api/reasoning/flows/{flow_id}", {"state": "completed", "outcome": outcome}, WRITER
    )
    assert (status, [f["loc"] for f in answer["fields"]]) == (422, [["body", "outcome", "confidence"]])
    assert close(call, flow_id)[0] == 200


def test_numbers_at_dynamodbs_limits_are_stored_and_read_back_exactly(call: Call) -> None:
    edges = {
        "largest_int": 10**38 - 1,
        "smallest_int": -(10**38 - 1),
        "tiny": 1e-130,
        "negative_tiny": -1e-130,
        "largest_float": math.nextafter(1e126, 0),
        "negative_zero": -0.0,
        "integral_float": 1e16,
    }
    flow_id = open_flow(call)
    assert add_step(call, flow_id, {"inputs": edges, "pii_fields": {"inputs": ["tiny"]}})[0] == 201
    assert exact(read_back(call, flow_id)["inputs"]) == exact(edges)
    assert close(call, flow_id)[0] == 200
