"""Which model values a process reads from AWS: only those its environment names and does not give directly."""

from __future__ import annotations

import pytest

from flowledger.config import load_settings
from flowledger.errors import ConfigurationError
from flowledger.llm.endpoint import ModelEndpoint, model_endpoint_for

SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:key-AbCdEf"


@pytest.fixture(autouse=True)
def _clean(clean_environment: None) -> None:
    pass


@pytest.mark.parametrize(
    ("environment", "reads"),
    [
        ({}, False),
        ({"FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN": SECRET}, True),
        ({"FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN": SECRET, "OPENAI_API_KEY": "sk-direct"}, False),
        ({"FLOWLEDGER_OPENAI_BASE_URL_PARAMETER": "/p"}, True),
        ({"FLOWLEDGER_OPENAI_BASE_URL_PARAMETER": "/p", "OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}, False),
        ({"FLOWLEDGER_CHAT_MODEL_PARAMETER": "/m"}, True),
        ({"FLOWLEDGER_CHAT_MODEL_PARAMETER": "/m", "FLOWLEDGER_CHAT_MODEL": "gpt-4o-mini"}, False),
        ({"FLOWLEDGER_CHAT_MODEL_PARAMETER": "/m", "OPENAI_API_KEY": "sk-direct"}, True),
    ],
)
def test_aws_is_read_only_for_a_named_value_not_given_directly(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], reads: bool
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert load_settings().reads_model_config_from_aws is reads


def test_values_given_directly_make_the_endpoint_without_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-direct")
    monkeypatch.setenv("FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN", SECRET)
    monkeypatch.setattr("flowledger.llm.aws_model_config.endpoint_from_aws", pytest.fail)  # never reached
    assert model_endpoint_for(load_settings()) == ModelEndpoint("sk-direct", None, "gpt-4o-mini")


def test_no_key_and_no_server_is_the_offline_endpoint() -> None:
    assert model_endpoint_for(load_settings()).offline
    assert not ModelEndpoint(None, "http://127.0.0.1:1/v1", "m").offline


def test_a_bad_cache_age_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWLEDGER_MODEL_CONFIG_MAX_AGE_SECONDS", "0")
    with pytest.raises(ConfigurationError, match="FLOWLEDGER_MODEL_CONFIG_MAX_AGE_SECONDS"):
        load_settings()
