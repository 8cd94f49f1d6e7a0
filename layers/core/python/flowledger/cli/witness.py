"""`flowledger witness init|key|serve`: run a witness of another log's checkpoints (an auditor's, say)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from flowledger.cli import store
from flowledger.cli.failures import CommandFailed
from flowledger.cli.options import actions, command, store_option


def port_number(text: str) -> int:
    """A TCP port, 0 to 65535 (argparse shows the message for anything else)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {port}")
    return port


def add_commands(commands: Any) -> None:
    """Add ``witness init``, ``witness key`` and ``witness serve``."""
    witness = actions(
        command(commands, "witness", "run a witness that cosigns a ledger's checkpoints once they extend the last"),
        "witness_command",
    )
    init = command(
        witness,
        "init",
        "create a witness key (Ed25519, mode 0600) and print its verifier key",
        cmd_witness_init,
        "Give the printed line to the ledger's operator (FLOWLEDGER_WITNESSES) and to whoever checks cosignatures.",
    )
    init.add_argument("--name", required=True, help="the witness's name, e.g. witness.auditor.example")
    init.add_argument("--key", required=True, help="the key file to create (never overwritten)")
    key = command(
        witness,
        "key",
        "print a witness's verifier key, from its key file or its KMS key",
        cmd_witness_key,
        "A witness deployed by the CDK app signs with KMS: give --kms-key (the stack's WitnessKeyArn output)"
        " and --name (its flowledger:witness name).",
    )
    source = key.add_mutually_exclusive_group(required=True)
    source.add_argument("--key", help="the witness's key file")
    source.add_argument("--kms-key", help="the witness's KMS key (id, ARN or alias), in AWS or a dev server")
    key.add_argument("--name", help="the witness's name (with --kms-key)")
    store_option(key)
    serve = command(
        witness,
        "serve",
        "answer POST /add-checkpoint over HTTP until interrupted",
        cmd_witness_serve,
        "Cosigns a checkpoint of a given log when its note verifies and it extends the last one cosigned"
        " (docs/audit-ledger.md, Witnesses).",
    )
    serve.add_argument("--key", required=True, help="the witness's key file (`flowledger witness init`)")
    serve.add_argument("--state", required=True, help="the folder keeping the last checkpoint cosigned per log")
    serve.add_argument(
        "--log",
        action="append",
        required=True,
        metavar="VKEY",
        help="a log's verifier key (`flowledger audit key`), repeatable",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=port_number, default=8480, help="the port (default 8480; 0 picks a free one)")


def cmd_witness_init(args: argparse.Namespace) -> int:
    from flowledger.witness.keys import FileWitnessKey, WitnessKeyError

    try:
        key = FileWitnessKey.create(Path(args.key), args.name)
    except (WitnessKeyError, ValueError) as exc:
        raise CommandFailed(str(exc)) from None
    print(key.verifier.vkey())
    return 0


def cmd_witness_key(args: argparse.Namespace) -> int:
    if args.key is not None:
        print(_load_key(args.key).verifier.vkey())
        return 0
    from flowledger.ledger.signed_note import NoteError
    from flowledger.witness.keys import kms_witness_key

    if not args.name:
        raise CommandFailed("--kms-key needs --name: the name the witness signs under")
    try:
        key = kms_witness_key(store.services(args.data_dir).aws.kms, args.kms_key, args.name)
        print(key.verifier.vkey())
    except (NoteError, ValueError) as exc:
        raise CommandFailed(f"--kms-key {args.kms_key}: {exc}") from None
    return 0


def cmd_witness_serve(args: argparse.Namespace) -> int:
    import time

    from flowledger.ledger.signed_note import NoteError
    from flowledger.witness.http_server import witness_server
    from flowledger.witness.service import Witness, log_keys
    from flowledger.witness.state import FileState

    key = _load_key(args.key)
    try:
        logs = log_keys(args.log)
    except NoteError as exc:
        raise CommandFailed(f"--log: {exc}") from None
    try:
        state = FileState(Path(args.state))
        server = witness_server(Witness(key, logs, state, time.time), args.host, args.port)
    except OSError as exc:
        raise CommandFailed(f"cannot serve on {args.host}:{args.port} with state {args.state}: {exc}") from None
    host, port = args.host, server.server_port
    names = ", ".join(log.name for log in logs)
    print(f"witness {key.verifier.vkey()} on http://{host}:{port}/add-checkpoint for {names}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def _load_key(path: str) -> Any:
    from flowledger.witness.keys import FileWitnessKey, WitnessKeyError

    try:
        return FileWitnessKey.load(Path(path))
    except WitnessKeyError as exc:
        raise CommandFailed(str(exc)) from None
