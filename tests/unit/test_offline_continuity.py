"""The offline model's continuity rules, through ``OfflineChatModel.complete`` with the real schemas: the plans
it writes run for real on DuckDB and answer what the question asked; its history assessment is the one a
cautious reader would give, and ``assess`` accepts it."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter, defaultdict
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowledger.continuity.refs import GroundedRef
from flowledger.continuity.sufficiency import HISTORY_ASSESSMENT_SCHEMA, SufficiencyReason, assess
from flowledger.llm.offline import OfflineChatModel
from flowledger.llm.ports import JsonSchema, Message, ModelInvalidOutput
from flowledger.tabular import (
    DEFAULT_LIMITS,
    TABULAR_PLAN_SCHEMA,
    ConvertedTable,
    TabularColumn,
    TabularResult,
    check_plan,
    convert_table,
    parse_plan,
    run_plan,
)
from tests.hypothesis_profiles import examples
from tests.unit.test_continuity_refs import ref_fields

MODEL = OfflineChatModel()
REGIONS = ["north", "south", "east"]
STORES = ["alpha", "beta"]
MONTHS = ["2024-01", "2024-02", "2024-03"]
# 18 rows: every region x store x month once, amounts all different so sums and orders are unambiguous.
SALES: list[dict[str, Any]] = [
    {"region": region, "store": store, "month": month, "amount": 10 * (i + 1) + i % 7, "units": i % 4}
    for i, (region, store, month) in enumerate((r, s, m) for r in REGIONS for s in STORES for m in MONTHS)
]


@pytest.fixture(scope="module")
def sales() -> ConvertedTable:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(SALES[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(SALES)
    return convert_table(out.getvalue().encode(), "csv", DEFAULT_LIMITS)


def columns_of(table: ConvertedTable) -> list[dict[str, str]]:
    return [column.model_dump() for column in table.columns]


def ask(schema: JsonSchema, request: dict[str, Any]) -> dict[str, Any]:
    """The offline model's object for ``request``, checked against the schema's own JSON Schema."""
    reply = MODEL.complete([Message("user", json.dumps(request))], schema=schema, timeout_seconds=5)
    assert reply.data is not None
    jsonschema.validate(reply.data, schema.schema)
    return reply.data


def plan_for(table: ConvertedTable, query: str, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    return ask(TABULAR_PLAN_SCHEMA, {"query": query, "columns": columns_of(table), "previous_plan": previous})


def run(table: ConvertedTable, data: dict[str, Any]) -> TabularResult:
    return run_plan(table.parquet, parse_plan(data), table.columns, DEFAULT_LIMITS)


def sums(*keys: str) -> dict[tuple[Any, ...], int]:
    totals: dict[tuple[Any, ...], int] = defaultdict(int)
    for row in SALES:
        totals[tuple(row[key] for key in keys)] += row["amount"]
    return totals


# ---- tabular_plan ---------------------------------------------------------------------------------


def test_total_amount_by_region_sums_each_region_largest_first(sales: ConvertedTable) -> None:
    data = plan_for(sales, "total amount by region")
    assert data["group_by"] == ["region"]
    assert data["aggregates"] == [{"function": "sum", "column": "amount", "alias": "total_amount"}]
    result = run(sales, data)
    expected = sorted(((region, total) for (region,), total in sums("region").items()), key=lambda r: -r[1])
    assert result.columns == ["region", "total_amount"]
    assert [tuple(row) for row in result.rows] == expected


def test_break_that_down_by_region_refines_the_previous_plan(sales: ConvertedTable) -> None:
    previous = {
        "filters": [{"column": "store", "op": "=", "value": "alpha"}],
        "group_by": ["month"],
        "aggregates": [{"function": "sum", "column": "amount", "alias": "monthly_amount"}],
        "order_by": [{"key": "month", "direction": "asc"}],
        "limit": 50,
    }
    data = plan_for(sales, "Now break that down by region", previous)
    assert data["group_by"] == ["month", "region"]
    assert data["aggregates"] == previous["aggregates"]  # kept, not recomputed under a new alias
    assert data["filters"] == previous["filters"]
    assert data["limit"] == 50
    result = run(sales, data)
    alpha = defaultdict(int)
    for row in SALES:
        if row["store"] == "alpha":
            alpha[(row["month"], row["region"])] += row["amount"]
    assert {(month, region): total for month, region, total in result.rows} == alpha
    assert [row[2] for row in result.rows] == sorted(alpha.values(), reverse=True)


def test_how_many_rows_counts_them(sales: ConvertedTable) -> None:
    data = plan_for(sales, "How many rows are there?")
    assert data["aggregates"] == [{"function": "count", "column": None, "alias": "rows"}]
    assert run(sales, data).rows == [[len(SALES)]]


def test_number_of_rows_per_store_counts_each_store(sales: ConvertedTable) -> None:
    result = run(sales, plan_for(sales, "number of rows per store"))
    assert result.columns == ["store", "rows"]
    assert {store: count for store, count in result.rows} == Counter(row["store"] for row in SALES)


def test_average_and_highest_of_the_named_numeric_column(sales: ConvertedTable) -> None:
    data = plan_for(sales, "average and highest units for each month")
    assert [(a["function"], a["column"], a["alias"]) for a in data["aggregates"]] == [
        ("avg", "units", "avg_units"),
        ("max", "units", "max_units"),
    ]
    result = run(sales, data)
    for month, average, highest in result.rows:
        units = [row["units"] for row in SALES if row["month"] == month]
        assert (average, highest) == (pytest.approx(sum(units) / len(units)), max(units))


def test_mean_as_the_closing_verb_is_not_an_average(sales: ConvertedTable) -> None:
    assert plan_for(sales, "what does the amount mean?")["aggregates"] == []
    assert plan_for(sales, "the mean amount")["aggregates"] == [
        {"function": "avg", "column": "amount", "alias": "avg_amount"}
    ]


def test_lowest_amount_without_a_named_column_uses_the_first_numeric_column(sales: ConvertedTable) -> None:
    data = plan_for(sales, "what is the lowest value")
    assert data["aggregates"] == [{"function": "min", "column": "amount", "alias": "min_amount"}]
    assert run(sales, data).rows == [[min(row["amount"] for row in SALES)]]


def test_a_grouping_without_an_aggregate_gets_a_count_and_a_sum(sales: ConvertedTable) -> None:
    data = plan_for(sales, "show it per store")
    assert data["aggregates"] == [
        {"function": "count", "column": None, "alias": "rows"},
        {"function": "sum", "column": "amount", "alias": "total_amount"},
    ]
    totals = sums("store")
    assert {store: (count, total) for store, count, total in run(sales, data).rows} == {
        store: (9, totals[(store,)]) for store in STORES
    }


def test_an_aggregate_the_plan_already_has_is_not_added_twice(sales: ConvertedTable) -> None:
    first = plan_for(sales, "total amount by month")
    again = plan_for(sales, "and the total amount by store", first)
    assert again["aggregates"] == first["aggregates"]
    assert again["group_by"] == ["month", "store"]
    assert sum(row[2] for row in run(sales, again).rows) == sum(row["amount"] for row in SALES)


def test_unknown_column_words_add_nothing(sales: ConvertedTable) -> None:
    data = plan_for(sales, "break it down by colour, for each warehouse")
    assert data == {"filters": [], "group_by": [], "aggregates": [], "order_by": [], "limit": 100}
    assert len(run(sales, data).rows) == len(SALES)  # the plan lists the rows


def test_a_numeric_column_is_never_a_grouping(sales: ConvertedTable) -> None:
    assert plan_for(sales, "by amount")["group_by"] == []


def test_plural_and_spaced_column_words_match(sales: ConvertedTable) -> None:
    table = convert_table(b"sales_region,net_amount\nnorth,1\nsouth,2\nnorth,3\n", "csv", DEFAULT_LIMITS)
    data = plan_for(table, "total net amount per sales regions")
    assert data["group_by"] == ["sales_region"]
    assert data["aggregates"] == [{"function": "sum", "column": "net_amount", "alias": "total_net_amount"}]
    assert sorted(run(table, data).rows) == [["north", 4], ["south", 2]]


def test_where_column_is_value_filters_on_that_column(sales: ConvertedTable) -> None:
    data = plan_for(sales, "total amount by month where region is south")
    assert data["filters"] == [{"column": "region", "op": "=", "value": "south"}]
    south = sums("region", "month")
    assert {month: total for month, total in run(sales, data).rows} == {m: south[("south", m)] for m in MONTHS}


def test_a_quoted_value_is_compared_without_its_quotes(sales: ConvertedTable) -> None:
    data = plan_for(sales, 'how many rows where store is "beta"')
    assert data["filters"] == [{"column": "store", "op": "=", "value": "beta"}]
    assert run(sales, data).rows == [[9]]


def test_only_value_column_replaces_the_previous_equality_and_keeps_the_value_as_written(
    sales: ConvertedTable,
) -> None:
    previous = plan_for(sales, "total amount by month where region is north")
    data = plan_for(sales, "now only the east region", previous)
    assert data["filters"] == [{"column": "region", "op": "=", "value": "east"}]
    assert sum(row[1] for row in run(sales, data).rows) == sums("region")[("east",)]
    capitalised = plan_for(sales, "only the East region")
    assert capitalised["filters"] == [{"column": "region", "op": "=", "value": "East"}]
    assert run(sales, capitalised).rows == []  # "=" on text is exact: the offline model does not guess case


def test_an_addition_the_table_refuses_is_left_out() -> None:
    table = convert_table(b"day,amount\n2024-01-02,5\n2024-01-03,7\n", "csv", DEFAULT_LIMITS)
    assert [column.type for column in table.columns] == ["DATE", "BIGINT"]
    data = plan_for(table, "total amount where day is tomorrow")  # not an ISO date: check_plan would refuse it
    assert data["filters"] == []
    assert run(table, data).rows == [[12]]
    dated = plan_for(table, "total amount where day is 2024-01-03")
    assert run(table, dated).rows == [[7]]


def test_a_value_without_a_named_column_adds_no_filter(sales: ConvertedTable) -> None:
    assert plan_for(sales, "only north please")["filters"] == []
    assert plan_for(sales, "where colour is red")["filters"] == []


def test_more_than_n_filters_the_named_numeric_column(sales: ConvertedTable) -> None:
    data = plan_for(sales, "rows with amount more than 100")
    assert data["filters"] == [{"column": "amount", "op": ">", "value": 100}]
    result = run(sales, data)
    position = result.columns.index("amount")
    assert sorted(row[position] for row in result.rows) == sorted(r["amount"] for r in SALES if r["amount"] > 100)
    assert plan_for(sales, "and still amount over 100", data) == data  # the same filter is not added twice
    assert plan_for(sales, "units at least 2")["filters"] == [{"column": "units", "op": ">=", "value": 2}]


def test_a_number_without_a_named_numeric_column_adds_no_filter(sales: ConvertedTable) -> None:
    assert plan_for(sales, "stores with more than 100")["filters"] == []


def test_aliases_never_clash_with_columns(sales: ConvertedTable) -> None:
    table = convert_table(b"region,rows,total_amount,amount\nnorth,1,2,3\nsouth,4,5,6\n", "csv", DEFAULT_LIMITS)
    data = plan_for(table, "how many, and the total amount, by region")
    assert [a["alias"] for a in data["aggregates"]] == ["total_amount_2", "rows_2"]
    assert sorted(run(table, data).rows) == [["north", 3, 1], ["south", 6, 1]]


def test_a_previous_plan_that_does_not_fit_the_table_is_not_carried_over(sales: ConvertedTable) -> None:
    stale = {"filters": [], "group_by": ["product"], "aggregates": [], "order_by": [], "limit": 7}
    assert plan_for(sales, "total amount", stale) == {
        "filters": [],
        "group_by": [],
        "aggregates": [{"function": "sum", "column": "amount", "alias": "total_amount"}],
        "order_by": [{"key": "total_amount", "direction": "desc"}],
        "limit": 100,
    }


def test_without_columns_the_input_is_refused() -> None:
    with pytest.raises(ModelInvalidOutput):
        MODEL.complete(
            [Message("user", json.dumps({"query": "total", "columns": "amount"}))],
            schema=TABULAR_PLAN_SCHEMA,
            timeout_seconds=5,
        )


_VOCABULARY = [
    *("total", "sum", "average", "mean", "how many", "count", "number of", "highest", "max", "lowest", "min"),
    *("by", "per", "for each", "broken down by", "break that down by", "only", "where", "is", "the", "over"),
    *("more than", "at most", "region", "regions", "store", "month", "amount", "units", "rows", "colour", "100"),
    *("north", '"South"', "2024-01", "-3.5", "1,000", "?", ","),
]


PROPERTY_COLUMNS = [("region", "VARCHAR"), ("store", "VARCHAR"), ("month", "DATE"), ("amount", "DOUBLE")]
PROPERTY_COLUMNS += [("units", "BIGINT"), ("rows", "BIGINT")]  # a column named like the count's alias


@settings(max_examples=examples(300), deadline=None)
@given(words=st.lists(st.sampled_from(_VOCABULARY), max_size=14), refine=st.booleans())
def test_every_plan_passes_check_plan(words: list[str], refine: bool) -> None:
    columns = [TabularColumn(name=name, type=kind) for name, kind in PROPERTY_COLUMNS]
    query = " ".join(words)
    request: dict[str, Any] = {"query": query, "columns": [c.model_dump() for c in columns], "previous_plan": None}
    first = ask(TABULAR_PLAN_SCHEMA, request)
    check_plan(parse_plan(first), columns)
    if refine:  # the same question asked on its own answer changes nothing: no duplicate grows the plan
        assert ask(TABULAR_PLAN_SCHEMA, {**request, "previous_plan": first}) == first


# ---- history_assessment ---------------------------------------------------------------------------

TABLE_SOURCE = {"file_name": "sales.csv", "kind": "tabular", "evidence": "completed"}
TEXT_SOURCE = {"file_name": "policy.pdf", "kind": "narrative", "evidence": "completed"}
REGION_TOTALS = {"group_by": ["region"], "aggregates": ["sum(amount)"], "filters": []}


def decide(follow_up: str, sources: list[dict[str, str]], plan: dict[str, Any] | None = None) -> dict[str, Any]:
    return ask(
        HISTORY_ASSESSMENT_SCHEMA,
        {"follow_up": follow_up, "previous_sources": sources, "previous_table_plan": plan},
    )


def test_a_rephrase_needs_no_source() -> None:
    assert decide("  Can you make that shorter?  ", [TABLE_SOURCE, TEXT_SOURCE], REGION_TOTALS) == {
        "decision": "none",
        "standalone_query": "Can you make that shorter?",
    }


def test_a_new_grouping_on_a_table_is_tabular() -> None:
    assert decide("and by store?", [TABLE_SOURCE, TEXT_SOURCE], REGION_TOTALS)["decision"] == "tabular"


def test_a_new_total_with_a_textual_question_is_both() -> None:
    follow_up = "What is the average amount, and why does the policy cap it?"
    assert decide(follow_up, [TABLE_SOURCE, TEXT_SOURCE], REGION_TOTALS)["decision"] == "both"
    assert decide(follow_up, [TABLE_SOURCE], REGION_TOTALS)["decision"] == "tabular"  # no text to search


def test_what_the_previous_plan_already_computed_is_not_computation() -> None:
    # By region with a sum is what the previous plan did: nothing to recompute, so the text is searched.
    assert decide("so the total by region?", [TABLE_SOURCE, TEXT_SOURCE], REGION_TOTALS)["decision"] == "narrative"
    assert decide("so the total by region?", [TABLE_SOURCE, TEXT_SOURCE], None)["decision"] == "tabular"


def test_a_narrative_prior_is_searched_again() -> None:
    assert decide("who approves the exceptions?", [TEXT_SOURCE])["decision"] == "narrative"
    assert decide("and by store?", [TEXT_SOURCE])["decision"] == "narrative"  # no table to group


def test_a_table_only_prior_without_computation_is_tabular_and_no_prior_is_a_search() -> None:
    assert decide("which one stands out?", [TABLE_SOURCE], REGION_TOTALS)["decision"] == "tabular"
    assert decide("which one stands out?", [])["decision"] == "narrative"


def test_an_empty_follow_up_is_refused() -> None:
    with pytest.raises(ModelInvalidOutput):
        decide("   ", [TEXT_SOURCE])


def test_assess_accepts_the_offline_answer() -> None:
    table = GroundedRef.model_validate(ref_fields(plan_fingerprint="a" * 64))
    policy = GroundedRef.model_validate(
        ref_fields(file_name="policy.pdf", extension=".pdf", source_kind="narrative", last_engine="narrative")
    )
    decision = assess("who signs off on refunds?", [table, policy], None, MODEL)
    assert (decision.decision, decision.reason, decision.rewrite) == (
        "narrative",
        SufficiencyReason.MODEL_ASSESSMENT,
        "who signs off on refunds?",
    )
    assert decision.model_calls == 1
