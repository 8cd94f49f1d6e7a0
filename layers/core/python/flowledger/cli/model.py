"""`flowledger model probe`: what an OpenAI-compatible endpoint gives the chat."""

from __future__ import annotations

import argparse
import json
from typing import Any

from flowledger.cli.failures import CommandFailed
from flowledger.cli.options import actions, command, json_option, positive_int


def add_commands(commands: Any) -> None:
    """Add ``model probe``."""
    model = actions(command(commands, "model", "check the chat model's endpoint"), "model_command")
    probe = command(
        model,
        "probe",
        "check an OpenAI-compatible endpoint the way the chat uses it, and say which modes it gets",
        cmd_model_probe,
        "One bounded call per check: the models list, a plain chat, each structured-output mode (json_schema,"
        " json_object with the schema, json_object with the schema in the prompt, prompt only) and whether the"
        " answer obeys the schema, tools with tool_choice auto, parallel tool calls, the next-action schema,"
        " max_tokens and streaming usage. Exits 0 when Flowledger can work with the endpoint, 1 when it cannot"
        " (the models list or a plain chat fails, or no structured-output mode gives JSON), 2 when no endpoint"
        " is configured.",
    )
    probe.add_argument(
        "--base-url",
        metavar="URL",
        help="the server's base URL, e.g. http://127.0.0.1:8080/v1 (default $OPENAI_BASE_URL;"
        " OpenAI's API when only OPENAI_API_KEY is set)",
    )
    probe.add_argument(
        "--model", metavar="NAME", help="the model to ask for (default $FLOWLEDGER_CHAT_MODEL, else gpt-4o-mini)"
    )
    probe.add_argument(
        "--timeout",
        type=positive_int,
        default=30,
        metavar="SECONDS",
        help="how long each call may take (default 30)",
    )
    json_option(probe, "the checks, the modes chosen and the verdict")


def cmd_model_probe(args: argparse.Namespace) -> int:
    from flowledger.config import load_settings
    from flowledger.llm.endpoint import model_endpoint_for
    from flowledger.llm.probe import probe

    given = {"openai_base_url": args.base_url, "chat_model": args.model}
    settings = load_settings(**{name: value for name, value in given.items() if value})
    endpoint = model_endpoint_for(settings)
    if endpoint.offline:
        raise CommandFailed(
            "no model endpoint is configured (the chat uses its offline model): set OPENAI_BASE_URL for an"
            " OpenAI-compatible server or OPENAI_API_KEY for OpenAI, or pass --base-url"
        )
    report = probe(
        endpoint,
        timeout=args.timeout,
        structured_setting=settings.structured_output,
        tool_setting=settings.tool_calling,
    )
    print(json.dumps(report.as_dict(), indent=2) if args.json else "\n".join(report.lines()))
    return 0 if report.usable else 1
