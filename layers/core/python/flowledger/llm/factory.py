"""Which chat model the settings ask for: an OpenAI-compatible server, or the offline default."""

from __future__ import annotations

from flowledger.config import Settings
from flowledger.llm.ports import ChatModel


def chat_model_for(settings: Settings) -> ChatModel:
    if settings.uses_offline_model:
        from flowledger.llm.offline import OfflineChatModel

        return OfflineChatModel()
    from flowledger.llm.openai_adapter import OpenAIChatModel

    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    return OpenAIChatModel(settings.chat_model, key, settings.openai_base_url)
