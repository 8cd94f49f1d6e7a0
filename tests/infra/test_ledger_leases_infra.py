"""The ledger's chain leases in the synthesized template: every writer of the ledger may lease its chain, and
the chain count is a deployment setting every function reads."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App

from flowledger.store.tables import physical_table_name
from infra.stack import ledger_chains
from tests.infra.test_template import of_type


def _table_id(resources: dict[str, Any], name: str) -> str:
    (table_id,) = [
        key
        for key, table in of_type(resources, "AWS::DynamoDB::Table").items()
        if table["Properties"]["TableName"] == physical_table_name("flowledger", name)
    ]
    return table_id


def _roles_that_put_into(resources: dict[str, Any], table_id: str) -> set[str]:
    policies = [
        *of_type(resources, "AWS::IAM::Policy").values(),
        *of_type(resources, "AWS::IAM::ManagedPolicy").values(),
    ]
    return {
        role["Ref"]
        for policy in policies
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement.get("Effect", "Allow") == "Allow"
        and "dynamodb:PutItem" in json.dumps(statement["Action"])
        and f'"{table_id}"' in json.dumps(statement["Resource"])
        for role in policy["Properties"].get("Roles", [])
    }


def test_whoever_appends_to_the_ledger_may_lease_a_chain_and_nobody_else(resources: dict[str, Any]) -> None:
    ledger_writers = _roles_that_put_into(resources, _table_id(resources, "ledger"))
    assert len(ledger_writers) >= 5  # flows, chat, documents, research, jobs, subjects ...
    assert _roles_that_put_into(resources, _table_id(resources, "ledger_leases")) == ledger_writers


def test_every_function_reads_the_chain_count(resources: dict[str, Any]) -> None:
    counts = {
        key: function["Properties"]["Environment"]["Variables"].get("FLOWLEDGER_LEDGER_SHARDS")
        for key, function in of_type(resources, "AWS::Lambda::Function").items()
        if "FLOWLEDGER_RESOURCE_PREFIX" in function["Properties"].get("Environment", {}).get("Variables", {})
    }
    assert counts and set(counts.values()) == {"16"}, counts


@pytest.mark.parametrize(("value", "chains"), [(None, 16), ("2048", 2048), (4096, 4096)])
def test_the_chain_count_comes_from_context(value: object, chains: int) -> None:
    context = {} if value is None else {"flowledger:ledgerChains": value}
    assert ledger_chains(App(context=context).node) == chains


@pytest.mark.parametrize("value", ["0", "4097", "many", True, 2.5])
def test_a_chain_count_out_of_range_fails_the_synth(value: object) -> None:
    with pytest.raises(ValueError, match="flowledger:ledgerChains must be a whole number from 1 to 4096"):
        ledger_chains(App(context={"flowledger:ledgerChains": value}).node)
