"""Where the OpenAI-compatible server is and how to reach it: given directly in the settings, or named
there and read from Secrets Manager and SSM (``flowledger.llm.aws_model_config``). The chat model and
the OpenAI embeddings share it."""

from __future__ import annotations

from dataclasses import dataclass

from flowledger.config import Settings


@dataclass(frozen=True)
class ModelEndpoint:
    """Where the chat model is and how to reach it, once every value is known."""

    api_key: str | None
    base_url: str | None
    model: str

    @property
    def offline(self) -> bool:
        """No key and no server: the offline model answers (the same rule as ``Settings.uses_offline_model``)."""
        return self.api_key is None and self.base_url is None


def model_endpoint_for(settings: Settings) -> ModelEndpoint:
    """The endpoint from the settings, reading from Secrets Manager and SSM what they name there.

    Raises ``ModelUnavailable`` (``flowledger.llm.aws_model_config``) when a named value cannot be read.
    """
    if settings.reads_model_config_from_aws:
        from flowledger.llm.aws_model_config import endpoint_from_aws  # boto3 only where AWS holds the values

        return endpoint_from_aws(settings)
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    return ModelEndpoint(key, settings.openai_base_url, settings.chat_model)
