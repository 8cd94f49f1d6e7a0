"""Conversation continuity in the template: off by default, switched by context, the rollback switch,
and the chat function able to reauthorise and ground a turn (workspaces, documents, the tables' Parquet)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from infra.constructs.continuity import CONTINUITY_CONTEXT, NATIVE_RERUNS_CONTEXT, ContinuitySwitches
from tests.infra.test_diagnosis_infra import chat_function, statements_by_role

FLAG, RERUNS = "ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY", "CONTINUITY_NATIVE_RERUNS_ENABLED"


def environment_with(context: dict[str, Any]) -> dict[str, str]:
    app = App(context=context)
    stack = Stack(app, "Probe")
    function = lambda_.Function(
        stack, "Fn", runtime=lambda_.Runtime.PYTHON_3_12, handler="h.h", code=lambda_.Code.from_inline("x=1")
    )
    ContinuitySwitches.from_context(stack.node).apply(function)
    (found,) = Template.from_stack(stack).find_resources("AWS::Lambda::Function").values()
    return dict(found["Properties"]["Environment"]["Variables"])


def test_the_deployed_chat_function_has_continuity_off_with_reruns_on(resources: dict[str, Any]) -> None:
    variables = chat_function(resources)["Properties"]["Environment"]["Variables"]
    assert (variables[FLAG], variables[RERUNS]) == ("false", "true")


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ({CONTINUITY_CONTEXT: "true"}, ("true", "true")),
        ({CONTINUITY_CONTEXT: True, NATIVE_RERUNS_CONTEXT: "false"}, ("true", "false")),
        ({}, ("false", "true")),
    ],
)
def test_the_context_switches_continuity_and_its_rollback(context: dict[str, Any], expected: tuple[str, str]) -> None:
    variables = environment_with(context)
    assert (variables[FLAG], variables[RERUNS]) == expected


def test_a_switch_that_is_not_a_boolean_fails_the_synth_naming_it() -> None:
    with pytest.raises(ValueError, match=CONTINUITY_CONTEXT):
        environment_with({CONTINUITY_CONTEXT: "yes please"})


def test_the_chat_function_may_read_workspaces_and_documents_but_not_write_them(resources: dict[str, Any]) -> None:
    role = chat_function(resources)["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = statements_by_role(resources)[role]
    tables = {
        key: resource["Properties"]["TableName"]
        for key, resource in resources.items()
        if resource["Type"] == "AWS::DynamoDB::Table"
    }
    by_table: dict[str, set[str]] = {}
    for statement in statements:
        actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        listed = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        for resource in listed:
            text = json.dumps(resource)  # a table's ARN (or its indexes') names the table's logical id
            for key in tables:
                if key in text:
                    by_table.setdefault(key, set()).update(actions)
    workspaces = next(k for k in tables if k.startswith("DataTableworkspaces"))
    documents = next(k for k in tables if k.startswith("DataTabledocuments"))
    for table in (workspaces, documents):
        assert {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem"} <= by_table[table]
        assert not {a for a in by_table[table] if a.startswith(("dynamodb:Put", "dynamodb:Update", "dynamodb:Delete"))}
