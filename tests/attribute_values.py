"""DynamoDB attribute values in their JSON form, every type nested, for property tests of what reads them."""

from __future__ import annotations

import base64

from hypothesis import strategies as st

text = st.text(max_size=8)  # any code point: sizes count UTF-8 bytes, parsers must keep them as they are
numbers = st.one_of(st.integers(-(10**12), 10**12).map(str), st.floats(allow_nan=False, allow_infinity=False).map(repr))
binaries = st.binary(max_size=12).map(lambda raw: base64.b64encode(raw).decode())
scalars = st.one_of(
    text.map(lambda v: {"S": v}),
    numbers.map(lambda v: {"N": v}),
    binaries.map(lambda v: {"B": v}),
    st.booleans().map(lambda v: {"BOOL": v}),
    st.just({"NULL": True}),
    st.lists(text, min_size=1, max_size=3, unique=True).map(lambda v: {"SS": v}),
    st.lists(numbers, min_size=1, max_size=3, unique=True).map(lambda v: {"NS": v}),
    st.lists(binaries, min_size=1, max_size=3, unique=True).map(lambda v: {"BS": v}),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda v: {"L": v}),
        st.dictionaries(text, inner, max_size=3).map(lambda v: {"M": v}),
    ),
    max_leaves=12,
)
