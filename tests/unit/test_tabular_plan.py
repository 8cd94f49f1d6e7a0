"""The tabular plan: its strict schema, its model, and its check against a table's typed columns."""

from __future__ import annotations

import hashlib
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowledger.api.errors import status_for
from flowledger.tabular import TABULAR_PLAN_SCHEMA, InvalidPlan, TabularColumn, check_plan, parse_plan, plan_fingerprint

COLUMNS = [
    TabularColumn(name="region", type="VARCHAR"),
    TabularColumn(name="amount", type="DOUBLE"),
    TabularColumn(name="quantity", type="BIGINT"),
    TabularColumn(name="day", type="DATE"),
    TabularColumn(name="paid", type="BOOLEAN"),
]


def plan(**parts: Any) -> dict[str, Any]:
    return {"filters": [], "group_by": [], "aggregates": [], "order_by": [], "limit": None, **parts}


def refusal(data: dict[str, Any]) -> InvalidPlan:
    with pytest.raises(InvalidPlan) as caught:
        check_plan(parse_plan(data), COLUMNS)
    return caught.value


def _objects(schema: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            found.append(schema)
        for value in schema.values():
            found += _objects(value)
    elif isinstance(schema, list):
        for value in schema:
            found += _objects(value)
    return found


def test_schema_is_strict_every_object_closed_and_fully_required() -> None:
    objects = _objects(TABULAR_PLAN_SCHEMA.schema)
    assert len(objects) == 4  # the plan, a filter, an aggregate, an order key
    for schema in objects:
        assert schema["additionalProperties"] is False
        assert sorted(schema["required"]) == sorted(schema["properties"])
    jsonschema.Draft202012Validator.check_schema(TABULAR_PLAN_SCHEMA.schema)


def test_a_plan_the_schema_accepts_the_model_accepts() -> None:
    data = plan(
        filters=[
            {"column": "region", "op": "in", "value": ["north", "south"]},
            {"column": "paid", "op": "is_null", "value": None},
        ],
        group_by=["region"],
        aggregates=[{"function": "count", "column": None, "alias": "n"}],
        order_by=[{"key": "n", "direction": "desc"}],
    )
    jsonschema.validate(data, TABULAR_PLAN_SCHEMA.schema)
    checked = check_plan(parse_plan(data), COLUMNS)
    assert checked.plan.limit == 100  # null is the default
    assert checked.output_names == ("region", "n")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({**plan(), "sql": "select 1"}, "sql"),  # no field beyond the schema's
        (plan(limit=0), "limit"),
        (plan(limit=1001), "limit"),
        (plan(limit=True), "limit"),  # a boolean is not a number
        (plan(filters=[{"column": "amount", "op": "like", "value": "%"}]), "filters.0.op"),
        (plan(aggregates=[{"function": "stddev", "column": "amount", "alias": "s"}]), "aggregates.0.function"),
        (plan(aggregates=[{"function": "sum", "column": "amount", "alias": "s; drop"}]), "aggregates.0.alias"),
        (plan(order_by=[{"key": "region", "direction": "up"}]), "order_by.0.direction"),
    ],
)
def test_shape_errors_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidPlan) as caught:
        parse_plan(data)
    assert caught.value.field.startswith(field)
    assert status_for(caught.value) == 422


def test_unknown_column_lists_the_table_and_suggests_the_near_name() -> None:
    error = refusal(plan(group_by=["Region"]))
    assert error.field == "group_by[0]"
    assert "did you mean 'region'" in error.reason
    assert "'amount' (DOUBLE)" in error.reason


def test_a_column_name_written_as_sql_is_just_an_unknown_name() -> None:
    error = refusal(plan(filters=[{"column": "read_csv('/etc/passwd')", "op": "not_null", "value": None}]))
    assert error.field == "filters[0].column"
    assert "no column \"read_csv('/etc/passwd')\"" in error.reason


@pytest.mark.parametrize("function", ["sum", "avg", "median"])
def test_numeric_aggregates_refuse_text_and_name_the_numeric_columns(function: str) -> None:
    error = refusal(plan(aggregates=[{"function": function, "column": "region", "alias": "x"}]))
    assert error.field == "aggregates[0].column"
    assert "needs a numeric column" in error.reason
    assert "'amount', 'quantity'" in error.reason


def test_min_and_count_distinct_apply_to_text() -> None:
    check_plan(
        parse_plan(
            plan(
                aggregates=[
                    {"function": "min", "column": "region", "alias": "first_region"},
                    {"function": "count_distinct", "column": "region", "alias": "regions"},
                ]
            )
        ),
        COLUMNS,
    )


def test_only_count_may_have_no_column() -> None:
    error = refusal(plan(aggregates=[{"function": "sum", "column": None, "alias": "s"}]))
    assert error.field == "aggregates[0].column"


@pytest.mark.parametrize(
    ("alias", "reason"),
    [("amount", "also a column name"), ("AMOUNT", "also a column name"), ("n", "used twice")],
)
def test_alias_clashes_are_refused(alias: str, reason: str) -> None:
    error = refusal(
        plan(
            aggregates=[
                {"function": "count", "column": None, "alias": "n"},
                {"function": "sum", "column": "amount", "alias": alias},
            ]
        )
    )
    assert error.field == "aggregates[1].alias"
    assert reason in error.reason


def test_group_column_twice_is_refused() -> None:
    assert refusal(plan(group_by=["region", "region"])).field == "group_by[1]"


def test_order_key_must_be_an_output_of_the_aggregate() -> None:
    error = refusal(
        plan(
            group_by=["region"],
            aggregates=[{"function": "sum", "column": "amount", "alias": "total"}],
            order_by=[{"key": "quantity", "direction": "asc"}],
        )
    )
    assert error.field == "order_by[0].key"
    assert "'region', 'total'" in error.reason


def test_rows_may_be_ordered_by_any_column() -> None:
    check_plan(parse_plan(plan(order_by=[{"key": "quantity", "direction": "desc"}])), COLUMNS)


@pytest.mark.parametrize(
    ("item", "field", "reason"),
    [
        ({"column": "amount", "op": ">", "value": "10"}, "filters[0].value", "compare it with a number"),
        ({"column": "amount", "op": "=", "value": True}, "filters[0].value", "compare it with a number"),
        ({"column": "region", "op": "=", "value": 3}, "filters[0].value", "compare it with a string"),
        ({"column": "day", "op": ">=", "value": "last week"}, "filters[0].value", "ISO date"),
        ({"column": "paid", "op": "<", "value": True}, "filters[0].op", "use = or !="),
        ({"column": "amount", "op": "contains", "value": "1"}, "filters[0].op", "needs a text column"),
        ({"column": "region", "op": "starts_with", "value": ""}, "filters[0].op", "non-empty string"),
        ({"column": "region", "op": "in", "value": "north"}, "filters[0].value", "non-empty list"),
        ({"column": "region", "op": "in", "value": []}, "filters[0].value", "non-empty list"),
        ({"column": "quantity", "op": "in", "value": [1, "2"]}, "filters[0].value[1]", "a number"),
        ({"column": "region", "op": "=", "value": ["a"]}, "filters[0].value", "use in for several"),
        ({"column": "region", "op": "is_null", "value": "x"}, "filters[0].value", "takes no value"),
        ({"column": "region", "op": "=", "value": None}, "filters[0].value", "use is_null"),
    ],
)
def test_filter_values_must_fit_the_column_type(item: dict[str, Any], field: str, reason: str) -> None:
    error = refusal(plan(filters=[item]))
    assert error.field == field
    assert reason in error.reason


def test_date_values_become_dates() -> None:
    checked = check_plan(
        parse_plan(plan(filters=[{"column": "day", "op": "in", "value": ["2024-01-02", "2024-02-03"]}])), COLUMNS
    )
    assert [value.isoformat() for value in checked.values[0]] == ["2024-01-02", "2024-02-03"]


def test_fingerprint_is_canonical_and_changes_with_the_plan() -> None:
    first = parse_plan(plan(group_by=["region"], limit=None))
    same = parse_plan({"limit": 100, "group_by": ["region"], "order_by": [], "aggregates": [], "filters": []})
    other = parse_plan(plan(group_by=["region"], limit=99))
    assert plan_fingerprint(first) == plan_fingerprint(same)
    assert plan_fingerprint(first) != plan_fingerprint(other)


def test_fingerprint_is_the_sha256_of_the_rfc8785_json() -> None:
    canonical = b'{"aggregates":[],"filters":[],"group_by":["region"],"limit":100,"order_by":[]}'
    assert plan_fingerprint(parse_plan(plan(group_by=["region"]))) == hashlib.sha256(canonical).hexdigest()


_values = st.one_of(
    st.text(max_size=20), st.integers(-(10**9), 10**9), st.floats(allow_nan=False, allow_infinity=False)
)


@given(st.lists(st.tuples(st.sampled_from(["=", "!=", "<", ">"]), _values), max_size=5))
def test_fingerprint_survives_a_json_round_trip(filters: list[tuple[str, Any]]) -> None:
    original = parse_plan(plan(filters=[{"column": "region", "op": op, "value": value} for op, value in filters]))
    replayed = parse_plan(original.model_dump(mode="json"))
    assert replayed == original
    assert plan_fingerprint(replayed) == plan_fingerprint(original)
