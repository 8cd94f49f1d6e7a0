from __future__ import annotations

import pytest

from flowledger.store.tables import BUCKETS, TABLES, physical_bucket_name, physical_table_name, table_spec


def test_table_names_are_unique_and_every_index_key_is_declared() -> None:
    assert len({t.name for t in TABLES}) == len(TABLES)
    for spec in TABLES:
        attributes = spec.attributes()
        for index in spec.indexes:
            assert index.partition.name in attributes
            assert index.sort is None or index.sort.name in attributes


def test_ledger_sorts_by_a_numeric_sequence() -> None:
    ledger = table_spec("ledger")
    assert (ledger.partition.name, ledger.sort and ledger.sort.name) == ("chain_id", "seq")
    assert ledger.attributes()["seq"] == "N"


def test_unknown_table_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        table_spec("nope")


def test_physical_names_are_valid_for_dynamodb_and_s3() -> None:
    assert physical_table_name("flowledger", "claims_review") == "flowledger-claims-review"
    for bucket in BUCKETS:
        name = physical_bucket_name("flowledger", bucket.name, "123456789012-eu-west-1")
        assert name == name.lower() and "_" not in name and 3 <= len(name) <= 63


def test_only_the_checkpoint_bucket_uses_object_lock() -> None:
    assert [b.name for b in BUCKETS if b.lock_days] == ["checkpoints"]
