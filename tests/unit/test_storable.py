"""The storability check: DynamoDB's own limits, exactly at their edges, and where a refusal points."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from flowledger.store import items
from flowledger.store.storable import ATTRIBUTE_LEVELS, Unstorable, find_unstorable, require_storable

# The largest float within 9.9999999999999999999999999999999999999E+125 (the next one up is 1e+126).
LARGEST = math.nextafter(1e126, 0)
LARGEST_INT = 10**38 - 1  # 38 nines


def nested(levels: int) -> Any:
    """``levels`` maps inside one another around a scalar; alternates with lists to cover both."""
    value: Any = "leaf"
    for level in range(levels):
        value = {"k": value} if level % 2 else [value]
    return value


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -0.0,
        "",
        {"a": ""},
        [],
        {},
        LARGEST_INT,
        -LARGEST_INT,
        1e-130,
        -1e-130,
        LARGEST,
        -LARGEST,
        1.2345678901234567e-130,
        {"unicode ключ ✓": "значение 🙂"},
    ],
    ids=repr,
)
def test_values_within_dynamodb_limits_are_storable(value: Any) -> None:
    assert find_unstorable(value) is None


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        ({"": 1}, ("",), "map keys must not be empty"),
        ({"a": {"": "x"}}, ("a", ""), "map keys must not be empty"),
        ({"a": [0, {"b": 1, "": 2}]}, ("a", 1, ""), "map keys must not be empty"),
        ({"n": 10**38}, ("n",), "an integer has at most 38 digits"),
        ({"n": -(10**38)}, ("n",), "an integer has at most 38 digits"),
        ([10**40], (0,), "an integer has at most 38 digits"),
        ({"x": float("nan")}, ("x",), "NaN and infinity cannot be stored"),
        ({"x": float("inf")}, ("x",), "NaN and infinity cannot be stored"),
        ({"x": float("-inf")}, ("x",), "NaN and infinity cannot be stored"),
        ({"x": 1e-200}, ("x",), "a number must be zero or of magnitude 1E-130 to 9.99...E+125"),
        ({"x": 9.999999999999999e-131}, ("x",), "a number must be zero or of magnitude 1E-130 to 9.99...E+125"),
        ({"x": -9.999999999999999e-131}, ("x",), "a number must be zero or of magnitude 1E-130 to 9.99...E+125"),
        ({"x": 1e126}, ("x",), "a number must be zero or of magnitude 1E-130 to 9.99...E+125"),
        ({"x": -1e126}, ("x",), "a number must be zero or of magnitude 1E-130 to 9.99...E+125"),
        ({"x": 5e-324}, ("x",), "a number must be zero or of magnitude 1E-130 to 9.99...E+125"),
        ({"s": "a\ud800b"}, ("s",), "text must be valid Unicode (no lone surrogates)"),
        ({"\udc00": 1}, ("\udc00",), "map keys must be valid Unicode (no lone surrogates)"),
        ({1: "x"}, ("1",), "map keys must be strings"),
        ({"b": b"raw"}, ("b",), "a bytes is not a JSON value"),
        ({"t": (1, 2)}, ("t",), "a tuple is not a JSON value"),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_an_unstorable_value_is_named_by_its_path(value: Any, path: tuple[Any, ...], reason: str) -> None:
    assert find_unstorable(value) == Unstorable(path, reason)


def test_the_first_offence_in_document_order_is_the_one_reported() -> None:
    value = {"a": 1, "b": {"": 1}, "c": float("nan")}
    assert find_unstorable(value) == Unstorable(("b", ""), "map keys must not be empty")


def test_a_key_is_checked_before_the_value_it_names() -> None:
    assert find_unstorable({"": {"x": float("nan")}}) == Unstorable(("",), "map keys must not be empty")


def test_thirty_one_levels_of_maps_and_lists_fit_in_an_attribute_and_thirty_two_do_not() -> None:
    assert ATTRIBUTE_LEVELS == 31
    assert find_unstorable(nested(31)) is None
    problem = find_unstorable(nested(32))
    assert problem is not None and problem.reason == "nested deeper than 31 levels of maps and lists"
    assert len(problem.path) == 31  # the innermost container, the one past the limit


def test_fewer_levels_can_be_asked_for() -> None:
    assert find_unstorable(nested(3), levels=3) is None
    assert find_unstorable(nested(4), levels=3) is not None


def test_an_empty_map_or_list_is_a_level_too() -> None:
    def empty_inside(levels: int) -> Any:
        value: Any = {}
        for _ in range(levels - 1):
            value = [value]
        return value

    assert find_unstorable(empty_inside(31)) is None
    assert find_unstorable(empty_inside(32)) is not None


def test_a_key_of_64_kb_is_refused_and_one_just_under_is_not() -> None:
    assert find_unstorable({"k" * (64 * 1024 - 1): 1}, max_bytes=10**6) is None
    problem = find_unstorable({"k" * (64 * 1024): 1}, max_bytes=10**6)
    assert problem is not None and problem.reason == "map keys must be under 64 KB"


def test_size_is_bounded_and_a_too_large_value_is_reported_at_the_root() -> None:
    assert find_unstorable({"s": "x" * 900}, max_bytes=1000) is None
    assert find_unstorable({"s": "x" * 1000}, max_bytes=1000) == Unstorable(
        (), "larger than 1,000 bytes as DynamoDB counts an item"
    )
    # keys weigh too: a thousand one-byte values under long names
    assert find_unstorable({f"{i:0>50}": 1 for i in range(20)}, max_bytes=1000) is not None
    assert find_unstorable({f"{i:0>50}": 1 for i in range(10)}, max_bytes=1000) is None


def test_the_default_size_bound_is_dynamodbs_item_size() -> None:
    assert find_unstorable(["x" * 1024] * 390) is None
    assert find_unstorable(["x" * 1024] * 401) == Unstorable((), "larger than 409,600 bytes as DynamoDB counts an item")


@pytest.mark.parametrize(
    "value",
    [{"a": [1, -2, 0.5, -0.0, 1e-130, LARGEST, LARGEST_INT, 1e16, 2.5e-7, None, True, "", {}]}],
)
def test_what_passes_the_check_round_trips_through_the_codec_with_its_types(value: Any) -> None:
    assert find_unstorable(value) is None
    back = items.from_attr(items.to_attr(value))
    assert back == value
    assert [type(v) for v in back["a"]] == [type(v) for v in value["a"]]


@pytest.mark.parametrize("value", [{"": 1}, {"a": {"": 1}}, 10**38, 1e-200, 1e126, float("nan")], ids=repr)
def test_the_codec_refuses_to_write_what_it_could_not_read_back(value: Any) -> None:
    with pytest.raises(ValueError, match="DynamoDB cannot store"):
        items.to_attr(value)


def test_a_refusal_as_a_pydantic_error_carries_the_path_but_never_the_value() -> None:
    secret = "Ann Example, MRN 123-456"
    with pytest.raises(ValidationError) as refused:
        require_storable({"a": {"": secret}})
    (error,) = refused.value.errors()
    assert (error["loc"], error["type"], error["input"]) == (("a", ""), "not_storable", None)
    assert secret not in str(refused.value)
    assert require_storable({"a": secret}) == {"a": secret}
