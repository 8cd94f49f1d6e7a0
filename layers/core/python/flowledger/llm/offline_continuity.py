"""The offline model's rules for the continuity calls: ``history_assessment`` and ``tabular_plan``.

Both are word rules, deterministic and explainable; neither rewrites or reasons. They exist so that
``flowledger serve`` answers follow-ups and table questions with no real model configured.

``history_assessment`` (input: ``continuity.sufficiency._prompt``) reads the follow-up as a cautious
reader would, in this order:

1. it asks about the previous answer only (``asks_to_rephrase``: rephrase, shorter, what it means): ``none``;
2. it asks for computation (a new grouping, filter or total against the previous plan, by the
   sufficiency rules, or a comparison word) and a previous source is a table: ``tabular``, or ``both``
   when a previous source is narrative too and the follow-up also asks something textual (a word of
   ``_TEXTUAL``: why, policy, explain, reason, rule, ...);
3. a previous source is narrative: ``narrative``;
4. a previous source is a table: ``tabular``; no previous source at all: ``narrative`` (a search, as the
   sufficiency rules fall back to when no source remains).

``standalone_query`` is the follow-up itself, stripped: the offline model cannot rewrite.

``tabular_plan`` (input: ``{"query", "columns": [{"name", "type"}], "previous_plan"}``) builds a plan
that ``check_plan`` accepts against those columns. Column words are split on ``_``, ``-`` and spaces,
singular and plural alike (``sales_regions`` is {sale, region}). From the previous plan when it still
fits the columns (a follow-up refines it), else from an empty plan:

- group by: ``by X``, ``per X``, ``for each X``, ``grouped by X``, ``broken down by X``, ``break that
  down by X`` add the text, date, timestamp or time column X names; an unknown or numeric X adds nothing;
- aggregates: ``total``/``sum`` sum, ``average``/``avg``/``mean`` avg (``mean`` not as the query's last
  word, where it is the verb), ``how many``/``count``/``number of`` count of rows (alias ``rows``),
  ``highest``/``max``/``maximum`` max, ``lowest``/``min``/``minimum`` min; over the numeric column the
  query names, else the first numeric column; aliased ``total_<column>``, ``avg_<column>``,
  ``max_<column>``, ``min_<column>``; one the plan already computes is not added twice;
- a grouping with no aggregate at all gets a count of rows and the sum of the first numeric column;
- filters: ``where <column> is <value>`` (or ``=``, ``equals``) and ``only [for|in] [the] <value>
  <column>`` add ``=`` on that text or date column, replacing an ``=`` the plan had on it;
  ``more than``/``over``/``above``/``greater than N`` add ``>``, ``less than``/``under``/``below`` add
  ``<``, ``at least`` ``>=``, ``at most`` ``<=``, only on a numeric column the query names. Anything
  less clear adds nothing: the plan then lists rows;
- order: the first aggregate descending when there are aggregates, else the previous order;
  limit: the previous plan's, else 100.

Each addition is kept only if the plan still passes ``check_plan`` (bounds, types, aliases).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from flowledger.continuity.sufficiency import (
    MAX_REWRITE_CHARS,
    Decision,
    asks_to_rephrase,
    new_filter,
    new_grouping,
    new_total,
)
from flowledger.llm.ports import ModelInvalidOutput
from flowledger.tabular.columns import TabularColumn
from flowledger.tabular.errors import InvalidPlan
from flowledger.tabular.plan import (
    AGGREGATE_FUNCTIONS,
    DEFAULT_LIMIT,
    FILTER_OPS,
    TabularPlan,
    check_plan,
    parse_plan,
)

# ---- history_assessment ---------------------------------------------------------------------------

_COMPARISON = re.compile(r"\b(?:compare|compared|versus|vs|difference|percent|percentage|ratio|growth|trend)\b")
_TEXTUAL = re.compile(
    r"\b(?:why|policy|policies|explain|explains|reason|reasons|rule|rules|describe|justify|justification|"
    r"according|procedure|guideline|guidelines|says?)\b"
)
_PLAN_AGGREGATE = re.compile(r"^\s*([a-z_]+)\((.*)\)\s*$")


def assess_history(request: dict[str, Any]) -> dict[str, Any]:
    """The ``history_assessment`` answer for the sufficiency prompt's JSON (rules 1-4 of the module docstring)."""
    _require_object(request)
    follow_up = str(request.get("follow_up") or "").strip()
    if not follow_up:
        raise ModelInvalidOutput("the offline model has no follow-up to assess")
    sources = request.get("previous_sources") or []
    kinds = {str(source.get("kind")) for source in sources if isinstance(source, dict)}
    return {
        "decision": _decision(follow_up, kinds, request.get("previous_table_plan")),
        "standalone_query": follow_up[:MAX_REWRITE_CHARS],
    }


def _decision(follow_up: str, kinds: set[str], plan_summary: Any) -> Decision:
    text = _normalized(follow_up)
    if asks_to_rephrase(text):
        return "none"
    tabular, narrative = "tabular" in kinds, "narrative" in kinds
    if tabular and _asks_for_computation(text, _summary_plan(plan_summary)):
        return "both" if narrative and _TEXTUAL.search(text) else "tabular"
    if narrative:
        return "narrative"
    return "tabular" if tabular else "narrative"


def _asks_for_computation(text: str, plan: TabularPlan | None) -> bool:
    return (
        new_grouping(text, plan)
        or new_filter(text, plan)
        or new_total(text, plan)
        or _COMPARISON.search(text) is not None
    )


def _summary_plan(summary: Any) -> TabularPlan | None:
    """The prior plan as far as the prompt's summary tells it: group columns, aggregate functions and filter
    columns (not their values, which the prompt leaves out: any number in the follow-up then counts as new)."""
    if not isinstance(summary, dict):
        return None
    aggregates = []
    for index, text in enumerate(summary.get("aggregates") or []):
        match = _PLAN_AGGREGATE.match(str(text))
        if match and match.group(1) in AGGREGATE_FUNCTIONS:
            column = None if match.group(2) in ("", "*") else match.group(2)
            aggregates.append({"function": match.group(1), "column": column, "alias": f"a{index}"})
    filters = []
    for text in summary.get("filters") or []:
        column, _, op = str(text).rpartition(" ")
        if column and op in FILTER_OPS:
            filters.append({"column": column, "op": op, "value": None})
    group_by = [str(name) for name in summary.get("group_by") or []]
    try:
        return parse_plan({"filters": filters, "group_by": group_by, "aggregates": aggregates, "order_by": []})
    except InvalidPlan:
        return None


# ---- tabular_plan ---------------------------------------------------------------------------------

_GROUPABLE = frozenset({"text", "date", "timestamp", "time"})
_GROUPING = re.compile(
    r"\b(?:broken down by|break(?:ing)? (?:it |that |this |them )?down by|grouped by|group by|split by|"
    r"for each|for every|per|by)\s+(?:the\s+)?([a-z0-9][a-z0-9_-]*)"
)
_AGGREGATE_WORDS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"\b(?:total|totals|sum|sums)\b"), "sum", "total"),
    (re.compile(r"\b(?:average|averages|avg)\b|\bmean\b(?!\W*$)"), "avg", "avg"),
    (re.compile(r"\b(?:how many|count|number of)\b"), "count", "rows"),
    (re.compile(r"\b(?:highest|max|maximum)\b"), "max", "max"),
    (re.compile(r"\b(?:lowest|min|minimum)\b"), "min", "min"),
)
# Words of the query that say what to compute, not which column: "total" must not pick a "total_cost" column.
_FUNCTION_WORDS = frozenset(
    {"total", "sum", "average", "avg", "mean", "count", "number", "highest", "max", "maximum", "lowest", "min"}
    | {"minimum", "how", "many", "by", "per", "for", "each", "of", "the", "a", "an", "and", "only", "where"}
)
_VALUE = r"(\"[^\"]{1,200}\"|'[^']{1,200}'|[^\s,;:?!\"']+)"
_WHERE = re.compile(r"\bwhere\s+(?:the\s+)?([\w-]+)\s+(?:is|=|==|equals)\s+" + _VALUE, re.IGNORECASE)
_ONLY = re.compile(r"\bonly\s+(?:for\s+|in\s+)?(?:the\s+)?" + _VALUE + r"\s+([\w-]+)", re.IGNORECASE)
_NUMBER = r"(-?\d[\d,]*(?:\.\d+)?)"
_COMPARISONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(?:more than|greater than|over|above)\s+" + _NUMBER), ">"),
    (re.compile(r"\b(?:less than|fewer than|under|below)\s+" + _NUMBER), "<"),
    (re.compile(r"\bat least\s+" + _NUMBER), ">="),
    (re.compile(r"\bat most\s+" + _NUMBER), "<="),
)


def plan_table_query(request: dict[str, Any]) -> dict[str, Any]:
    """The ``tabular_plan`` answer: a plan for ``request["query"]`` over ``request["columns"]``, refining
    ``request["previous_plan"]`` when given, by the rules of the module docstring; it passes ``check_plan``."""
    _require_object(request)
    columns = _columns(request.get("columns"))
    query = str(request.get("query") or "")
    text = _normalized(query)
    plan = _previous(request.get("previous_plan"), columns)
    for column in _grouped_columns(text, columns):
        plan = _with(plan, columns, group_by=[*plan.group_by, column.name])
    named = _named_numeric(text, columns)
    numeric = [column for column in columns if column.kind == "number"]
    target = named or (numeric[0] if numeric else None)
    for pattern, function, prefix in _AGGREGATE_WORDS:
        if pattern.search(text):
            plan = _with_aggregate(plan, columns, function, None if function == "count" else target, prefix)
    if plan.group_by and not plan.aggregates:
        plan = _with_aggregate(plan, columns, "count", None, "rows")
        if numeric:
            plan = _with_aggregate(plan, columns, "sum", numeric[0], "total")
    for column, value in _equal_filters(query, columns):
        plan = _with(plan, columns, filters=_set_equal(plan, column.name, value))
    if named is not None:
        for op, number in _number_filters(text):
            item = {"column": named.name, "op": op, "value": number}
            if item not in [entry.model_dump() for entry in plan.filters]:
                plan = _with(plan, columns, filters=[*plan.filters, item])
    if plan.aggregates:
        plan = _with(plan, columns, order_by=[{"key": plan.aggregates[0].alias, "direction": "desc"}])
    return plan.model_dump(mode="json")


def _columns(data: Any) -> list[TabularColumn]:
    if not isinstance(data, list):
        raise ModelInvalidOutput("the offline model needs the table's columns as a list")
    try:
        return [TabularColumn.model_validate(item) for item in data]
    except ValidationError:
        raise ModelInvalidOutput("each column needs a name and a type") from None


def _previous(data: Any, columns: Sequence[TabularColumn]) -> TabularPlan:
    """The previous plan when it is one and fits these columns (a follow-up on the same table), else empty."""
    if data is not None:
        try:
            return check_plan(parse_plan(data), columns).plan
        except InvalidPlan:
            pass
    return TabularPlan(limit=DEFAULT_LIMIT)


def _with(plan: TabularPlan, columns: Sequence[TabularColumn], **change: Any) -> TabularPlan:
    """``plan`` with ``change`` applied when the result still passes ``check_plan``, else ``plan`` unchanged."""
    candidate = {**plan.model_dump(mode="json"), **change}
    for key in ("filters", "aggregates", "order_by"):
        candidate[key] = [
            item.model_dump(mode="json") if isinstance(item, BaseModel) else item for item in candidate[key]
        ]
    try:
        return check_plan(parse_plan(candidate), columns).plan
    except InvalidPlan:
        return plan


def _with_aggregate(
    plan: TabularPlan,
    columns: Sequence[TabularColumn],
    function: str,
    column: TabularColumn | None,
    prefix: str,
) -> TabularPlan:
    if function != "count" and column is None:
        return plan  # no numeric column to compute on
    name = None if column is None else column.name
    if any(item.function == function and item.column == name for item in plan.aggregates):
        return plan
    base = prefix if column is None else f"{prefix}_{column.name}"
    alias = _alias(base, {c.name.lower() for c in columns} | {a.alias.lower() for a in plan.aggregates})
    return _with(plan, columns, aggregates=[*plan.aggregates, {"function": function, "column": name, "alias": alias}])


def _set_equal(plan: TabularPlan, column: str, value: str) -> list[dict[str, Any]]:
    """The plan's filters with ``column = value``: in place of an ``=`` it had on that column, else appended."""
    filters = [item.model_dump(mode="json") for item in plan.filters]
    wanted = {"column": column, "op": "=", "value": value}
    for index, item in enumerate(filters):
        if item["column"] == column and item["op"] == "=":
            filters[index] = wanted
            return filters
    return [*filters, wanted]


def _alias(base: str, taken: set[str]) -> str:
    """``base`` made a valid alias (letters, digits, _; at most 64) that no column or alias already uses."""
    clean = re.sub(r"[^A-Za-z0-9_]+", "_", base).strip("_")[:60] or "value"
    if clean[0].isdigit():
        clean = f"v_{clean}"[:60]
    alias, suffix = clean, 2
    while alias.lower() in taken:
        alias, suffix = f"{clean}_{suffix}", suffix + 1
    return alias


def _grouped_columns(text: str, columns: Sequence[TabularColumn]) -> list[TabularColumn]:
    found = []
    for match in _GROUPING.finditer(text):
        column = _column_named(match.group(1), [c for c in columns if c.kind in _GROUPABLE])
        if column is not None and column not in found:
            found.append(column)
    return found


def _column_named(word: str, columns: Sequence[TabularColumn]) -> TabularColumn | None:
    """The column ``word`` names: its whole name first (case and _/-/space aside), else the first whose words
    include it, singular or plural."""
    wanted = "_".join(_split(word))
    for column in columns:
        if "_".join(_split(column.name)) == wanted:
            return column
    singular = {part.removesuffix("s") for part in _split(word)}
    for column in columns:
        if singular and singular <= _words(column.name):
            return column
    return None


def _named_numeric(text: str, columns: Sequence[TabularColumn]) -> TabularColumn | None:
    """The numeric column sharing most words with the query (words of computation aside), the one with fewest
    other words on a tie (``amount`` before ``total_amount``), then the first; None if none shares a word."""
    query = _words(text) - _FUNCTION_WORDS
    scored = []
    for index, column in enumerate(columns):
        if column.kind == "number":
            own = _words(column.name)
            scored.append((len(own & query), -len(own - query), -index, column))
    best = max(scored, key=lambda entry: entry[:3], default=None)
    return best[3] if best is not None and best[0] > 0 else None


def _equal_filters(query: str, columns: Sequence[TabularColumn]) -> list[tuple[TabularColumn, str]]:
    """``where <column> is <value>`` and ``only <value> <column>``, read from the query as written (values keep
    their case), on text and date-like columns the query names."""
    filterable = [column for column in columns if column.kind in _GROUPABLE]
    pairs = [(m.group(1), m.group(2)) for m in _WHERE.finditer(query)]
    pairs += [(m.group(2), m.group(1)) for m in _ONLY.finditer(query)]
    found = []
    for word, value in pairs:
        column = _column_named(word.lower(), filterable)
        if column is not None:
            found.append((column, value[1:-1] if value[0] in "\"'" else value))
    return found


def _number_filters(text: str) -> list[tuple[str, int | float]]:
    found: list[tuple[str, int | float]] = []
    for pattern, op in _COMPARISONS:
        for match in pattern.finditer(text):
            digits = match.group(1).replace(",", "")
            found.append((op, float(digits) if "." in digits else int(digits)))
    return found


# ---- shared ---------------------------------------------------------------------------------------


def _require_object(request: Any) -> None:
    if not isinstance(request, dict):
        raise ModelInvalidOutput("the offline model needs its input as a JSON object")


def _normalized(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
    return " ".join(text.lower().split())


def _split(name: str) -> list[str]:
    return [part for part in re.split(r"[\s_-]+", name.lower()) if part]


def _words(text: str) -> set[str]:
    """Words of a column name or query, singular and plural alike: ``sales_regions`` -> {sale, region}."""
    return {word.removesuffix("s") for word in re.findall(r"[a-z0-9]+", text.lower())}
