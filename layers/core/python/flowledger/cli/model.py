"""`flowledger model probe`: what an OpenAI-compatible endpoint gives the chat; `flowledger model eval`: which
capabilities a model can serve, from a fixed set of turns through the real chat path."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from flowledger.cli.failures import CommandFailed
from flowledger.cli.options import actions, command, json_option, positive_int


def add_commands(commands: Any) -> None:
    """Add ``model probe`` and ``model eval``."""
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
    endpoint_options(probe, "OpenAI's API when only OPENAI_API_KEY is set")
    probe.add_argument(
        "--timeout",
        type=positive_int,
        default=30,
        metavar="SECONDS",
        help="how long each call may take (default 30)",
    )
    json_option(probe, "the checks, the modes chosen and the verdict")
    card = command(
        model,
        "eval",
        "run the model report card: which chat capabilities this model can serve",
        cmd_model_eval,
        "Runs a fixed, versioned set of turns (flowledger/modelcard/turns/v1.json) through the real chat path, on a"
        " private flowledger serve with a temporary data directory and the demo data: routing on labelled"
        " questions (small talk, knowledge, diagnosis, table), knowledge answers with checked citations, the demo"
        " diagnosis, the demo table and two follow-ups, and a cancellation. Prints per capability the pass rate,"
        " the junk rate (answers refused as template tokens or loops), the server's refusals, latency p50/p95 and"
        " tokens per turn, then which capabilities the model can serve (four turns in five pass, no junk, no"
        " refusal). With no endpoint configured it is the offline model's card, the baseline. The private server"
        " takes the environment's other settings: FLOWLEDGER_MODEL_MAX_TOKENS and FLOWLEDGER_DIAGNOSIS_MAX_MODEL_CALLS"
        " bound a slow model's card. Exits 0 when the card was made, 2 when it could not be.",
    )
    endpoint_options(card, "the offline model when none is configured")
    card.add_argument(
        "--turns",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="more turns, in the built-in file's shape (repeatable); they run after the built-in ones",
    )
    json_option(card, "the card, with every turn's result")


def endpoint_options(parser: argparse.ArgumentParser, otherwise: str) -> None:
    """``--base-url`` and ``--model``: the endpoint a command asks, ``otherwise`` saying what the default is."""
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help=f"the server's base URL, e.g. http://127.0.0.1:8080/v1 (default $OPENAI_BASE_URL; {otherwise})",
    )
    parser.add_argument(
        "--model", metavar="NAME", help="the model to ask for (default $FLOWLEDGER_CHAT_MODEL, else gpt-4o-mini)"
    )


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


def cmd_model_eval(args: argparse.Namespace) -> int:
    from flowledger.config import load_settings
    from flowledger.llm.endpoint import model_endpoint_for
    from flowledger.modelcard.card import TurnResult, score_card
    from flowledger.modelcard.run import private_server, run_turns
    from flowledger.modelcard.turns import load_turns

    turns = load_turns(args.turns)  # a bad file is refused before anything starts
    given = {"openai_base_url": args.base_url, "chat_model": args.model}
    endpoint = model_endpoint_for(load_settings(**{name: value for name, value in given.items() if value}))
    environment: dict[str, str] = {}
    if not endpoint.offline:
        environment = {"FLOWLEDGER_CHAT_MODEL": endpoint.model}
        if endpoint.base_url:
            environment["OPENAI_BASE_URL"] = endpoint.base_url
        if endpoint.api_key:
            environment["OPENAI_API_KEY"] = endpoint.api_key
    where = "offline" if endpoint.offline else (endpoint.base_url or "OpenAI")
    name = "offline model" if endpoint.offline else endpoint.model

    def progress(number: int, result: TurnResult) -> None:
        verdict = "passed" if result.passed else f"did not pass: {result.why}"
        print(f"[{number}/{len(turns)}] {result.turn_id}: {verdict} ({result.seconds:.1f} s)", file=sys.stderr)

    print(f"starting a private flowledger serve for {name} at {where}...", file=sys.stderr)
    # A TERM stops the card as Ctrl-C does: through the server's own stop, never leaving it running.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with private_server(environment) as server:
        results = run_turns(server, turns, progress)
    card = score_card(name, where, results)
    print(json.dumps(card.as_dict(), indent=2) if args.json else "\n".join(card.lines()))
    return 0
