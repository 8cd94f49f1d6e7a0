"""The order a table answer's rows are shown in: the plan's group keys ascending, unless the question ranks.

A model filling the plan tends to order a grouping by its aggregate ("total by month" sorted by the total);
read as a table, a breakdown is easier to follow in key order (months in sequence, regions by name). Only a
question that asks for a ranking (top five, highest, sorted by) keeps the model's order, and only there is
the plan's limit the answer's size rather than a cap on it.
"""

from __future__ import annotations

import re

from flowledger.tabular.plan import DEFAULT_LIMIT, OrderKey, TabularPlan

_RANKING = re.compile(
    r"\b(?:top|bottom|highest|lowest|largest|smallest|biggest|greatest|most|least|fewest|best|worst|"
    r"rank|ranked|ranking|sort|sorted|order(?:ed)?\s+by|descending|ascending|first\s+\d+|last\s+\d+)\b",
    re.IGNORECASE,
)


def asks_for_ranking(query: str) -> bool:
    """Whether the question asks for rows in an order of its own (a top-N, a sort), not a breakdown."""
    return _RANKING.search(query) is not None


def in_answer_order(plan: TabularPlan, query: str) -> TabularPlan:
    """``plan`` ordered by its group keys ascending, unless ``query`` asks for a ranking or nothing is grouped."""
    if not plan.group_by or asks_for_ranking(query):
        return plan
    keys = [OrderKey(key=name, direction="asc") for name in plan.group_by]
    return plan if plan.order_by == keys else plan.model_copy(update={"order_by": keys})


def answer_size(plan: TabularPlan, query: str, matched: int) -> int:
    """How many rows the answer has: every row the plan matched, or, for a ranking that named its size
    (a limit other than the default), at most that many."""
    if asks_for_ranking(query) and plan.limit != DEFAULT_LIMIT:
        return min(matched, plan.limit)
    return matched
