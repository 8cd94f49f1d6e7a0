"""The console pool's tokens in AWS: the pre token generation trigger on the pool (invokable by this pool
only), the patient id attribute the app client reads but cannot write, and ``flowledger:tokenIssuer``:
``console-pool`` points the authorizer at the pool, anything unset or ``external`` keeps cdk.json's issuer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.constructs.console import ISSUER_CONTEXT
from tests.infra.synth import app_with, resources_with
from tests.infra.test_console_infra import logical_id, of_type, text

ROOT_CONTEXT = json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())["context"]


def function_of(resources: dict[str, Any], service: str) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (key, r["Properties"])
        for key, r in of_type(resources, "AWS::Lambda::Function").items()
        if r["Properties"].get("Environment", {}).get("Variables", {}).get("POWERTOOLS_SERVICE_NAME") == service
    ]
    return found


def authorizer_trust(resources: dict[str, Any]) -> tuple[str, str, str]:
    _, authorizer = function_of(resources, "authorizer")
    variables = authorizer["Environment"]["Variables"]
    return tuple(  # type: ignore[return-value]
        text(variables[name]) for name in ("FLOWLEDGER_JWKS_URL", "FLOWLEDGER_JWT_ISSUER", "FLOWLEDGER_JWT_AUDIENCE")
    )


def test_the_trigger_is_the_pools_v1_pre_token_generation(resources: dict[str, Any]) -> None:
    pool = resources[logical_id(resources, "AWS::Cognito::UserPool", "Console")]["Properties"]
    trigger, function = function_of(resources, "token_claims")
    # V1 (the id token, every tier): the plain PreTokenGeneration field, no V2 PreTokenGenerationConfig.
    assert pool["LambdaConfig"] == {"PreTokenGeneration": {"Fn::GetAtt": [trigger, "Arn"]}}
    assert function["Handler"] == "handler.handler" and function["Timeout"] <= 5
    # The authorizer's layers: the base dependencies and the flowledger package, nothing heavier.
    (base, core) = [layer["Ref"] for layer in function["Layers"]]
    assert base.startswith("LayersDepsbase") and core.startswith("LayersCore")


def test_only_this_pool_may_invoke_the_trigger(resources: dict[str, Any]) -> None:
    pool = logical_id(resources, "AWS::Cognito::UserPool", "Console")
    trigger, _ = function_of(resources, "token_claims")
    permissions = [
        p["Properties"]
        for p in of_type(resources, "AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [trigger, "Arn"]}
    ]
    assert permissions == [
        {
            "Action": "lambda:InvokeFunction",
            "FunctionName": {"Fn::GetAtt": [trigger, "Arn"]},
            "Principal": "cognito-idp.amazonaws.com",
            "SourceArn": {"Fn::GetAtt": [pool, "Arn"]},
        }
    ]


def test_the_trigger_may_touch_no_aws_resource(resources: dict[str, Any]) -> None:
    _, function = function_of(resources, "token_claims")
    role = function["Role"]["Fn::GetAtt"][0]
    statements = [
        s
        for p in of_type(resources, "AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])} == {
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
    }


def test_the_patient_id_attribute_is_readable_but_not_writable_by_the_app_client(resources: dict[str, Any]) -> None:
    pool = resources[logical_id(resources, "AWS::Cognito::UserPool", "Console")]["Properties"]
    (attribute,) = [a for a in pool["Schema"] if a["Name"] == "patient_id"]
    assert attribute["AttributeDataType"] == "String"
    assert attribute["Mutable"] is True  # operators correct it with admin-update-user-attributes
    client = resources[logical_id(resources, "AWS::Cognito::UserPoolClient", "Console")]["Properties"]
    assert "custom:patient_id" in client["ReadAttributes"]
    # An explicit list: left out, Cognito would let the client write whatever its defaults allow.
    assert client["WriteAttributes"] and not [a for a in client["WriteAttributes"] if a.startswith("custom:")]


def test_patients_and_chat_users_have_groups(resources: dict[str, Any]) -> None:
    groups = {g["Properties"]["GroupName"] for g in of_type(resources, "AWS::Cognito::UserPoolGroup").values()}
    assert {"patients", "chat-users", "operators"} <= groups


def test_by_default_the_authorizer_trusts_the_external_issuer_of_the_context(resources: dict[str, Any]) -> None:
    assert authorizer_trust(resources) == (
        ROOT_CONTEXT["flowledger:jwksUrl"],
        ROOT_CONTEXT["flowledger:jwtIssuer"],
        ROOT_CONTEXT["flowledger:jwtAudience"],
    )


@pytest.fixture(scope="module")
def console_pool() -> dict[str, Any]:
    return resources_with({ISSUER_CONTEXT: "console-pool"})  # its synth runs cdk-nag


def test_with_console_pool_the_authorizer_trusts_the_pools_id_tokens(console_pool: dict[str, Any]) -> None:
    pool = logical_id(console_pool, "AWS::Cognito::UserPool", "Console")
    client = logical_id(console_pool, "AWS::Cognito::UserPoolClient", "Console")
    issuer = f"https://cognito-idp.<AWS::Region>.<AWS::URLSuffix>/<{pool}>"
    assert authorizer_trust(console_pool) == (f"{issuer}/.well-known/jwks.json", issuer, f"<{client}>")


def test_an_explicit_external_issuer_is_the_default() -> None:
    external = app_with({ISSUER_CONTEXT: "external"}).synth().get_stack_by_name("Flowledger").template
    assert authorizer_trust(external["Resources"])[1] == ROOT_CONTEXT["flowledger:jwtIssuer"]


@pytest.mark.parametrize("value", ["cognito", "Console-Pool", "https://cognito-idp.eu-west-1.amazonaws.com/x"])
def test_an_unknown_token_issuer_fails_the_synth_naming_the_context(value: str) -> None:
    with pytest.raises(ValueError, match=f"^{ISSUER_CONTEXT} must be 'console-pool' or 'external'"):
        app_with({ISSUER_CONTEXT: value})
