"""Table answers as tables, through ``POST /api/chat`` with continuity on and the offline model: the
result as data beside the text, rows in the plan's key order, a cut said as "N of M" with coverage
below 1, and a follow-up that keeps the previous plan whether it comes from history or the selection."""

from __future__ import annotations

from typing import Any

from flowledger.chat.runs import RunStore
from flowledger.local.demo_table import MONTHS, demo_sales_csv
from tests.integration.test_continuity_edges import rows_csv
from tests.integration.test_continuity_turns import ANN, World, follow, table_turn
from tests.integration.test_continuity_turns import world as world  # the fixture

REGIONS = ["east", "north", "south", "west"]


def only_table(outcome: dict[str, Any]) -> dict[str, Any]:
    [table] = outcome["content"]["tables"]
    return dict(table)


def coverage(outcome: dict[str, Any]) -> float:
    [source] = outcome["content"]["source_context"]["sources"]
    return float(source["coverage"])


def test_a_grouping_answers_with_its_rows_as_data_in_key_order(world: World) -> None:
    table = world.upload(world.workspace(), "demo-sales.csv", demo_sales_csv())
    outcome = table_turn(world, ANN, table, "total amount by month")
    result = only_table(outcome)
    assert result["columns"] == ["month", "total_amount"]
    assert [row[0] for row in result["rows"]] == list(MONTHS)  # by month, not by the total
    assert (result["total_rows"], result["rows_shown"], coverage(outcome)) == (5, 5, 1.0)
    assert " of " not in (outcome["content"]["limitations"] or "").replace("Quoted from", "")
    # Reloaded from the history, the answer is the same table.
    [run] = RunStore(world.services).list_runs("ann", outcome["session_id"], 10, None).runs
    assert run.content is not None and run.content.tables[0].rows == result["rows"]


def test_a_history_follow_up_breaks_the_previous_grouping_down(world: World) -> None:
    table = world.upload(world.workspace(), "demo-sales.csv", demo_sales_csv())
    first = table_turn(world, ANN, table, "total amount by month")
    second = world.ask(ANN, follow(first, "now break that down by region"))
    result = only_table(second)
    assert result["columns"] == ["month", "region", "total_amount"]
    assert [row[:2] for row in result["rows"]] == [[m, r] for m in MONTHS for r in REGIONS]
    assert (result["total_rows"], result["rows_shown"], coverage(second)) == (20, 20, 1.0)


def test_a_follow_up_with_the_table_still_selected_keeps_the_previous_grouping(world: World) -> None:
    table = world.upload(world.workspace(), "demo-sales.csv", demo_sales_csv())
    first = table_turn(world, ANN, table, "total amount by month")
    still_selected = {"selection_mode": "selected", "document_ids": [table.document_id]}
    second = world.ask(ANN, follow(first, "now break that down by region", **still_selected))
    assert second["content"]["source_context"]["basis"] == "selected"
    result = only_table(second)
    assert result["columns"] == ["month", "region", "total_amount"]
    assert result["total_rows"] == 20


def test_a_cut_table_says_how_many_of_how_many_rows_and_is_partly_covered(world: World) -> None:
    # 120 stores: past the plan's default limit (100), so the total is counted, not the rows fetched.
    table = world.upload(world.workspace(), "stores.csv", rows_csv(120))
    outcome = table_turn(world, ANN, table, "total amount by store")
    result = only_table(outcome)
    assert (result["rows_shown"], result["total_rows"]) == (50, 120)
    stores = [row[0] for row in result["rows"]]
    assert stores == sorted(f"store-{n}" for n in range(120))[:50]  # the first 50 in key order, not by amount
    assert "stores.csv: the table shows 50 of 120 rows." in outcome["content"]["limitations"]
    assert 0 < coverage(outcome) < 1
