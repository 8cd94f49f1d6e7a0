"""Which chat model the settings ask for: an OpenAI-compatible server, or the offline default."""

from __future__ import annotations

from flowledger.config import Settings
from flowledger.llm.endpoint import model_endpoint_for
from flowledger.llm.ports import ChatModel


def chat_model_for(settings: Settings) -> ChatModel:
    """The chat model the settings configure; the offline model when no key or server is configured."""
    endpoint = model_endpoint_for(settings)
    if endpoint.offline:
        from flowledger.llm.offline import OfflineChatModel

        return OfflineChatModel()
    from flowledger.llm.openai_adapter import OpenAIChatModel

    return OpenAIChatModel(
        endpoint.model,
        endpoint.api_key,
        endpoint.base_url,
        structured_output=settings.structured_output,
        tool_calling=settings.tool_calling,
        max_tokens_cap=settings.model_max_tokens,
    )
