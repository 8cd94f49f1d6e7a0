"""The embedded store weighs a Query's items as moto does: the same size, to the byte, for every attribute type."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.utilities import bytesize

from flowledger.local.moto_reads import item_size
from tests.attribute_values import text, values


def moto_size(item: Item) -> int:
    """moto's own Item.size (which the embedded store replaces), from its attribute objects."""
    return sum(bytesize(name) + DynamoType.size(value) for name, value in item.attrs.items())


@given(attributes=st.dictionaries(text.filter(bool), values, min_size=1, max_size=6))
def test_an_item_weighs_what_moto_says_it_weighs(attributes: dict[str, Any]) -> None:
    item = Item(hash_key=DynamoType({"S": "k"}), range_key=None, attrs=attributes)
    assert item_size(item) == moto_size(item)


def test_a_multibyte_name_and_value_count_their_utf8_bytes() -> None:
    item = Item(hash_key=DynamoType({"S": "k"}), range_key=None, attrs={"é": {"S": "日本"}, "n": {"N": "12.5"}})
    assert item_size(item) == 2 + 6 + 1 + 4
