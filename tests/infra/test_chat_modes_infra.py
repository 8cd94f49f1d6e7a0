"""Which chat routes stream and which answer whole, read from the template.

Lambda Web Adapter streams every response of a function in ``response_stream`` mode, and API Gateway
reads a stream only from an integration that asks for one: so each chat route must integrate with a
function whose adapter mode matches its integration's transfer mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aws_cdk.assertions import Template

from flowledger.api.chat_app import CHAT_ROUTES, STREAMING_ROUTES
from flowledger.store.tables import physical_table_name
from infra.constructs.chat import LWA_ACCOUNT, LWA_CHINA_ACCOUNTS, LWA_LAYER
from infra.constructs.diagnosis import DATA_API_CONTEXT, LOG_GROUPS_CONTEXT
from infra.constructs.model_config import MODEL_CONTEXT
from tests.infra.synth import resources_with
from tests.infra.test_diagnosis_infra import statements_by_role
from tests.infra.test_template import _path_of, of_type

# Every optional grant the chat can get: the diagnosis agent's logs and database, and a model server.
CONFIGURED: dict[str, Any] = {
    LOG_GROUPS_CONTEXT: ["/app/checkout"],
    DATA_API_CONTEXT: {
        "resourceArn": "arn:aws:rds:eu-west-1:123456789012:cluster:app-db",
        "secretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:app-readonly-AbCdEf",
        "database": "shop",
    },
    MODEL_CONTEXT: {
        "secretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:flowledger-openai-key-AbCdEf",
        "baseUrlParameter": "/flowledger/base-url",
    },
}
# Actions only a turn needs (the streaming function): diagnosis reads, the model's settings, documents.
TURN_ONLY_ACTIONS = ("logs:", "rds-data:", "secretsmanager:", "ssm:", "s3:")
TURN_ONLY_VARIABLES = ("FLOWLEDGER_DIAGNOSIS_", "FLOWLEDGER_OPENAI_", "FLOWLEDGER_CHAT_MODEL", "OPENAI_")


def _logical_ids(value: Any) -> Iterator[str]:
    """The logical ids a template value refers to (``Fn::GetAtt``, ``Ref``), pseudo parameters included."""
    if isinstance(value, dict):
        if "Fn::GetAtt" in value:
            yield value["Fn::GetAtt"][0]
        elif "Ref" in value:
            yield value["Ref"]
        for inner in value.values():
            yield from _logical_ids(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _logical_ids(inner)


def _function_of(integration: dict[str, Any]) -> str:
    """The logical id of the function an integration's URI invokes (its other references are pseudo parameters)."""
    (function,) = [name for name in _logical_ids(integration["Uri"]) if not name.startswith("AWS::")]
    return function


def _routes(resources: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each API method's integration, by (path, method)."""
    return {
        (_path_of(resources, m["Properties"]["ResourceId"]), m["Properties"]["HttpMethod"]): m["Properties"][
            "Integration"
        ]
        for m in of_type(resources, "AWS::ApiGateway::Method").values()
    }


def _mode(resources: dict[str, Any], function: str) -> str:
    return str(resources[function]["Properties"]["Environment"]["Variables"]["AWS_LWA_INVOKE_MODE"])


def _chat_functions(resources: dict[str, Any]) -> dict[str, str]:
    """The logical id of the function behind the streaming routes and behind the others."""
    routes = _routes(resources)
    by_kind: dict[str, set[str]] = {}
    for route in CHAT_ROUTES:
        kind = "streaming" if route in STREAMING_ROUTES else "buffered"
        by_kind.setdefault(kind, set()).add(_function_of(routes[route]))
    (streaming,), (buffered,) = by_kind["streaming"], by_kind["buffered"]
    assert streaming != buffered
    return {"streaming": streaming, "buffered": buffered}


@pytest.mark.parametrize("route", CHAT_ROUTES, ids=lambda route: f"{route[1]} {route[0]}")
def test_each_chat_route_runs_in_the_mode_its_integration_reads(resources: dict[str, Any], route: Any) -> None:
    integration = _routes(resources)[route]
    function = _function_of(integration)
    if route in STREAMING_ROUTES:
        assert _mode(resources, function) == "response_stream"
        assert integration["ResponseTransferMode"] == "STREAM"
    else:
        assert _mode(resources, function) == "buffered"
        assert "ResponseTransferMode" not in integration  # API Gateway's default: buffered


def test_no_other_route_integrates_with_the_streaming_function_or_streams(resources: dict[str, Any]) -> None:
    routes = _routes(resources)
    streaming = {_function_of(routes[route]) for route in STREAMING_ROUTES}
    # A CORS preflight's mock integration invokes no function (and has no URI).
    on_it = {
        route
        for route, integration in routes.items()
        if "Uri" in integration and _function_of(integration) in streaming
    }
    assert on_it == STREAMING_ROUTES
    streamed = {route for route, integration in routes.items() if integration.get("ResponseTransferMode") == "STREAM"}
    assert streamed == STREAMING_ROUTES


def test_both_chat_functions_run_the_same_app_with_the_same_layers(resources: dict[str, Any]) -> None:
    streaming, buffered = (resources[f]["Properties"] for f in _chat_functions(resources).values())
    assert streaming["Handler"] == buffered["Handler"] == "run.sh"
    assert streaming["Code"] == buffered["Code"]
    assert streaming["Layers"] == buffered["Layers"]
    shared = ("AWS_LAMBDA_EXEC_WRAPPER", "AWS_LWA_PORT", "AWS_LWA_READINESS_CHECK_PATH")
    variables = [p["Environment"]["Variables"] for p in (streaming, buffered)]
    assert [{k: v[k] for k in shared} for v in variables] == [{k: variables[0][k] for k in shared}] * 2
    # Apart in logs and metrics; the buffered one no longer than API Gateway waits for it.
    assert [v["POWERTOOLS_SERVICE_NAME"] for v in variables] == ["chat", "chat-buffered"]
    assert buffered["Timeout"] <= 29 < streaming["Timeout"]


def test_the_buffered_function_reaches_the_runs_table_and_nothing_else(resources: dict[str, Any]) -> None:
    buffered = _chat_functions(resources)["buffered"]
    statements = statements_by_role(resources)[resources[buffered]["Properties"]["Role"]["Fn::GetAtt"][0]]
    (runs,) = [
        key
        for key, table in of_type(resources, "AWS::DynamoDB::Table").items()
        if table["Properties"]["TableName"] == physical_table_name("flowledger", "runs")
    ]
    tables = set(of_type(resources, "AWS::DynamoDB::Table"))
    named = {
        name
        for statement in statements
        for name in _logical_ids(statement["Resource"])
        if name in tables or resources.get(name, {}).get("Type") == "AWS::S3::Bucket"
    }
    assert named == {runs}
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert "dynamodb:UpdateItem" in actions  # the cancel route ends a run
    assert not [a for a in actions if a.startswith(TURN_ONLY_ACTIONS)]


@pytest.fixture(scope="module")
def configured() -> dict[str, Any]:
    return resources_with(CONFIGURED)  # raises on any unacknowledged cdk-nag finding


def test_configured_diagnosis_and_model_access_reach_the_streaming_function_alone(configured: dict[str, Any]) -> None:
    by_role = statements_by_role(configured)

    def turn_only(function: str) -> set[str]:
        statements = by_role[configured[function]["Properties"]["Role"]["Fn::GetAtt"][0]]
        actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
        return {a.split(":")[0] for a in actions if a.startswith(TURN_ONLY_ACTIONS)}

    chat = _chat_functions(configured)
    assert turn_only(chat["streaming"]) == {"logs", "rds-data", "secretsmanager", "ssm", "s3"}
    assert turn_only(chat["buffered"]) == set()
    told = {
        kind: {
            name
            for name in configured[function]["Properties"]["Environment"]["Variables"]
            if name.startswith(TURN_ONLY_VARIABLES)
        }
        for kind, function in chat.items()
    }
    assert told["streaming"] and told["buffered"] == set()


def _evaluate(value: Any, conditions: dict[str, Any], pseudo: dict[str, str]) -> Any:
    """A CloudFormation value as it deploys, for the pseudo parameters given (Ref, Fn::Join, Fn::If, Fn::Equals)."""
    if isinstance(value, list):
        return [_evaluate(v, conditions, pseudo) for v in value]
    if not isinstance(value, dict):
        return value
    if "Ref" in value:
        return pseudo[value["Ref"]]
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_evaluate(parts, conditions, pseudo))
    if "Fn::If" in value:
        name, then, otherwise = value["Fn::If"]
        return _evaluate(then if _evaluate(conditions[name], conditions, pseudo) else otherwise, conditions, pseudo)
    if "Fn::Equals" in value:
        left, right = _evaluate(value["Fn::Equals"], conditions, pseudo)
        return left == right
    raise AssertionError(f"not evaluated here: {value}")


@pytest.mark.parametrize(
    ("partition", "region", "account"),
    [
        ("aws", "eu-west-1", LWA_ACCOUNT),
        ("aws", "us-east-1", LWA_ACCOUNT),
        ("aws-cn", "cn-north-1", LWA_CHINA_ACCOUNTS["cn-north-1"]),
        ("aws-cn", "cn-northwest-1", LWA_CHINA_ACCOUNTS["cn-northwest-1"]),
    ],
)
def test_the_adapter_layer_is_the_one_published_in_the_deployments_partition_and_region(
    template: Template, resources: dict[str, Any], partition: str, region: str, account: str
) -> None:
    conditions = template.to_json().get("Conditions", {})
    pseudo = {"AWS::Partition": partition, "AWS::Region": region}
    for function in _chat_functions(resources).values():
        (adapter,) = [layer for layer in resources[function]["Properties"]["Layers"] if "Ref" not in layer]
        arn, _, version = _evaluate(adapter, conditions, pseudo).rpartition(":")
        assert arn == f"arn:{partition}:lambda:{region}:{account}:layer:{LWA_LAYER}" and version.isdigit()
