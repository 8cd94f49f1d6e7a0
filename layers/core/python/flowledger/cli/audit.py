"""`flowledger audit ...`: the audit ledger's checks, its proofs and evidence bundles, and its signing key."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowledger.cli import store
from flowledger.cli.failures import CommandFailed, read_file, write_file
from flowledger.cli.options import actions, command, store_option
from flowledger.cli.text import counted
from flowledger.errors import InvalidInput

if TYPE_CHECKING:
    from flowledger.ledger.chain import Stored


def add_commands(commands: Any) -> None:
    """Add ``audit verify``, ``proof``, ``check-proof``, ``consistency``, ``check-consistency``, ``bundle``, ``key``."""
    audit = actions(
        command(commands, "audit", "verify the audit ledger, write and check its proofs, show its key"), "audit_command"
    )
    verify = command(
        audit,
        "verify",
        "check every event, link, time and checkpoint, and look for stray chains; exit 1 on any finding",
        cmd_audit_verify,
        "One line per finding names its place (chain-003.42 or checkpoint ID);"
        " the last line counts the events, chains and checkpoints checked.",
    )
    verify.add_argument("--chain", action="append", help="only this chain (repeatable), e.g. chain-003")
    verify.add_argument("--from-checkpoint", help="start at this checkpoint, trusting its chain heads")
    store_option(verify)
    proof = command(audit, "proof", "write an inclusion proof for one event", cmd_audit_proof)
    proof.add_argument("event_id", help="the event's id, e.g. chain-003.42")
    proof.add_argument("--out", help="where to write it (default EVENT_ID.proof.json)")
    store_option(proof)
    check = command(audit, "check-proof", "check a proof file offline (no store needed)", cmd_audit_check_proof)
    check.add_argument("file", help="the proof file")
    consistency = command(
        audit,
        "consistency",
        "write a proof that a later checkpoint extends an earlier one",
        cmd_audit_consistency,
        "Per chain, the RFC 6962 consistency proof between its two trees: O(log n) hashes however many events"
        " came between. Check it anywhere with `flowledger audit check-consistency` (no store needed).",
    )
    consistency.add_argument("--from", dest="earlier", required=True, help="the earlier checkpoint's id")
    consistency.add_argument("--to", dest="later", help="the later checkpoint's id (default: the latest)")
    consistency.add_argument("--out", help="where to write it (default FROM..TO.consistency.json)")
    store_option(consistency)
    check_consistency = command(
        audit,
        "check-consistency",
        "check a consistency proof file offline (no store needed)",
        cmd_audit_check_consistency,
    )
    check_consistency.add_argument("file", help="the consistency proof file")
    bundle = command(
        audit,
        "bundle",
        "write the evidence bundle of one subject: its events, their proofs and the signed checkpoints",
        cmd_audit_bundle,
        "Anyone checks it with tools/verify_bundle.py (Python and `cryptography`, nothing of this project) and the"
        " keys from `flowledger audit key` and your witnesses: python verify_bundle.py BUNDLE --log-key VKEY.",
    )
    bundle.add_argument("--subject", required=True, help="the subject, e.g. flow:fl_01J...")
    bundle.add_argument("--out", help="where to write it (default SUBJECT.bundle.json, ':' as '_')")
    store_option(bundle)
    key = command(
        audit,
        "key",
        "print the key the ledger signs its checkpoints with (origin, verifier key, PEM)",
        cmd_audit_key,
        "Give the verifier key line to whoever checks a checkpoint note or an evidence bundle; the same answer is"
        " public at GET /.well-known/flowledger/ledger-key.",
    )
    key.add_argument("--json", action="store_true", help="print the route's JSON answer instead")
    store_option(key)


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from flowledger.ledger.audit import checkpoints_of, verify_ledger

    services = store.services(args.data_dir)
    ledger, checkpoints = services.ledger, checkpoints_of(services)
    known = ledger.chain_ids()
    unknown = sorted(set(args.chain or []) - set(known))
    if unknown:
        raise InvalidInput(f"no chain {', '.join(unknown)} (the chains are {known[0]} to {known[-1]})")

    def progress(items: Iterable[Stored], chain_id: str) -> Any:
        return tqdm(items, desc=chain_id, unit=" events", leave=False, disable=None, file=sys.stderr)

    report = verify_ledger(ledger, checkpoints, args.chain, args.from_checkpoint, progress)
    ids, chains = report.checkpoint_ids, f"{known[0]} to {known[-1]}"
    span = (f": {ids[0]}" + (f" to {ids[-1]}" if len(ids) > 1 else "")) if ids else ""
    print(f"checkpoints: {report.checkpoints_checked} checked{span}")
    for chain in report.chains:
        events = counted(chain.checked, "event")
        if not chain.known:
            print(f"{chain.chain_id}: {events} under a chain id outside {chains}")
            continue
        found = counted(len(chain.findings), "finding") if chain.findings else "ok"
        print(f"{chain.chain_id}: {events} checked, head seq {chain.head.seq}, {found}")
    if not report.scanned_for_strays:
        print("other chain ids: not looked for (--chain)")
    elif all(chain.known for chain in report.chains):
        print(f"other chain ids: none in the table (every item is under {chains})")
    for finding in report.findings:
        print(f"FINDING {finding.describe()}")
    checked = (
        f"{counted(report.events_checked, 'event')} in "
        f"{counted(len(report.chains), 'chain')} and {counted(report.checkpoints_checked, 'checkpoint')}"
    )
    if report.ok:
        print(f"ledger verified: {checked}")
        return 0
    print(f"findings: {len(report.findings):,}")
    print(f"ledger verification FAILED: checked {checked}")
    return 1


def cmd_audit_proof(args: argparse.Namespace) -> int:
    from flowledger.ledger.audit import checkpoints_of, prove
    from flowledger.ledger.events import parse_event_id

    try:
        parse_event_id(args.event_id)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    out = Path(args.out or f"{args.event_id}.proof.json")
    if not out.parent.is_dir():  # checked before the store is read, so a typo costs nothing
        raise CommandFailed(f"{out}: no directory {out.parent}")
    services = store.services(args.data_dir)
    proof = prove(services.ledger, checkpoints_of(services), args.event_id)
    write_file(out, proof.to_bytes())
    print(
        f"wrote {out}: {args.event_id} under checkpoint {proof.checkpoint.checkpoint_id} (root {proof.checkpoint.root})"
    )
    return 0


def cmd_audit_check_proof(args: argparse.Namespace) -> int:
    from flowledger.ledger.proofs import InvalidProof, check_proof

    try:
        proof = check_proof(read_file(args.file))
    except InvalidProof as exc:
        print(f"proof INVALID: {exc}")
        return 1
    print(
        f"proof OK: {proof.event.event_id} ({proof.event.action}) is in checkpoint "
        f"{proof.checkpoint.checkpoint_id} with root {proof.checkpoint.root}"
    )
    return 0


def cmd_audit_key(args: argparse.Namespace) -> int:
    from flowledger.api.audit import ledger_key_of

    answer = ledger_key_of(store.services(args.data_dir).checkpoint_signer.verifier)
    if args.json:
        print(answer.model_dump_json(indent=2))
        return 0
    print(f"origin:        {answer.origin}")
    print(f"verifier key:  {answer.vkey}")
    print(f"key id:        {answer.key_id} ({answer.algorithm})")
    print(answer.public_key_pem, end="")
    return 0


def cmd_audit_consistency(args: argparse.Namespace) -> int:
    from flowledger.ledger.audit import prove_consistency

    if args.out is not None and not Path(args.out).parent.is_dir():
        raise CommandFailed(f"{args.out}: no directory {Path(args.out).parent}")
    proof = prove_consistency(store.services(args.data_dir), args.earlier, args.later)
    out = Path(args.out or f"{proof.earlier.checkpoint_id}..{proof.later.checkpoint_id}.consistency.json")
    write_file(out, proof.to_bytes())
    hashes = sum(len(chain.path) for chain in proof.chains)
    print(
        f"wrote {out}: {proof.later.checkpoint_id} extends {proof.earlier.checkpoint_id} "
        f"({counted(len(proof.chains), 'chain')}, {hashes:,} {'hash' if hashes == 1 else 'hashes'})"
    )
    return 0


def cmd_audit_check_consistency(args: argparse.Namespace) -> int:
    from flowledger.ledger.consistency import InvalidConsistency, check_consistency

    try:
        proof = check_consistency(read_file(args.file))
    except InvalidConsistency as exc:
        print(f"consistency proof INVALID: {exc}")
        return 1
    print(f"consistency proof OK: {proof.later.checkpoint_id} extends {proof.earlier.checkpoint_id}")
    return 0


def cmd_audit_bundle(args: argparse.Namespace) -> int:
    from pydantic import TypeAdapter, ValidationError

    from flowledger.ledger.audit import export_bundle
    from flowledger.ledger.events import Token

    try:
        TypeAdapter(Token).validate_python(args.subject)
    except ValidationError:
        raise InvalidInput(f"not a subject: {args.subject!r} (e.g. flow:fl_01J...)") from None
    out = Path(args.out or f"{args.subject.replace(':', '_').replace('/', '_')}.bundle.json")
    if not out.parent.is_dir():
        raise CommandFailed(f"{out}: no directory {out.parent}")
    bundled = export_bundle(store.services(args.data_dir), args.subject)
    bundle = bundled.bundle
    body = bundle.to_bytes()
    write_file(out, body)
    print(
        f"wrote {out}: {counted(len(bundle.events), 'event')} of {args.subject} under checkpoint "
        f"{bundle.checkpoint.checkpoint_id} ({len(body):,} bytes)"
    )
    if bundle.consistency is not None:
        print(f"with the proof that the latest checkpoint, {bundle.consistency.later.checkpoint_id}, extends it")
    if bundled.left_out:
        print(f"{counted(bundled.left_out, 'newer event')} left out: no checkpoint covers them yet")
    return 0
