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
functions that call a chat model get the grants and the environment: the chat function today. Without
context nothing is granted or set, and the chat answers with the offline model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Node

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
        value = node.try_get_context(MODEL_CONTEXT)
        if value is None or value == "":
            return cls()
        if isinstance(value, str):  # from `cdk -c 'flowledger:model={...}'`
            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError(f"{MODEL_CONTEXT} must be a JSON object") from None
        if not isinstance(value, dict):
            raise ValueError(f"{MODEL_CONTEXT} must be an object with any of {', '.join(KEYS)}")
        unknown = sorted(set(value) - set(KEYS))
        if unknown:
            raise ValueError(f"{MODEL_CONTEXT}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
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


def _check(value: dict[str, Any], key: str, pattern: re.Pattern[str], what: str) -> None:
    if key in value and not pattern.match(value[key]):
        raise ValueError(f"{MODEL_CONTEXT}.{key} must be {what}, not {value[key]!r}")
