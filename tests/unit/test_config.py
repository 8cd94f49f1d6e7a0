from __future__ import annotations

import pytest

from flowledger.config import CriticDispatchStrategy, PathwayEmbeddingModel, load_settings
from flowledger.errors import ConfigurationError

pytestmark = pytest.mark.usefixtures("clean_environment")


def test_seed_flags_default_off_and_strategy_defaults_to_mark_for_review() -> None:
    settings = load_settings()
    assert not settings.reasoning_flow_capture_enabled
    assert not settings.research_auto_enqueue_enabled
    assert not settings.critic_auto_enqueue_enabled
    assert not settings.backlog_consumer_enabled
    assert not settings.enable_mixed_source_conversation_continuity
    assert settings.critic_dispatch_strategy is CriticDispatchStrategy.MARK_FOR_REVIEW
    assert settings.pathway_embedding_model is PathwayEmbeddingModel.HASH_BUCKET_V1
    assert settings.uses_offline_model


def test_flags_are_read_from_their_seed_variable_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REASONING_FLOW_CAPTURE_ENABLED", "true")
    monkeypatch.setenv("CRITIC_DISPATCH_STRATEGY", "re_research")
    monkeypatch.setenv("ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY", "1")
    settings = load_settings()
    assert settings.reasoning_flow_capture_enabled
    assert settings.critic_dispatch_strategy is CriticDispatchStrategy.RE_RESEARCH
    assert settings.enable_mixed_source_conversation_continuity


@pytest.mark.parametrize("variable", ["CRITIC_DISPATCH_STRATEGY", "PATHWAY_EMBEDDING_MODEL"])
def test_unknown_enum_value_fails_naming_the_variable(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "bogus")
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    assert variable in caught.value.message
    assert "'bogus'" in caught.value.message


def test_bad_boolean_fails_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLOG_CONSUMER_ENABLED", "perhaps")
    with pytest.raises(ConfigurationError, match="BACKLOG_CONSUMER_ENABLED"):
        load_settings()


def test_openai_embeddings_without_a_key_fail_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATHWAY_EMBEDDING_MODEL", "openai_text_3_small")
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        load_settings()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert load_settings().pathway_embedding_model is PathwayEmbeddingModel.OPENAI_TEXT_3_SMALL


@pytest.mark.parametrize(
    "variable", ["FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN", "FLOWLEDGER_OPENAI_BASE_URL_PARAMETER", "OPENAI_BASE_URL"]
)
def test_openai_embeddings_accept_a_key_or_server_named_in_aws(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    # A deployment names the key's secret (or the base URL's parameter); the value is read at first use.
    monkeypatch.setenv("PATHWAY_EMBEDDING_MODEL", "openai_text_3_small")
    monkeypatch.setenv("FLOWLEDGER_KNOWLEDGE_EMBEDDING_MODEL", "openai_text_3_small")
    monkeypatch.setenv(variable, "http://127.0.0.1:9/v1" if variable == "OPENAI_BASE_URL" else "/flowledger/x")
    settings = load_settings()
    assert not settings.uses_offline_model
    assert settings.pathway_embedding_model is PathwayEmbeddingModel.OPENAI_TEXT_3_SMALL


def test_api_key_is_never_shown_in_the_settings_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    settings = load_settings()
    assert "sk-very-secret" not in repr(settings)
    assert not settings.uses_offline_model


def test_minilm_without_its_extra_fails_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATHWAY_EMBEDDING_MODEL", "minilm_l6_v2")
    monkeypatch.setattr("flowledger.config._installed", lambda module: False)
    with pytest.raises(ConfigurationError, match=r"flowledger\[minilm\]"):
        load_settings()


def test_voyage_embeddings_without_their_key_fail_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATHWAY_EMBEDDING_MODEL", "voyage_3_5_lite")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")  # OpenAI's key is not Voyage's
    with pytest.raises(ConfigurationError, match="PATHWAY_EMBEDDING_MODEL=voyage_3_5_lite needs VOYAGE_API_KEY"):
        load_settings()
    monkeypatch.setenv("VOYAGE_API_KEY", "  \n")
    with pytest.raises(ConfigurationError, match="needs VOYAGE_API_KEY"):
        load_settings()
    monkeypatch.setenv("VOYAGE_API_KEY", "pa-test\n")  # pasted from a file: the adapter sends it stripped
    settings = load_settings()
    assert settings.pathway_embedding_model is PathwayEmbeddingModel.VOYAGE_3_5_LITE
    assert settings.voyage_base_url == "https://api.voyageai.com/v1"


def test_voyage_key_alone_does_not_switch_the_model_or_the_chat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOYAGE_API_KEY", "pa-test")
    settings = load_settings()
    assert settings.pathway_embedding_model is PathwayEmbeddingModel.HASH_BUCKET_V1
    assert settings.uses_offline_model


def test_voyage_key_is_never_shown_in_the_settings_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATHWAY_EMBEDDING_MODEL", "voyage_3_5_lite")
    monkeypatch.setenv("VOYAGE_API_KEY", "pa-very-secret")
    settings = load_settings()
    assert "pa-very-secret" not in repr(settings) and "pa-very-secret" not in str(settings.model_dump())


@pytest.mark.parametrize("url", ["ftp://api.voyageai.com/v1", "api.voyageai.com/v1", "https://api voyage/v1"])
def test_voyage_base_url_must_be_an_http_url(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("VOYAGE_BASE_URL", url)
    with pytest.raises(ConfigurationError, match="VOYAGE_BASE_URL"):
        load_settings()
    monkeypatch.setenv("VOYAGE_BASE_URL", "http://127.0.0.1:8080/v1")
    assert load_settings().voyage_base_url == "http://127.0.0.1:8080/v1"


@pytest.mark.parametrize("key", ["pa-sec ret", "pa-sec\nret", "pa-sécret"])
def test_a_voyage_key_unfit_for_a_header_fails_at_start_without_showing_it(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    monkeypatch.setenv("PATHWAY_EMBEDDING_MODEL", "voyage_3_5_lite")
    monkeypatch.setenv("VOYAGE_API_KEY", key)
    with pytest.raises(ConfigurationError, match="VOYAGE_API_KEY must be printable ASCII") as caught:
        load_settings()
    assert "sec" not in caught.value.message
