"""`flowledger chat`: ask a running server a question and stream the answer.

This command talks HTTP only: it imports httpx and the data directory's token issuer, never the dev
server, moto or the chat app, so the command adds little to the server's own answer time.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowledger.cli import store
from flowledger.cli.api_answers import refusal_line
from flowledger.cli.chat_output import print_chat_stream
from flowledger.cli.failures import CommandFailed
from flowledger.cli.options import command, local_data_dir_option
from flowledger.errors import InvalidInput

if TYPE_CHECKING:
    import ssl

CHAT_TIMEOUT_SECONDS = 120
ACTIONS = ("chat", "search", "analyze", "compare")


def add_commands(commands: Any) -> None:
    """Add ``chat``."""
    chat = command(
        commands,
        "chat",
        "ask a running server a question and stream the answer",
        cmd_chat,
        "Exits 1 when the answer ends with an error, 2 when the server cannot be asked.",
    )
    chat.add_argument("question", help="what to ask")
    chat.add_argument("--session", help="continue this session (ses_...)")
    selection = chat.add_mutually_exclusive_group()
    selection.add_argument(
        "--select",
        action="append",
        metavar="DOCUMENT_ID",
        help="ground the turn on exactly this document (dc_..., repeatable); selection_mode selected",
    )
    selection.add_argument(
        "--all", action="store_true", help="ground the turn on every document you may read; selection_mode all"
    )
    selection.add_argument(
        "--history",
        action="store_true",
        help="ground the turn on the previous turn's sources only (with --session); selection_mode history",
    )
    chat.add_argument("--action", choices=ACTIONS, help="what to do with the sources (default chat)")
    chat.add_argument("--source", metavar="DOC", help="--action compare: the document compared")
    chat.add_argument(
        "--target", action="append", metavar="DOC", help="--action compare: a document to compare with (repeatable)"
    )
    chat.add_argument(
        "--include-prior",
        action="store_true",
        help="with --select: also reuse the previous turn's sources (with --session)",
    )
    local_data_dir_option(chat)
    chat.add_argument("--url", help="the server's base URL (default: from the data directory)")
    chat.add_argument("--token", help="a bearer token with the chat scope (default: a local dev token)")
    # Contradictions argparse cannot express are refused as its own errors are: usage, one line, exit 2.
    chat.set_defaults(options_problem=chat_options_problem, command_parser=chat)


def cmd_chat(args: argparse.Namespace) -> int:
    import httpx

    from flowledger.local.datadir import DataDir
    from flowledger.local.dev_token import development_token

    base_url = (args.url or store.local_endpoints(args.data_dir).base_url).rstrip("/")
    if not base_url.startswith(("http://", "https://")):
        raise CommandFailed(f"{base_url}: the server URL must start with http:// or https://")
    token = args.token or development_token(DataDir(Path(args.data_dir)))
    body = chat_request_body(args)
    try:
        with httpx.stream(
            "POST",
            f"{base_url}/api/chat",
            json=body,
            timeout=CHAT_TIMEOUT_SECONDS,
            verify=tls_context(base_url),
            headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
        ) as response:
            if response.status_code != 200:
                raise CommandFailed(refusal_line(response.status_code, response.read(), response.reason_phrase))
            return print_chat_stream(response.iter_lines(), base_url)
    except httpx.ConnectError:
        raise CommandFailed(f"cannot reach {base_url}: is `flowledger serve` running?") from None
    except httpx.TimeoutException:
        raise CommandFailed(f"{base_url} did not answer within {CHAT_TIMEOUT_SECONDS} s") from None
    except httpx.TransportError as exc:  # the server went away mid-stream, say
        raise CommandFailed(f"the connection to {base_url} broke ({type(exc).__name__})") from None


def tls_context(base_url: str) -> ssl.SSLContext | bool:
    """Certificate checks as usual for https. An http URL makes no TLS connection, so reading the CA bundle
    (about 0.2 s) is skipped: a context with no trusted certificate stands in, which would refuse any
    certificate rather than accept it (an https proxy, say)."""
    import ssl

    if base_url.startswith("https://"):
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def chat_request_body(args: argparse.Namespace) -> dict[str, Any]:
    """The ``POST /api/chat`` body of a ``chat`` command: the query, the session, the source fields.

    A source field is sent only when an option asks for it, so a plain ``chat`` sends what it always
    did (the server's default, relevance). Contradictions are :class:`InvalidInput`, found before
    any connection is made.
    """
    problem = chat_options_problem(args)
    if problem:
        raise InvalidInput(problem)
    body: dict[str, Any] = {"query": args.question}
    if args.session:
        body["session_id"] = args.session
    if args.select:
        body |= {"selection_mode": "selected", "document_ids": list(args.select)}
    elif args.all:
        body["selection_mode"] = "all"
    elif args.history:
        body["selection_mode"] = "history"
    if args.action:
        body["action_mode"] = args.action
    if args.source:
        body["source"] = args.source
    if args.target:
        body["targets"] = list(args.target)
    if args.include_prior:
        body["include_prior"] = True
    return body


def chat_options_problem(args: argparse.Namespace) -> str | None:
    """What is contradictory in the ``chat`` options (beyond argparse's own exclusions), or None."""
    compare = args.action == "compare"
    if (args.source or args.target) and not compare:
        return "--source and --target go with --action compare"
    if compare and (args.select or args.all or args.history or args.include_prior):
        return "--action compare takes only --source and --target, not --select, --all, --history or --include-prior"
    if compare and not (args.source and args.target):
        return "--action compare needs --source DOC and at least one --target DOC"
    if args.include_prior and not args.select:
        return "--include-prior adds the previous turn's sources to an explicit selection: use it with --select"
    for option, ids in (("--select", args.select), ("--target", args.target)):
        repeated = sorted({i for i in ids or [] if ids.count(i) > 1})
        if repeated:
            return f"{option} names {', '.join(repeated)} twice"
    if args.source and args.source in (args.target or []):
        return f"{args.source} cannot be both the --source and a --target"
    return None
