"""What the diagnosis agent may read in AWS: nothing by default; with context, exactly the named log
groups and database, granted to the chat function alone and told to it through its environment."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from aws_cdk import App

from flowledger.config import DiagnosisSqlBackend, load_settings
from flowledger.diagnosis.wiring import diagnosis_tools
from flowledger.services import build_services
from infra.constructs.diagnosis import DATA_API_CONTEXT, LOG_GROUPS_CONTEXT, DataApiDatabase, DiagnosisAccess
from tests.infra.synth import TEST_MODEL, resources_with

CLUSTER = "arn:aws:rds:eu-west-1:123456789012:cluster:app-db"
SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:app-readonly-AbCdEf"
CONTEXT: dict[str, Any] = {
    LOG_GROUPS_CONTEXT: ["/app/checkout", "/app/payments"],
    DATA_API_CONTEXT: {"resourceArn": CLUSTER, "secretArn": SECRET, "database": "shop"},
}
DIAGNOSIS_ACTIONS = ("logs:", "rds-data:", "secretsmanager:")


@pytest.fixture(scope="module")
def configured() -> Iterator[dict[str, Any]]:
    """The real app synthesized with the diagnosis context on top of cdk.json's, as ``cdk -c`` would
    put it (the CLI's CDK_CONTEXT_JSON cannot be used: the jsii runtime read its environment at start)."""
    yield resources_with(CONTEXT)  # raises on any unacknowledged cdk-nag finding


def functions(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in resources.items() if v["Type"] == "AWS::Lambda::Function"}


def chat_function(resources: dict[str, Any]) -> dict[str, Any]:
    (chat,) = [f for key, f in functions(resources).items() if key.startswith("ChatFunction")]
    return chat


def statements_by_role(resources: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    # A role whose inline policy outgrows IAM's size limit gets the rest as a managed "overflow" policy.
    policies = (v for v in resources.values() if v["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"))
    for policy in policies:
        for role in policy["Properties"].get("Roles", []):
            found.setdefault(role["Ref"], []).extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def diagnosis_statements(statements: list[dict[str, Any]]) -> list[tuple[list[str], list[str]]]:
    """(actions, resources) of each statement naming a logs, rds-data or secretsmanager action, resources
    rendered; the model's key (the tests' stacks name one, as a production stage must) is not diagnosis's."""
    picked = []
    for statement in statements:
        actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        if any(a.startswith(DIAGNOSIS_ACTIONS) for a in actions):
            listed = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            if [render(r) for r in listed] == [TEST_MODEL["secretArn"]]:
                continue
            picked.append((actions, [render(r) for r in listed]))
    return picked


def render(value: Any) -> str:
    """A resource ARN as text: ``Fn::Join`` pieces joined, pseudo parameters as ``${AWS::Region}``."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return "${" + str(value["Ref"]) + "}"
    separator, parts = value["Fn::Join"]
    return str(separator).join(render(part) for part in parts)


def settings_from(function: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The chat function's diagnosis settings as ``load_settings`` reads them from its environment."""
    for name, value in function["Properties"]["Environment"]["Variables"].items():
        if name.startswith("FLOWLEDGER_DIAGNOSIS_"):
            monkeypatch.setenv(name, value)
    return load_settings()


class NoKnowledge:
    def lookup(self, query: str, limit: int = 4) -> Any:
        raise AssertionError("not called: only the offered tools are looked at")


def test_by_default_no_function_may_read_logs_or_a_database(resources: dict[str, Any]) -> None:
    for statements in statements_by_role(resources).values():
        assert diagnosis_statements(statements) == []


def test_by_default_the_chat_function_offers_neither_logs_nor_sql(
    resources: dict[str, Any], clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    variables = chat_function(resources)["Properties"]["Environment"]["Variables"]
    # Set to nothing, not left out: the settings' default is the local demo's two groups.
    assert variables["FLOWLEDGER_DIAGNOSIS_LOG_GROUPS"] == ""
    assert "FLOWLEDGER_DIAGNOSIS_SQL_BACKEND" not in variables
    settings = settings_from(chat_function(resources), monkeypatch)
    tools = diagnosis_tools(build_services(settings), NoKnowledge())
    assert [tool.spec.name for tool in tools] == ["lookup_knowledge"]


def test_configured_log_groups_and_database_are_granted_to_the_chat_function_alone(
    configured: dict[str, Any],
) -> None:
    chat_role = chat_function(configured)["Properties"]["Role"]["Fn::GetAtt"][0]
    by_role = statements_by_role(configured)
    group_arn = "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:"
    assert sorted(diagnosis_statements(by_role[chat_role])) == sorted(
        [
            (
                ["logs:FilterLogEvents"],
                [
                    f"{group_arn}/app/checkout",
                    f"{group_arn}/app/payments",
                    f"{group_arn}/app/checkout:*",
                    f"{group_arn}/app/payments:*",
                ],
            ),
            (["rds-data:ExecuteStatement"], [CLUSTER]),
            (["secretsmanager:GetSecretValue"], [SECRET]),
        ]
    )
    for role, statements in by_role.items():
        if role != chat_role:
            assert diagnosis_statements(statements) == [], role


def test_configured_context_reaches_the_chat_functions_settings(
    configured: dict[str, Any], clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_from(chat_function(configured), monkeypatch)
    assert settings.diagnosis_log_group_list == ("/app/checkout", "/app/payments")
    assert settings.diagnosis_sql_backend is DiagnosisSqlBackend.DATA_API
    assert (
        settings.diagnosis_data_api_resource_arn,
        settings.diagnosis_data_api_secret_arn,
        settings.diagnosis_data_api_database,
    ) == (CLUSTER, SECRET, "shop")
    # Only the chat function runs the diagnosis executor.
    others = [f for f in functions(configured).values() if f is not chat_function(configured)]
    assert others and all(
        not any(name.startswith("FLOWLEDGER_DIAGNOSIS_") for name in f["Properties"]["Environment"]["Variables"])
        for f in others
    )


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ({LOG_GROUPS_CONTEXT: "/app/a, /app/b,"}, DiagnosisAccess(log_groups=("/app/a", "/app/b"))),
        (
            {DATA_API_CONTEXT: json.dumps(CONTEXT[DATA_API_CONTEXT])},  # a string, as `cdk -c` passes it
            DiagnosisAccess(data_api=DataApiDatabase(CLUSTER, SECRET, "shop")),
        ),
        ({}, DiagnosisAccess()),
    ],
)
def test_context_values_are_read_as_cdk_json_or_the_command_line_gives_them(
    context: dict[str, Any], expected: Any
) -> None:
    assert DiagnosisAccess.from_context(App(context=context).node) == expected


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({LOG_GROUPS_CONTEXT: ["/app/ok", "no spaces allowed"]}, "is not a CloudWatch Logs group name"),
        ({LOG_GROUPS_CONTEXT: "*"}, "is not a CloudWatch Logs group name"),
        ({LOG_GROUPS_CONTEXT: {"group": "/app"}}, "must be a list"),
        ({DATA_API_CONTEXT: {"resourceArn": CLUSTER, "database": "shop"}}, "exactly resourceArn, secretArn"),
        ({DATA_API_CONTEXT: {**CONTEXT[DATA_API_CONTEXT], "resourceArn": "*"}}, "Aurora cluster ARN"),
        ({DATA_API_CONTEXT: {**CONTEXT[DATA_API_CONTEXT], "secretArn": "arn:aws:secretsmanager:*"}}, "secret ARN"),
        ({DATA_API_CONTEXT: "{not json"}, "must be a JSON object"),
    ],
)
def test_a_bad_context_value_stops_the_synth_with_a_message_naming_it(context: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as failure:
        DiagnosisAccess.from_context(App(context=context).node)
    assert str(failure.value).startswith(next(iter(context)))
