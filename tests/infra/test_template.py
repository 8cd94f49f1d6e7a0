"""The synthesized template: tables, buckets, functions, routes and schedules as declared."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, RemovalPolicy
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from flowledger.api.access import Access
from flowledger.api.chat_app import CHAT_ROUTES
from flowledger.api.registry import CAPABILITY_MODULES, capability_routers, route_table
from flowledger.jobs import JOBS
from flowledger.store.envelope import FieldRef
from flowledger.store.tables import TABLES, physical_table_name
from flowledger.subjects.keys import kms_context as subject_kms_context
from infra.constructs.data import FLOW_CONTEXT_KEY, SUBJECT_CONTEXT_KEY
from tests.infra.synth import app_with, own_functions

AUTH_TYPE = {Access.JWT: "CUSTOM", Access.IAM: "AWS_IAM", Access.PUBLIC: "NONE"}


def of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {key: value for key, value in resources.items() if value["Type"] == kind}


@pytest.mark.parametrize("spec", TABLES, ids=lambda spec: spec.name)
def test_each_table_matches_its_spec(template: Template, spec: Any) -> None:
    keys = [{"AttributeName": spec.partition.name, "KeyType": "HASH"}]
    if spec.sort:
        keys.append({"AttributeName": spec.sort.name, "KeyType": "RANGE"})
    properties: dict[str, Any] = {
        "TableName": physical_table_name("flowledger", spec.name),
        "KeySchema": keys,
        "BillingMode": "PAY_PER_REQUEST",
        "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
        "SSESpecification": Match.object_like({"SSEEnabled": True, "SSEType": "KMS"}),
    }
    if spec.ttl_attribute:
        properties["TimeToLiveSpecification"] = {"AttributeName": spec.ttl_attribute, "Enabled": True}
    if spec.indexes:
        properties["GlobalSecondaryIndexes"] = [Match.object_like({"IndexName": index.name}) for index in spec.indexes]
    template.has_resource(
        "AWS::DynamoDB::Table", {"Properties": Match.object_like(properties), "DeletionPolicy": "Retain"}
    )


def test_checkpoint_bucket_locks_objects_in_compliance_mode(template: Template) -> None:
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "ObjectLockEnabled": True,
            "ObjectLockConfiguration": {
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": Match.object_like({"Mode": "COMPLIANCE"})},
            },
        },
    )


def test_every_function_has_its_own_role_tracing_and_a_retained_log_group(resources: dict[str, Any]) -> None:
    functions = own_functions(resources)
    roles = [f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions.values()]
    assert len(roles) == len(set(roles)) == len(functions) >= 3
    for function in functions.values():
        properties = function["Properties"]
        assert properties["TracingConfig"] == {"Mode": "Active"}
        assert properties["Runtime"] == "python3.11"
        assert properties["Architectures"] == ["x86_64"]
        assert [layer.get("Ref", "")[:10] for layer in properties["Layers"][:1]] == ["LayersDeps"]
    for group in of_type(resources, "AWS::Logs::LogGroup").values():
        assert group["Properties"]["RetentionInDays"] == 90


def _path_of(resources: dict[str, Any], resource_id: Any) -> str:
    if isinstance(resource_id, dict) and "Fn::GetAtt" in resource_id:
        return ""  # the API's root resource
    node = resources[resource_id["Ref"]]["Properties"]
    return f"{_path_of(resources, node['ParentId'])}/{node['PathPart']}"


def test_every_route_is_deployed_with_the_authentication_its_path_requires(resources: dict[str, Any]) -> None:
    deployed = {
        (_path_of(resources, m["Properties"]["ResourceId"]), m["Properties"]["HttpMethod"]): m["Properties"][
            "AuthorizationType"
        ]
        for m in of_type(resources, "AWS::ApiGateway::Method").values()
        if m["Properties"]["HttpMethod"] != "OPTIONS"  # CORS preflights: see the test below
    }
    expected = {
        (route.path, route.method): AUTH_TYPE[route.access]
        for name in CAPABILITY_MODULES
        for route in route_table(*capability_routers(name))
    }
    expected.update({(path, method): "CUSTOM" for path, method in CHAT_ROUTES})
    assert expected  # the registry is not empty
    assert deployed == expected


def test_every_path_answers_cors_preflights_without_credentials(resources: dict[str, Any]) -> None:
    methods = of_type(resources, "AWS::ApiGateway::Method").values()
    routed = {
        _path_of(resources, m["Properties"]["ResourceId"])
        for m in methods
        if m["Properties"]["HttpMethod"] != "OPTIONS"
    }
    preflights = {
        _path_of(resources, m["Properties"]["ResourceId"]): m["Properties"]
        for m in methods
        if m["Properties"]["HttpMethod"] == "OPTIONS"
    }
    assert routed <= set(preflights)
    for path in routed:
        preflight = preflights[path]
        assert preflight["AuthorizationType"] == "NONE" and preflight["Integration"]["Type"] == "MOCK", path
        answer = preflight["Integration"]["IntegrationResponses"][0]["ResponseParameters"]
        assert answer["method.response.header.Access-Control-Allow-Origin"] == "'https://console.example.com'"
        assert "authorization" in answer["method.response.header.Access-Control-Allow-Headers"]


def test_functions_know_the_allowed_origins(resources: dict[str, Any]) -> None:
    functions = [f for f in of_type(resources, "AWS::Lambda::Function").values() if "Environment" in f["Properties"]]
    assert functions
    for function in functions:
        variables = function["Properties"]["Environment"]["Variables"]
        if "FLOWLEDGER_RESOURCE_PREFIX" in variables:
            assert variables["FLOWLEDGER_CORS_ORIGINS"] == "https://console.example.com"


def test_client_routes_use_the_jwt_token_authorizer(template: Template) -> None:
    template.has_resource_properties(
        "AWS::ApiGateway::Authorizer",
        {"Type": "TOKEN", "IdentitySource": "method.request.header.Authorization", "AuthorizerResultTtlInSeconds": 300},
    )


def test_stage_traces_and_never_logs_bodies(template: Template) -> None:
    template.has_resource_properties(
        "AWS::ApiGateway::Stage",
        {
            "TracingEnabled": True,
            "MethodSettings": Match.array_with(
                [Match.object_like({"ResourcePath": "/*", "HttpMethod": "*", "DataTraceEnabled": False})]
            ),
            "AccessLogSetting": Match.object_like({"DestinationArn": Match.any_value()}),
        },
    )


@pytest.mark.parametrize("job", JOBS, ids=lambda job: job.name)
def test_each_job_has_a_schedule_that_names_it(template: Template, job: Any) -> None:
    template.has_resource_properties(
        "AWS::Scheduler::Schedule",
        {
            "ScheduleExpression": job.schedule,
            "State": "ENABLED",
            "Target": Match.object_like({"Input": f'{{"job":"{job.name}"}}'}),
        },
    )


def test_cdk_nag_fails_the_synth_on_an_unacknowledged_finding() -> None:
    app = app_with({})
    stack = app.node.find_child("Flowledger")
    s3.Bucket(stack, "Careless", removal_policy=RemovalPolicy.DESTROY)  # no SSL rule, no access logs
    with pytest.raises(RuntimeError, match="AwsSolutions-S"):
        app.synth()


def test_the_app_synthesizes_with_every_finding_acknowledged(app: App) -> None:
    assert app.synth().get_stack_by_name("Flowledger").template["Resources"]


def _policies(resources: dict[str, Any]) -> list[dict[str, Any]]:
    """Every role policy: inline, and the managed "overflow" ones CDK adds when an inline one outgrows IAM's limit."""
    return [*of_type(resources, "AWS::IAM::Policy").values(), *of_type(resources, "AWS::IAM::ManagedPolicy").values()]


def _actions_by_role(resources: dict[str, Any]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for policy in _policies(resources):
        for role in policy["Properties"].get("Roles", []):
            actions = found.setdefault(role["Ref"], set())
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                listed = statement["Action"]
                actions.update([listed] if isinstance(listed, str) else listed)
    return found


def _role_of(resources: dict[str, Any], path_fragment: str) -> str:
    for function_id, function in of_type(resources, "AWS::Lambda::Function").items():
        if path_fragment in function_id:
            return str(function["Properties"]["Role"]["Fn::GetAtt"][0])
    raise AssertionError(f"no function {path_fragment}")


def test_roles_get_only_what_their_capability_needs(resources: dict[str, Any]) -> None:
    actions = _actions_by_role(resources)
    audit = actions[_role_of(resources, "Functionaudit")]
    assert "dynamodb:Query" in audit and "s3:GetObject*" in audit
    assert not any(a.startswith(("dynamodb:Put", "dynamodb:Update", "dynamodb:Delete", "s3:Put")) for a in audit)
    jobs = actions[_role_of(resources, "JobsFunction")]
    assert "s3:PutObject" in jobs and "dynamodb:PutItem" in jobs
    reasoning = actions[_role_of(resources, "Functionreasoning")]
    assert {"dynamodb:PutItem", "kms:GenerateDataKey*", "kms:Decrypt"} <= reasoning
    # It reads pathway snapshots and writes no object.
    assert "s3:GetObject*" in reasoning and not any(a.startswith(("s3:Put", "s3:Delete")) for a in reasoning)
    core = actions.get(_role_of(resources, "Functioncore"), set())
    assert not any(a.startswith(("dynamodb:", "s3:")) for a in core)


def test_chat_streams_through_lambda_web_adapter(template: Template, resources: dict[str, Any]) -> None:
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": "run.sh",
            "Environment": {
                "Variables": Match.object_like(
                    {"AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap", "AWS_LWA_INVOKE_MODE": "response_stream"}
                )
            },
        },
    )
    streaming = [
        m
        for m in of_type(resources, "AWS::ApiGateway::Method").values()
        if m["Properties"]["Integration"].get("ResponseTransferMode") == "STREAM"
    ]
    assert [(_path_of(resources, m["Properties"]["ResourceId"]), m["Properties"]["HttpMethod"]) for m in streaming] == [
        ("/api/chat", "POST")
    ]


def _key_statements(resources: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """The role's statements that name KMS actions."""
    return [
        statement
        for policy in _policies(resources)
        if {"Ref": role} in policy["Properties"].get("Roles", [])
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if any(
            str(a).startswith("kms:")
            for a in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
        )
    ]


def test_sealed_fields_open_only_under_a_flow_or_subject_encryption_context(resources: dict[str, Any]) -> None:
    # The context keys the policy conditions on are the ones the sealer and the subjects' keys send.
    assert FLOW_CONTEXT_KEY in FieldRef("fl_1", "st_1", "inputs", "dob").kms_context()
    assert SUBJECT_CONTEXT_KEY in subject_kms_context("sbj_1")
    condition_keys = [f"kms:EncryptionContext:{key}" for key in (FLOW_CONTEXT_KEY, SUBJECT_CONTEXT_KEY)]
    # the reasoning routes, the jobs (the otlp_release job opens the OTLP spans that waited, sealed), the subjects
    for fragment in ("Functionreasoning", "JobsFunction", "Functionsubjects"):
        statements = _key_statements(resources, _role_of(resources, fragment))
        allows = [
            s for s in statements if s["Effect"] == "Allow" and "kms:EncryptionContext" in str(s.get("Condition"))
        ]
        assert [(sorted(s["Action"]), s["Condition"]) for s in allows] == [
            (["kms:Decrypt", "kms:GenerateDataKey"], {"StringLike": {key: "*"}}) for key in condition_keys
        ], fragment
        denies = [s for s in statements if s["Effect"] == "Deny"]
        assert len(denies) == 1 and denies[0]["Action"] == "kms:Decrypt", fragment
        # Denied when both contexts are absent, unless DynamoDB or S3 decrypts at rest for the function.
        assert denies[0]["Condition"]["Null"] == dict.fromkeys(condition_keys, "true")
        via = json.dumps(denies[0]["Condition"]["StringNotEquals"]["kms:ViaService"])
        assert "dynamodb." in via and "s3." in via


def test_functions_that_do_not_seal_have_no_flow_context_grant(resources: dict[str, Any]) -> None:
    for fragment in ("Functionresearch", "Functionaudit"):
        statements = _key_statements(resources, _role_of(resources, fragment))
        assert not any("kms:EncryptionContext" in str(s.get("Condition")) for s in statements), fragment
