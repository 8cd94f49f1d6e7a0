"""The ``flowledger`` console script.

Commands that touch the store run against a local dev server when given ``--data-dir`` (or
``FLOWLEDGER_DATA_DIR``), and against AWS through the standard AWS environment otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from flowledger.errors import FlowledgerError

DEFAULT_DATA_DIR = ".flowledger"


def _store_services(data_dir: str | None):  # type: ignore[no-untyped-def]
    """Services bound to a local server's embedded store, or to AWS when no data dir is given."""
    from flowledger.config import load_settings
    from flowledger.services import build_services

    if data_dir is None:
        return build_services(load_settings())
    from flowledger.local.datadir import DataDir
    from flowledger.local.devserver import EMBEDDED_CREDENTIALS

    endpoints = DataDir(Path(data_dir)).endpoints()
    settings = load_settings(
        aws_endpoint_url=endpoints.aws_endpoint_url,
        aws_region=endpoints.region,
        resource_prefix=endpoints.resource_prefix,
        bucket_suffix=endpoints.bucket_suffix,
    )
    return build_services(settings, EMBEDDED_CREDENTIALS)


def cmd_serve(args: argparse.Namespace) -> int:
    from flowledger.local.devserver import serve

    # Ctrl-C is how serve is meant to stop; everything was shut down on the way out.
    with contextlib.suppress(KeyboardInterrupt):
        serve(Path(args.data_dir), args.host, args.port)
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from flowledger.api.tokens import mint_token
    from flowledger.local.datadir import LOCAL_AUDIENCE, LOCAL_ISSUER, DataDir

    directory = DataDir(Path(args.data_dir))
    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
    print(
        mint_token(
            private_key_pem=directory.private_key_pem(),
            kid=directory.key_id(),
            issuer=LOCAL_ISSUER,
            audience=LOCAL_AUDIENCE,
            sub=args.sub,
            scopes=scopes,
            patient_id=args.patient_id,
            ttl_seconds=args.ttl,
        )
    )
    return 0


def cmd_jobs_list(args: argparse.Namespace) -> int:
    from flowledger.jobs import JOBS

    width = max(len(job.name) for job in JOBS)
    for job in JOBS:
        print(f"{job.name:<{width}}  {job.schedule:<18}  {job.description}")
    return 0


def cmd_jobs_run(args: argparse.Namespace) -> int:
    from flowledger.jobs import job_named, run_job

    job_named(args.name)  # an unknown name fails before any connection is made
    print(json.dumps(run_job(args.name, _store_services(args.data_dir)), indent=2, default=str))
    return 0


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from flowledger.ledger.audit import checkpoints_of, verify_ledger

    services = _store_services(args.data_dir)
    ledger, store = services.ledger, checkpoints_of(services)

    def progress(events, chain_id):  # type: ignore[no-untyped-def]
        return tqdm(events, desc=chain_id, unit=" events", leave=False, disable=None, file=sys.stderr)

    report = verify_ledger(ledger, store, args.chain, args.from_checkpoint, progress)
    print(f"checkpoints: {report.checkpoints_checked} checked")
    for chain in report.chains:
        state = "BROKEN" if chain.bad else "ok"
        print(f"{chain.chain_id}: {chain.checked} events checked, head seq {chain.head.seq}, {state}")
    for problem in report.problems:
        print(f"PROBLEM: {problem}")
    bad = report.first_bad_link
    if bad is not None:
        print(f"FIRST BAD LINK: {bad.describe()}")
    print("ledger verified" if report.ok else "ledger verification FAILED")
    return 0 if report.ok else 1


def cmd_audit_proof(args: argparse.Namespace) -> int:
    from flowledger.ledger.audit import checkpoints_of, prove

    services = _store_services(args.data_dir)
    proof = prove(services.ledger, checkpoints_of(services), args.event_id)
    out = Path(args.out or f"{args.event_id}.proof.json")
    out.write_bytes(proof.to_bytes())
    print(
        f"wrote {out}: {args.event_id} under checkpoint {proof.checkpoint.checkpoint_id} (root {proof.checkpoint.root})"
    )
    return 0


def cmd_audit_check_proof(args: argparse.Namespace) -> int:
    from flowledger.ledger.proofs import InvalidProof, check_proof

    try:
        proof = check_proof(Path(args.file).read_bytes())
    except InvalidProof as exc:
        print(f"proof INVALID: {exc}")
        return 1
    print(
        f"proof OK: {proof.event.event_id} ({proof.event.action}) is in checkpoint "
        f"{proof.checkpoint.checkpoint_id} with root {proof.checkpoint.root}"
    )
    return 0


def cmd_knowledge_add(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from flowledger.knowledge.index import KnowledgeIndex

    index = KnowledgeIndex(_store_services(args.data_dir))
    for name in tqdm(args.files, desc="indexing", unit=" files", disable=None, file=sys.stderr):
        added = index.add_document(Path(name).name, Path(name).read_bytes())
        print(f"{added['document_id']}  v{added['version']}  {added['chunks']} chunks  {added['title']}")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    import httpx

    from flowledger.local.datadir import DataDir
    from flowledger.local.devserver import development_token

    directory = DataDir(Path(args.data_dir))
    base_url = args.url or directory.endpoints().base_url
    token = args.token or development_token(directory)
    body = {"query": args.question, **({"session_id": args.session} if args.session else {})}
    with httpx.stream(
        "POST",
        f"{base_url}/api/chat",
        json=body,
        timeout=120,
        headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
    ) as response:
        if response.status_code != 200:
            print(f"flowledger: error: {response.status_code} {response.read().decode()}", file=sys.stderr)
            return 2
        kind = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                _print_chat_event(kind, json.loads(line[6:]))
    return 0


def _print_chat_event(kind: str, data: dict[str, object]) -> None:
    if kind == "start":
        print(f"[session {data['session_id']}  run {data['run_id']}]", file=sys.stderr)
    elif kind == "status":
        print(f"  … {data['code']}", file=sys.stderr)
    elif kind == "content":
        content = data["content"]
        assert isinstance(content, dict)
        print(content["text"])
        for reference in content.get("references") or []:
            print(f"  [{reference['document_id']}] {reference['title']}")
        if content.get("limitations"):
            print(f"  ({content['limitations']})")
    elif kind == "done":
        print(f"[{data['status']} {data['intent']} via {data['model']}]", file=sys.stderr)
    elif kind == "error":
        print(f"[{data['code']}: {data['message']}]", file=sys.stderr)


def cmd_backlog_status(args: argparse.Namespace) -> int:
    import getpass

    from flowledger.research.backlog import Backlog

    view = Backlog(_store_services(args.data_dir)).read_view(f"cli:{getpass.getuser()}")
    if args.json:
        print(view.model_dump_json(indent=2))
        return 0
    print(f"loop health: {view.loop_health}")
    for status, count in view.status_distribution.items():
        print(f"  {status:<22} {count:>6}")
    for label, age in (
        ("oldest pending", view.oldest_pending_age_seconds),
        ("oldest dispatched", view.oldest_dispatched_age_seconds),
    ):
        print(f"  {label:<22} {'-' if age is None else f'{age // 60} min'}")
    print("  retries               " + (", ".join(f"{k}: {v}" for k, v in view.retry_distribution.items()) or "-"))
    for failure in view.recent_failures:
        print(f"  failed {failure.request_id} {failure.status.value} {failure.failure_reason or ''}")
    return 0


def cmd_pathways_inspect(args: argparse.Namespace) -> int:
    import getpass

    from flowledger.pathways.library import PathwayLibrary

    stats = PathwayLibrary(_store_services(args.data_dir)).read_stats(f"cli:{getpass.getuser()}")
    if args.json:
        print(stats.model_dump_json(indent=2))
        return 0
    print(f"pathways: {stats.total} total, {stats.active} active, {stats.embedded} embedded, {stats.demoted} demoted")
    print(f"  {'trigger type':<32} {'active':>6}  maturity")
    for family, maturity in stats.maturity_by_trigger_type.items():
        print(f"  {family:<32} {stats.by_trigger_type.get(family, 0):>6}  {maturity}")
    print("  by model: " + (", ".join(f"{model} {count}" for model, count in stats.by_model.items()) or "-"))
    for top in stats.top_hits:
        print(f"  top hit {top.pathway_id} {top.trigger_type} {top.hit_count}")
    return 0


def _store_option(parser: argparse.ArgumentParser) -> None:
    """``--data-dir`` for commands that touch the store: local server, or AWS when omitted."""
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("FLOWLEDGER_DATA_DIR"),
        help="a running dev server's data directory; omit to use the AWS environment",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flowledger", description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run every route, the embedded AWS store and the scheduler locally")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    serve.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help="signing key, admin credentials and local.json (default .flowledger)",
    )
    serve.set_defaults(func=cmd_serve)

    token = commands.add_parser("token", help="mint a bearer token from the local issuer")
    token.add_argument("--sub", required=True, help="the caller's subject (user id)")
    token.add_argument("--scopes", default="", help="comma-separated: reasoning.write,reasoning.read,chat,documents")
    token.add_argument("--patient-id", help="opaque patient id the token speaks for")
    token.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default 3600)")
    token.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the dev server's data directory")
    token.set_defaults(func=cmd_token)

    jobs = commands.add_parser("jobs", help="list the scheduled jobs or run one now")
    job_commands = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    job_commands.add_parser("list", help="the registered jobs and their schedules").set_defaults(func=cmd_jobs_list)
    run = job_commands.add_parser("run", help="run one job now against the local or AWS store")
    run.add_argument("name", help="the job's name (see `flowledger jobs list`)")
    _store_option(run)
    run.set_defaults(func=cmd_jobs_run)

    audit = commands.add_parser("audit", help="verify the audit ledger, write and check inclusion proofs")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    verify = audit_commands.add_parser("verify", help="recompute every link and checkpoint; exit 1 on a break")
    verify.add_argument("--chain", action="append", help="only this chain (repeatable), e.g. chain-003")
    verify.add_argument("--from-checkpoint", help="start at this checkpoint, trusting its chain heads")
    verify.set_defaults(func=cmd_audit_verify)
    proof = audit_commands.add_parser("proof", help="write an inclusion proof for one event")
    proof.add_argument("event_id", help="the event's id, e.g. chain-003.42")
    proof.add_argument("--out", help="where to write it (default EVENT_ID.proof.json)")
    proof.set_defaults(func=cmd_audit_proof)
    for command in (verify, proof):
        _store_option(command)
    backlog = commands.add_parser("backlog", help="the research backlog")
    backlog_commands = backlog.add_subparsers(dest="backlog_command", required=True, metavar="ACTION")
    status = backlog_commands.add_parser("status", help="status counts, ages, retries, failures and loop health")
    status.add_argument("--json", action="store_true", help="print the view as JSON")
    _store_option(status)
    status.set_defaults(func=cmd_backlog_status)

    pathways = commands.add_parser("pathways", help="the pathway library")
    pathway_commands = pathways.add_subparsers(dest="pathways_command", required=True, metavar="ACTION")
    inspect = pathway_commands.add_parser("inspect", help="totals, models, maturity per trigger type, top hits")
    inspect.add_argument("--json", action="store_true", help="print the stats as JSON")
    _store_option(inspect)
    inspect.set_defaults(func=cmd_pathways_inspect)

    knowledge = commands.add_parser("knowledge", help="manage the knowledge base documents")
    knowledge_commands = knowledge.add_subparsers(dest="knowledge_command", required=True, metavar="ACTION")
    add = knowledge_commands.add_parser("add", help="index text or Markdown files (a new version if known)")
    add.add_argument("files", nargs="+", help="the files to add")
    _store_option(add)
    add.set_defaults(func=cmd_knowledge_add)

    chat = commands.add_parser("chat", help="ask a running server a question and stream the answer")
    chat.add_argument("question", help="what to ask")
    chat.add_argument("--session", help="continue this session (ses_...)")
    chat.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the dev server's data directory")
    chat.add_argument("--url", help="the server's base URL (default: from the data directory)")
    chat.add_argument("--token", help="a bearer token with the chat scope (default: a local dev token)")
    chat.set_defaults(func=cmd_chat)

    check = audit_commands.add_parser("check-proof", help="check a proof file offline (no store needed)")
    check.add_argument("file", help="the proof file")
    check.set_defaults(func=cmd_audit_check_proof)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except FlowledgerError as exc:
        print(f"flowledger: error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
