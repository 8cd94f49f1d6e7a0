"""The order a table answer is shown in: group keys ascending, unless the question ranks."""

from __future__ import annotations

import pytest

from flowledger.tabular.order import answer_size, asks_for_ranking, in_answer_order
from flowledger.tabular.plan import parse_plan

BY_TOTAL = {
    "filters": [],
    "group_by": ["month", "region"],
    "aggregates": [{"function": "sum", "column": "amount", "alias": "total"}],
    "order_by": [{"key": "total", "direction": "desc"}],
    "limit": 3,
}


@pytest.mark.parametrize(
    ("query", "ranks"),
    [
        ("total amount by month", False),
        ("now break that down by region", False),
        ("top 3 regions by amount", True),
        ("which stores sold the most?", True),
        ("regions sorted by total", True),
        ("stores ordered by amount", True),
        ("the first 5 months", True),
    ],
)
def test_a_question_ranks_only_when_it_says_so(query: str, ranks: bool) -> None:
    assert asks_for_ranking(query) is ranks


def test_a_breakdown_is_ordered_by_its_group_keys_ascending() -> None:
    plan = in_answer_order(parse_plan(BY_TOTAL), "total by month and region")
    assert [(k.key, k.direction) for k in plan.order_by] == [("month", "asc"), ("region", "asc")]


def test_a_ranking_keeps_the_models_order_and_its_size() -> None:
    plan = parse_plan(BY_TOTAL)
    assert in_answer_order(plan, "top 3 month and region pairs") == plan
    assert answer_size(plan, "top 3 month and region pairs", 20) == 3  # the three asked for: not cut
    assert answer_size(plan, "total by month and region", 20) == 20  # a cap the answer ran into: cut


def test_a_plan_without_groups_keeps_its_order() -> None:
    by_amount = [{"key": "amount", "direction": "desc"}]
    rows = parse_plan({**BY_TOTAL, "group_by": [], "aggregates": [], "order_by": by_amount})
    assert in_answer_order(rows, "list the rows") == rows
