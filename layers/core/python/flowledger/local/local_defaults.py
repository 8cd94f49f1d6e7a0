"""What the local server turns on by default that a deployment leaves to its configuration.

Each default is an override of ``load_settings``, so the chat app and the function workers (which
rebuild their settings from ``settings_environment``) get the same value; a variable the developer
set decides instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CONTINUITY_VARIABLE = "ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY"


def local_continuity_default(environ: Mapping[str, str]) -> dict[str, Any]:
    """Conversation continuity on for the local server, unless its variable is set (then it decides).

    An override of ``load_settings``, so the chat app and the function workers (which rebuild their
    settings from ``settings_environment``) get the same value. pydantic-settings reads variable
    names case-insensitively, so a lower-case spelling counts as set too.
    """
    if any(name.upper() == CONTINUITY_VARIABLE for name in environ):
        return {}
    return {"enable_mixed_source_conversation_continuity": True}


# The research loop runs locally as it would in a deployment that turned it on: the agents' flows
# are recorded, weak results and rejected claims outside the backlog enqueue, and the consumer job dispatches them.
RESEARCH_LOOP_VARIABLES = {
    "REASONING_FLOW_CAPTURE_ENABLED": "reasoning_flow_capture_enabled",
    "RESEARCH_AUTO_ENQUEUE_ENABLED": "research_auto_enqueue_enabled",
    "CRITIC_AUTO_ENQUEUE_ENABLED": "critic_auto_enqueue_enabled",
    "BACKLOG_CONSUMER_ENABLED": "backlog_consumer_enabled",
}


def local_research_defaults(environ: Mapping[str, str]) -> dict[str, Any]:
    """Each research-loop flag on for the local server, unless its variable is set (then it decides)."""
    named = {name.upper() for name in environ}
    return {field: True for variable, field in RESEARCH_LOOP_VARIABLES.items() if variable not in named}
