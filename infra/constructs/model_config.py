"""Where the deployed functions find their chat model: CDK context ``flowledger:model``.

``{"secretArn": ..., "baseUrlParameter": ..., "modelParameter": ...}``, or ``"baseUrl"`` / ``"model"``
as literal values instead of the two parameters (every key optional, a JSON string with ``-c``):

- ``secretArn``: the full ARN of a Secrets Manager secret whose string value is the API key
  (``secretsmanager:GetSecretValue`` on that secret, ``FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN``);
- ``baseUrlParameter`` / ``modelParameter``: names of SSM String parameters holding the base URL and
  the model name (``ssm:GetParameter`` on each, ``FLOWLEDGER_OPENAI_BASE_URL_PARAMETER`` /
  ``FLOWLEDGER_CHAT_MODEL_PARAMETER``);
- ``baseUrl`` / ``model``: the values themselves (``OPENAI_BASE_URL`` / ``FLOWLEDGER_CHAT_MODEL``), no grant.

The functions read the named values at run time (``flowledger.llm.aws_model_config``). Only the
functions that call a model get the grants and the environment: the chat function, the jobs function
(the research agents run in the backlog consumer), and those that embed with OpenAI when
``flowledger:embeddings`` says so (see :class:`EmbeddingModels`). Without context
nothing is granted or set, and the chat answers with the offline model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Node

from flowledger.config import KnowledgeEmbeddingModel, PathwayEmbeddingModel
from infra.constructs.context import context_object

MODEL_CONTEXT = "flowledger:model"
KEYS = ("secretArn", "baseUrlParameter", "modelParameter", "baseUrl", "model")
# A full secret ARN (with the six-character suffix Secrets Manager adds): IAM matches it exactly.
_SECRET_ARN = re.compile(r"^arn:aws[\w-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+-[A-Za-z0-9]{6}$")
_PARAMETER_NAME = re.compile(r"^/?[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
_BASE_URL = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
_MODEL_NAME = re.compile(r"^\S{1,200}$")


@dataclass(frozen=True)
class ModelAccess:
    """The chat model's configuration for the functions that call it; nothing by default."""

    secret_arn: str | None = None
    base_url_parameter: str | None = None
    model_parameter: str | None = None
    base_url: str | None = None
    model: str | None = None

    @classmethod
    def from_context(cls, node: Node) -> ModelAccess:
        """Read and check ``flowledger:model``; a bad value fails the synth with a message naming the key."""
        value = context_object(node, MODEL_CONTEXT, KEYS)
        if value is None:
            return cls()
        for key in KEYS:
            if key in value and not isinstance(value[key], str):
                raise ValueError(f"{MODEL_CONTEXT}.{key} must be a string")
        for literal, parameter in (("baseUrl", "baseUrlParameter"), ("model", "modelParameter")):
            if literal in value and parameter in value:
                raise ValueError(f"{MODEL_CONTEXT}: give {literal} or {parameter}, not both")
        _check(value, "secretArn", _SECRET_ARN, "the full ARN of a Secrets Manager secret (with its suffix)")
        _check(value, "baseUrlParameter", _PARAMETER_NAME, "an SSM parameter name")
        _check(value, "modelParameter", _PARAMETER_NAME, "an SSM parameter name")
        _check(value, "baseUrl", _BASE_URL, "an http(s) URL")
        _check(value, "model", _MODEL_NAME, "a model name")
        return cls(
            secret_arn=value.get("secretArn"),
            base_url_parameter=value.get("baseUrlParameter"),
            model_parameter=value.get("modelParameter"),
            base_url=value.get("baseUrl"),
            model=value.get("model"),
        )

    @property
    def reaches_a_server(self) -> bool:
        """A key or a base URL is configured: the functions given this access call a real model."""
        return bool(self.secret_arn or self.base_url_parameter or self.base_url)

    def environment(self) -> dict[str, str]:
        """The settings a model-calling function reads (see ``flowledger.config``); only what is configured."""
        named = {
            "FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN": self.secret_arn,
            "FLOWLEDGER_OPENAI_BASE_URL_PARAMETER": self.base_url_parameter,
            "FLOWLEDGER_CHAT_MODEL_PARAMETER": self.model_parameter,
            "OPENAI_BASE_URL": self.base_url,
            "FLOWLEDGER_CHAT_MODEL": self.model,
        }
        return {name: value for name, value in named.items() if value}

    def apply(self, function: lambda_.Function) -> None:
        """Give ``function`` the environment and read access to exactly the secret and parameters named."""
        for name, value in self.environment().items():
            function.add_environment(name, value)
        if self.secret_arn:
            function.add_to_role_policy(
                iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[self.secret_arn])
            )
        parameters = [p for p in (self.base_url_parameter, self.model_parameter) if p]
        if parameters:
            stack = Stack.of(function)
            function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["ssm:GetParameter"],
                    resources=[
                        stack.format_arn(
                            service="ssm",
                            resource="parameter",
                            # A parameter's ARN is ...:parameter/NAME for "/NAME" and for "NAME" alike.
                            resource_name=p.lstrip("/"),
                            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
                        )
                        for p in dict.fromkeys(parameters)
                    ],
                )
            )


EMBEDDINGS_CONTEXT = "flowledger:embeddings"
# The models a deployment can run: MiniLM's weights are an optional extra the layers do not carry.
PATHWAY_MODELS = (
    PathwayEmbeddingModel.HASH_BUCKET_V1.value,
    PathwayEmbeddingModel.OPENAI_TEXT_3_SMALL.value,
    PathwayEmbeddingModel.VOYAGE_3_5_LITE.value,
)
VOYAGE = PathwayEmbeddingModel.VOYAGE_3_5_LITE.value
EMBEDDING_KEYS = ("pathways", "knowledge", "voyageSecretArn")
KNOWLEDGE_MODELS = tuple(m.value for m in KnowledgeEmbeddingModel)
OPENAI_EMBEDDING = PathwayEmbeddingModel.OPENAI_TEXT_3_SMALL.value


@dataclass(frozen=True)
class EmbeddingModels:
    """Which embedding model pathways and knowledge retrieval use: CDK context ``flowledger:embeddings``,
    ``{"pathways": "hash_bucket_v1" | "openai_text_3_small" | "voyage_3_5_lite", "knowledge": "none" |
    "hash_bucket_v1" | "openai_text_3_small", "voyageSecretArn": ...}`` (each optional; the defaults are
    the settings' own). Voyage needs ``voyageSecretArn``, the full ARN of the secret holding its key:
    only the pathway functions may read it.

    The pathway model is set on the functions that match and embed pathways (the reasoning routes and
    the jobs), the knowledge model on those that index and search documents (documents, chat, and the
    jobs, where the research agents search). An
    OpenAI model needs ``flowledger:model`` to name a key or a server, and gives exactly the functions
    that use it the model's access (:meth:`ModelAccess.apply`).
    """

    pathways: str = PathwayEmbeddingModel.HASH_BUCKET_V1.value
    knowledge: str = KnowledgeEmbeddingModel.NONE.value
    voyage_secret_arn: str | None = None

    @classmethod
    def from_context(cls, node: Node, model: ModelAccess) -> EmbeddingModels:
        """Read and check ``flowledger:embeddings``; a bad value fails the synth with a message naming the key."""
        value = context_object(node, EMBEDDINGS_CONTEXT, EMBEDDING_KEYS)
        if value is None:
            return cls()
        for key, allowed in (("pathways", PATHWAY_MODELS), ("knowledge", KNOWLEDGE_MODELS)):
            if key in value and value[key] not in allowed:
                raise ValueError(f"{EMBEDDINGS_CONTEXT}.{key} must be one of {', '.join(allowed)}, not {value[key]!r}")
        secret = value.get("voyageSecretArn")
        if secret is not None and not (isinstance(secret, str) and _SECRET_ARN.match(secret)):
            raise ValueError(f"{EMBEDDINGS_CONTEXT}.voyageSecretArn must be the full ARN of a Secrets Manager secret")
        if value.get("pathways") == VOYAGE and not secret:
            raise ValueError(f"{EMBEDDINGS_CONTEXT} names {VOYAGE}, which needs voyageSecretArn (the key's secret)")
        choice = cls(
            pathways=value.get("pathways", cls.pathways),
            knowledge=value.get("knowledge", cls.knowledge),
            voyage_secret_arn=secret,
        )
        if OPENAI_EMBEDDING in (choice.pathways, choice.knowledge) and not model.reaches_a_server:
            raise ValueError(
                f"{EMBEDDINGS_CONTEXT} names {OPENAI_EMBEDDING}, which needs {MODEL_CONTEXT} to give "
                "secretArn, baseUrl or baseUrlParameter"
            )
        return choice

    def apply(
        self,
        model: ModelAccess,
        *,
        chat_functions: tuple[lambda_.Function, ...],
        pathway_functions: tuple[lambda_.Function, ...],
        knowledge_functions: tuple[lambda_.Function, ...],
    ) -> None:
        """Set each function's embedding model, and give the model's access, once each, to the functions
        that call the chat model and to those that embed with OpenAI."""
        calling = {function.node.path: function for function in chat_functions}
        for functions, variable, chosen in (
            (pathway_functions, "PATHWAY_EMBEDDING_MODEL", self.pathways),
            (knowledge_functions, "FLOWLEDGER_KNOWLEDGE_EMBEDDING_MODEL", self.knowledge),
        ):
            for function in functions:
                function.add_environment(variable, chosen)
                if chosen == OPENAI_EMBEDDING:
                    calling[function.node.path] = function
        for function in calling.values():
            model.apply(function)
        if self.pathways == VOYAGE and self.voyage_secret_arn:
            for function in pathway_functions:
                function.add_environment("FLOWLEDGER_VOYAGE_API_KEY_SECRET_ARN", self.voyage_secret_arn)
                function.add_to_role_policy(
                    iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[self.voyage_secret_arn])
                )


def _check(value: dict[str, Any], key: str, pattern: re.Pattern[str], what: str) -> None:
    if key in value and not pattern.match(value[key]):
        raise ValueError(f"{MODEL_CONTEXT}.{key} must be {what}, not {value[key]!r}")
