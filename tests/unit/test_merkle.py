from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from flowledger.ledger.merkle import inclusion_path, merkle_root, root_from_path

# RFC 6962 test leaves, as used by the Certificate Transparency reference implementations.
LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    b"\x50\x51\x52\x53\x54\x55\x56\x57",
    bytes(range(0x60, 0x70)),
]


def test_known_roots() -> None:
    assert merkle_root([]).hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert merkle_root(LEAVES[:1]).hex() == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    assert merkle_root(LEAVES).hex() == "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=40), st.data())
def test_every_leaf_proves_into_the_root(leaves: list[bytes], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(leaves) - 1))
    path = inclusion_path(index, leaves)
    assert root_from_path(index, len(leaves), leaves[index], path) == merkle_root(leaves)


@given(st.lists(st.binary(max_size=40), min_size=2, max_size=40, unique=True), st.data())
def test_a_wrong_leaf_index_or_sibling_does_not(leaves: list[bytes], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(leaves) - 1))
    path = inclusion_path(index, leaves)
    root = merkle_root(leaves)
    other = data.draw(st.integers(0, len(leaves) - 1).filter(lambda i: i != index))
    assert root_from_path(index, len(leaves), leaves[other], path) != root
    if path:
        broken = list(path)
        broken[data.draw(st.integers(0, len(path) - 1))] = b"\x00" * 32
        assert root_from_path(index, len(leaves), leaves[index], broken) != root
    assert root_from_path(index, len(leaves), leaves[index], [*path, b"\x00" * 32]) is None
