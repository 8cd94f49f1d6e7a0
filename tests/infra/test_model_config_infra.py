"""The chat model's configuration in the template: with ``flowledger:model`` context, the chat function
alone may read exactly the named secret and parameters and is told their names; without it, nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from infra.constructs.model_config import EMBEDDINGS_CONTEXT, MODEL_CONTEXT, EmbeddingModels, ModelAccess
from tests.infra.synth import resources_with
from tests.infra.test_diagnosis_infra import chat_function, functions, render, statements_by_role

SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:flowledger-openai-key-AbCdEf"
CONTEXT: dict[str, Any] = {
    MODEL_CONTEXT: {"secretArn": SECRET, "baseUrlParameter": "/flowledger/base-url", "modelParameter": "chat-model"}
}
PARAMETER_ARNS = {
    "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/flowledger/base-url",
    "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/chat-model",
}
MODEL_VARIABLES = {
    "OPENAI_API_KEY",
    "FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN",
    "FLOWLEDGER_OPENAI_BASE_URL_PARAMETER",
    "FLOWLEDGER_CHAT_MODEL_PARAMETER",
    "OPENAI_BASE_URL",
    "FLOWLEDGER_CHAT_MODEL",
}


def synthesized(context: dict[str, Any]) -> dict[str, Any]:
    """The real app's resources with ``context`` on top of cdk.json's (as ``cdk -c`` puts it)."""
    return resources_with(context)


@pytest.fixture(scope="module")
def configured() -> Iterator[dict[str, Any]]:
    yield synthesized(CONTEXT)


def model_statements(statements: list[dict[str, Any]]) -> list[tuple[list[str], list[str]]]:
    """(actions, resources) of each statement granting an SSM or Secrets Manager action (or every action)."""
    picked = []
    for statement in statements:
        actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        listed = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        if any(a.startswith(("ssm:", "secretsmanager:")) or a == "*" for a in actions):
            picked.append((sorted(actions), sorted(render(r) for r in listed)))
    return picked


# The functions that call a chat model: the chat, and the jobs (the research agents run in the consumer).
MODEL_CALLERS = ("ChatFunction", "JobsFunction")


def test_only_the_model_callers_may_read_exactly_the_named_secret_and_parameters(
    configured: dict[str, Any],
) -> None:
    by_role = statements_by_role(configured)
    caller_roles = {
        function["Properties"]["Role"]["Fn::GetAtt"][0]
        for key, function in functions(configured).items()
        if key.startswith(MODEL_CALLERS)
    }
    assert len(caller_roles) == len(MODEL_CALLERS)
    for role in caller_roles:
        assert sorted(model_statements(by_role[role])) == [
            (["secretsmanager:GetSecretValue"], [SECRET]),
            (["ssm:GetParameter"], sorted(PARAMETER_ARNS)),
        ]
    others = {role: model_statements(s) for role, s in by_role.items() if role not in caller_roles}
    assert {role: found for role, found in others.items() if found} == {}


def test_the_model_callers_are_told_the_names_and_no_other_function_is(configured: dict[str, Any]) -> None:
    names = {
        "FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN": SECRET,
        "FLOWLEDGER_OPENAI_BASE_URL_PARAMETER": "/flowledger/base-url",
        "FLOWLEDGER_CHAT_MODEL_PARAMETER": "chat-model",
    }
    for key, function in functions(configured).items():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        told = {k: variables[k] for k in MODEL_VARIABLES & set(variables)}
        assert told == (names if key.startswith(MODEL_CALLERS) else {}), key


def test_without_context_nothing_is_granted_or_set() -> None:
    # A trial may run on the offline model: no flowledger:model (and no diagnosis secret).
    resources = resources_with({MODEL_CONTEXT: None, "flowledger:stage": "dev"})
    for statements in statements_by_role(resources).values():
        for statement in statements:
            actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
            assert not [a for a in actions if a.startswith(("ssm:", "secretsmanager:"))], statement
    for function in functions(resources).values():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        assert not MODEL_VARIABLES & set(variables)


def test_the_stack_applies_the_model_configuration_to_the_chat_function(configured: dict[str, Any]) -> None:
    variables = chat_function(configured)["Properties"]["Environment"]["Variables"]
    assert variables["FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN"] == SECRET


def probe(context: dict[str, Any]) -> dict[str, Any]:
    """A one-function stack with the construct applied: its function and its policy statements."""
    app = App(context=context)
    stack = Stack(app, "Probe")
    function = lambda_.Function(
        stack, "Fn", runtime=lambda_.Runtime.PYTHON_3_12, handler="h.h", code=lambda_.Code.from_inline("x=1")
    )
    ModelAccess.from_context(stack.node).apply(function)
    return dict(Template.from_stack(stack).to_json()["Resources"])


def test_literal_values_are_set_without_any_grant() -> None:
    resources = probe(
        {
            MODEL_CONTEXT: '{"baseUrl": "https://bedrock-runtime.us-west-2.amazonaws.com/openai/v1", '
            '"model": "openai.gpt-oss-120b-1:0"}'
        }
    )
    (function,) = functions(resources).values()
    assert function["Properties"]["Environment"]["Variables"] == {
        "OPENAI_BASE_URL": "https://bedrock-runtime.us-west-2.amazonaws.com/openai/v1",
        "FLOWLEDGER_CHAT_MODEL": "openai.gpt-oss-120b-1:0",
    }
    assert not [r for r in resources.values() if r["Type"] == "AWS::IAM::Policy"]


def test_no_context_means_no_environment_and_no_policy() -> None:
    resources = probe({})
    (function,) = functions(resources).values()
    assert "Environment" not in function["Properties"]
    assert not [r for r in resources.values() if r["Type"] == "AWS::IAM::Policy"]


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ({"secretArn": "my-secret"}, "secretArn"),
        ({"secretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:openaikey"}, "secretArn"),
        ({"baseUrlParameter": "has spaces/in it"}, "baseUrlParameter"),
        ({"modelParameter": "a//b"}, "modelParameter"),
        ({"baseUrl": "bedrock-runtime.us-west-2.amazonaws.com"}, "baseUrl"),
        ({"model": "two words"}, "model"),
        ({"model": 4}, "model"),
        ({"baseUrl": "https://x/v1", "baseUrlParameter": "/p"}, "baseUrl"),
        ({"apiKey": "sk-inline"}, "apiKey"),
        ("not json", MODEL_CONTEXT),
        ('["a list"]', MODEL_CONTEXT),
    ],
)
def test_a_bad_value_fails_the_synth_naming_the_key(value: Any, key: str) -> None:
    with pytest.raises(ValueError, match=key) as failure:
        probe({MODEL_CONTEXT: value})
    assert MODEL_CONTEXT in str(failure.value)


EMBEDDING_CONTEXT: dict[str, Any] = {
    **CONTEXT,
    EMBEDDINGS_CONTEXT: {"pathways": "openai_text_3_small", "knowledge": "openai_text_3_small"},
}
# Logical-id prefixes of the functions that embed each kind of text (the chat function always calls a model).
PATHWAY_EMBEDDERS = ("Functionreasoning", "JobsFunction")
KNOWLEDGE_EMBEDDERS = ("Functiondocuments", "ChatFunction", "JobsFunction")


def by_prefix(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each function by its logical id's prefix (the part before CDK's hash)."""
    return {key[:-8]: function for key, function in functions(resources).items()}


@pytest.fixture(scope="module")
def embedding() -> Iterator[dict[str, Any]]:
    yield synthesized(EMBEDDING_CONTEXT)


def test_openai_embeddings_grant_the_model_to_exactly_the_functions_that_embed(embedding: dict[str, Any]) -> None:
    by_role = statements_by_role(embedding)
    granted = {
        prefix
        for prefix, function in by_prefix(embedding).items()
        if model_statements(by_role.get(function["Properties"]["Role"]["Fn::GetAtt"][0], []))
    }
    assert granted == set(PATHWAY_EMBEDDERS + KNOWLEDGE_EMBEDDERS + MODEL_CALLERS)
    for prefix in granted:  # once each: the chat function embeds and chats on one grant
        role = by_prefix(embedding)[prefix]["Properties"]["Role"]["Fn::GetAtt"][0]
        assert sorted(model_statements(by_role[role])) == [
            (["secretsmanager:GetSecretValue"], [SECRET]),
            (["ssm:GetParameter"], sorted(PARAMETER_ARNS)),
        ], prefix


def test_each_embedding_function_is_told_its_model_and_the_model_names(embedding: dict[str, Any]) -> None:
    for prefix, function in by_prefix(embedding).items():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        assert (variables.get("PATHWAY_EMBEDDING_MODEL") == "openai_text_3_small") == (prefix in PATHWAY_EMBEDDERS)
        assert (variables.get("FLOWLEDGER_KNOWLEDGE_EMBEDDING_MODEL") == "openai_text_3_small") == (
            prefix in KNOWLEDGE_EMBEDDERS
        ), prefix
        told = variables.get("FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN") == SECRET
        assert told == (prefix in PATHWAY_EMBEDDERS + KNOWLEDGE_EMBEDDERS + MODEL_CALLERS), prefix


def test_by_default_the_embedders_run_the_offline_models(resources: dict[str, Any]) -> None:
    prefixes = by_prefix(resources)
    for prefix in PATHWAY_EMBEDDERS:
        assert prefixes[prefix]["Properties"]["Environment"]["Variables"]["PATHWAY_EMBEDDING_MODEL"] == "hash_bucket_v1"
    for prefix in KNOWLEDGE_EMBEDDERS:
        variables = prefixes[prefix]["Properties"]["Environment"]["Variables"]
        assert variables["FLOWLEDGER_KNOWLEDGE_EMBEDDING_MODEL"] == "none"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"pathways": "minilm_l6_v2"}, "flowledger:embeddings.pathways must be one of"),
        ({"knowledge": "bert"}, "flowledger:embeddings.knowledge must be one of"),
        ({"vectors": "none"}, "unknown key 'vectors'"),
        ("[1]", "must be an object"),
    ],
)
def test_a_bad_embeddings_context_fails_the_synth_naming_the_key(value: Any, message: str) -> None:
    app = App(context={EMBEDDINGS_CONTEXT: value})
    with pytest.raises(ValueError, match=message):
        EmbeddingModels.from_context(Stack(app, "Probe").node, ModelAccess())


def test_openai_embeddings_without_a_key_or_server_fail_the_synth() -> None:
    app = App(context={EMBEDDINGS_CONTEXT: {"knowledge": "openai_text_3_small"}, MODEL_CONTEXT: {"model": "m"}})
    stack = Stack(app, "Probe")
    with pytest.raises(ValueError, match="needs flowledger:model to give secretArn, baseUrl or baseUrlParameter"):
        EmbeddingModels.from_context(stack.node, ModelAccess.from_context(stack.node))


VOYAGE_SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:flowledger-voyage-key-AbCdEf"


def test_voyage_pathways_read_exactly_their_secret_and_nothing_of_openais() -> None:
    # A trial on the offline chat model: no OpenAI key anywhere to be confused with Voyage's.
    voyage = {"pathways": "voyage_3_5_lite", "voyageSecretArn": VOYAGE_SECRET}
    resources = synthesized({EMBEDDINGS_CONTEXT: voyage, MODEL_CONTEXT: None, "flowledger:stage": "dev"})
    by_role = statements_by_role(resources)
    for prefix, function in by_prefix(resources).items():
        variables = (
            function["Properties"].get("Environment", {}).get("Variables", {})
        )  # a trial's bucket emptier has none
        reads = model_statements(by_role.get(function["Properties"]["Role"]["Fn::GetAtt"][0], []))
        if prefix in PATHWAY_EMBEDDERS:
            assert variables["PATHWAY_EMBEDDING_MODEL"] == "voyage_3_5_lite"
            assert variables["FLOWLEDGER_VOYAGE_API_KEY_SECRET_ARN"] == VOYAGE_SECRET
            assert reads == [(["secretsmanager:GetSecretValue"], [VOYAGE_SECRET])], prefix
        else:
            assert "FLOWLEDGER_VOYAGE_API_KEY_SECRET_ARN" not in variables and reads == [], prefix


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"pathways": "voyage_3_5_lite"}, "needs voyageSecretArn"),
        ({"pathways": "voyage_3_5_lite", "voyageSecretArn": "my-key"}, "voyageSecretArn must be the full ARN"),
    ],
)
def test_voyage_without_a_secret_fails_the_synth(value: dict[str, Any], message: str) -> None:
    app = App(context={EMBEDDINGS_CONTEXT: value})
    with pytest.raises(ValueError, match=message):
        EmbeddingModels.from_context(Stack(app, "Probe").node, ModelAccess())
