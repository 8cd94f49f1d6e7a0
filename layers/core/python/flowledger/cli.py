"""The ``flowledger`` console script.

Commands that touch the store run against a local dev server when given ``--data-dir`` (or
``FLOWLEDGER_DATA_DIR``), and against AWS through the standard AWS environment otherwise.

Every command checks its whole input before it writes anything. An expected failure (a missing
file, no server, no AWS credentials, an unknown id) ends it with one line on stderr,
``flowledger: error: ...``, and exit status 2; a check that ran and failed exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowledger import __version__
from flowledger.errors import FlowledgerError, InvalidInput

if TYPE_CHECKING:
    from botocore.exceptions import ClientError

    from flowledger.local.datadir import LocalEndpoints
    from flowledger.services import Services

DEFAULT_DATA_DIR = ".flowledger"
CHAT_TIMEOUT_SECONDS = 120
DESCRIPTION = (
    "Flowledger's console: the local dev server, tokens, jobs, the audit ledger, the backlog, pathways,"
    " knowledge documents and chat. Store commands use a running dev server with --data-dir, AWS otherwise."
)
EPILOG = "exit status: 0 done, 1 a check or an answer failed, 2 the command could not run, 130 interrupted"


class CommandFailed(FlowledgerError):
    """The command cannot go on for a reason outside the domain: a file, a connection, a data dir."""

    code = "command_failed"


def _store_services(data_dir: str | None) -> Services:
    """Services bound to a local server's embedded store, or to AWS when no data dir is given."""
    from flowledger.config import load_settings
    from flowledger.services import build_services

    if data_dir is None:
        return build_services(load_settings())
    from flowledger.local.devserver import EMBEDDED_CREDENTIALS

    endpoints = _local_endpoints(data_dir)
    settings = load_settings(
        aws_endpoint_url=endpoints.aws_endpoint_url,
        aws_region=endpoints.region,
        resource_prefix=endpoints.resource_prefix,
        bucket_suffix=endpoints.bucket_suffix,
    )
    return build_services(settings, EMBEDDED_CREDENTIALS)


def _local_endpoints(data_dir: str) -> LocalEndpoints:
    from flowledger.local.datadir import DataDir

    directory = DataDir(Path(data_dir))
    try:
        return directory.endpoints()
    except (OSError, ValueError, TypeError) as exc:  # unreadable, not JSON, or not the fields serve writes
        raise CommandFailed(
            f"{directory.path / 'local.json'} is unreadable ({type(exc).__name__}); restart `flowledger serve`"
        ) from None


def _read_file(name: str) -> bytes:
    try:
        return Path(name).read_bytes()
    except OSError as exc:
        raise CommandFailed(f"{name}: {exc.strerror or type(exc).__name__}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    from flowledger.local.devserver import serve

    # Ctrl-C is how serve is meant to stop; everything was shut down on the way out.
    with contextlib.suppress(KeyboardInterrupt):
        serve(Path(args.data_dir), args.host, args.port, reset=args.reset, workers=args.workers)
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
    from flowledger.ledger.chain import Stored

    services = _store_services(args.data_dir)
    ledger, store = services.ledger, checkpoints_of(services)
    known = ledger.chain_ids()
    unknown = sorted(set(args.chain or []) - set(known))
    if unknown:
        raise InvalidInput(f"no chain {', '.join(unknown)} (the chains are {known[0]} to {known[-1]})")

    def progress(items: Iterable[Stored], chain_id: str) -> Any:
        return tqdm(items, desc=chain_id, unit=" events", leave=False, disable=None, file=sys.stderr)

    report = verify_ledger(ledger, store, args.chain, args.from_checkpoint, progress)
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


def counted(n: int, noun: str) -> str:
    """``1 event``, ``1,234 events``."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


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
    services = _store_services(args.data_dir)
    proof = prove(services.ledger, checkpoints_of(services), args.event_id)
    try:
        out.write_bytes(proof.to_bytes())
    except OSError as exc:
        raise CommandFailed(f"{out}: {exc.strerror or type(exc).__name__}") from None
    print(
        f"wrote {out}: {args.event_id} under checkpoint {proof.checkpoint.checkpoint_id} (root {proof.checkpoint.root})"
    )
    return 0


def cmd_audit_check_proof(args: argparse.Namespace) -> int:
    from flowledger.ledger.proofs import InvalidProof, check_proof

    try:
        proof = check_proof(_read_file(args.file))
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

    from flowledger.knowledge.documents import prepare_document, source_name_for
    from flowledger.knowledge.index import KnowledgeIndex
    from flowledger.knowledge.scopes import check_scope

    # Every file is read and checked before the first write: one bad file leaves the store untouched.
    check_scope(args.scope)
    cwd, documents = Path.cwd(), []
    for name in tqdm(args.files, desc="checking", unit=" files", leave=False, disable=None, file=sys.stderr):
        source = source_name_for(name, cwd)
        documents.append(prepare_document(source, _read_document(name, source)))
    index = KnowledgeIndex(_store_services(args.data_dir))
    for document in tqdm(documents, desc="indexing", unit=" files", disable=None, file=sys.stderr):
        added = index.add(document, scope=args.scope)
        stored = added.document
        change = f"{stored.chunks} chunks" if added.new_version else "unchanged"
        print(f"{stored.document_id}  v{stored.version}  {change}  {stored.title}  ({stored.source_name})")
    return 0


def _read_document(name: str, source: str) -> bytes:
    """The bytes of one file to index, its kind and size checked before it is read."""
    from flowledger.knowledge.documents import check_source

    try:
        status = Path(name).stat()
    except OSError as exc:
        raise CommandFailed(f"{name}: {exc.strerror or type(exc).__name__}") from None
    if not stat.S_ISREG(status.st_mode):
        raise CommandFailed(f"{name}: not a file")
    check_source(source, status.st_size)
    return _read_file(name)


def cmd_knowledge_list(args: argparse.Namespace) -> int:
    from flowledger.knowledge.index import KnowledgeIndex
    from flowledger.knowledge.scopes import check_scope

    check_scope(args.scope)  # a malformed scope fails before any connection is made
    documents = KnowledgeIndex(_store_services(args.data_dir)).all_documents(args.scope)
    if args.json:
        print(json.dumps([asdict(document) for document in documents], indent=2))
        return 0
    if not documents:
        print("no documents", file=sys.stderr)
        return 0
    titles = [_shorten(document.title, 48) for document in documents]
    width = max(len(title) for title in [*titles, "TITLE"])
    print(f"{'DOCUMENT':<20}  {'VERSION':>7}  {'CHUNKS':>6}  {'TITLE':<{width}}  SOURCE")
    for document, title in zip(documents, titles, strict=True):
        print(
            f"{document.document_id:<20}  {document.version:>7}  {document.chunks:>6}  {title:<{width}}"
            f"  {document.source_name}"
        )
    return 0


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cmd_knowledge_remove(args: argparse.Namespace) -> int:
    from flowledger.knowledge.index import KnowledgeIndex
    from flowledger.knowledge.scopes import check_document_key, check_scope

    # A malformed id or scope fails before any connection is made.
    check_document_key(args.document_id)
    check_scope(args.scope)
    removed = KnowledgeIndex(_store_services(args.data_dir)).remove_document(args.document_id, scope=args.scope)
    print(f"removed {removed.document_id}  v{removed.version}  {removed.chunks} chunks  {removed.title}")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    import httpx

    from flowledger.local.datadir import DataDir
    from flowledger.local.devserver import development_token

    base_url = (args.url or _local_endpoints(args.data_dir).base_url).rstrip("/")
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
            headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
        ) as response:
            if response.status_code != 200:
                message = _server_message(response.read(), response.reason_phrase)
                raise CommandFailed(f"the server answered {response.status_code}: {message}")
            return _print_chat_stream(response.iter_lines())
    except httpx.ConnectError:
        raise CommandFailed(f"cannot reach {base_url}: is `flowledger serve` running?") from None
    except httpx.TimeoutException:
        raise CommandFailed(f"{base_url} did not answer within {CHAT_TIMEOUT_SECONDS} s") from None
    except httpx.TransportError as exc:  # the server went away mid-stream, say
        raise CommandFailed(f"the connection to {base_url} broke ({type(exc).__name__})") from None


ACTIONS = ("chat", "search", "analyze", "compare")
MAX_SOURCES_SHOWN = 5  # the sources line stays one line; the rest is counted


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


def sources_line(context: dict[str, Any]) -> str:
    """One line for an answer's source context: each source, how it came in and what became of it.

    ``  sources: demo-sales.csv v1 (selected, tabular, read) · decision tabular``; a partial or
    failed read and a coverage under 100 % are shown with the source, so a stale answer is visible.
    """
    shown = []
    used = list(context.get("sources") or [])
    for source in used[:MAX_SOURCES_SHOWN]:
        name = str(source.get("file_name") or source.get("document_id"))
        if source.get("version") is not None:
            name += f" v{source['version']}"
        notes = [source.get("how"), source.get("engine"), source.get("outcome")]
        if source.get("evidence_status") not in (None, "completed"):
            notes.append(source["evidence_status"])
        coverage = source.get("coverage")
        if isinstance(coverage, int | float) and coverage < 1:
            notes.append(f"coverage {coverage:.0%}")
        # An answer from the conversation says "history" once, not as both its basis and its engine.
        shown.append(f"{name} ({', '.join(dict.fromkeys(str(n) for n in notes if n))})")
    if len(used) > MAX_SOURCES_SHOWN:
        shown.append(f"+{len(used) - MAX_SOURCES_SHOWN} more")
    return f"  sources: {', '.join(shown) or 'none'} · decision {context.get('decision')}"


def _server_message(raw: bytes, reason: str) -> str:
    """The ``message`` of an error body, else its text, else the status's reason phrase."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return _shorten(raw.decode(errors="replace").strip(), 200) or reason


def _print_chat_stream(lines: Iterable[str]) -> int:
    """Print a turn's events as they arrive; 1 unless the stream ends with ``done``."""
    kind, outcome = "", None
    for line in lines:
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            try:
                data = json.loads(line[6:])
            except ValueError:
                raise CommandFailed(f"the server sent an unreadable {kind or 'event'} frame") from None
            if kind == "error":
                print(f"flowledger: error: {data.get('code')}: {data.get('message')}", file=sys.stderr)
            else:
                _print_chat_event(kind, data)
            outcome = kind if kind in ("done", "error") else outcome
    if outcome is None:
        print("flowledger: error: the stream ended before the answer was done", file=sys.stderr)
    return 0 if outcome == "done" else 1


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
            version = f" v{reference['version']}" if reference.get("version") is not None else ""
            print(f"  [{reference['document_id']}{version}] {reference['title']}")
        if content.get("limitations"):
            print(f"  ({content['limitations']})")
        if isinstance(content.get("source_context"), dict):
            sys.stdout.flush()  # after the references, also when both streams go to one terminal
            print(sources_line(content["source_context"]), file=sys.stderr)
    elif kind == "done":
        print(f"[{data['status']} {data['intent']} via {data['model']}]", file=sys.stderr)


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
        help="a running dev server's data directory (default $FLOWLEDGER_DATA_DIR); omit to use the AWS environment",
    )


def _scope_option(parser: argparse.ArgumentParser) -> None:
    """``--scope`` for the knowledge commands: the operator's ``global`` corpus unless told otherwise."""
    parser.add_argument(
        "--scope",
        default="global",
        help="the knowledge scope: global (default), workspace:ID or conversation:ID",
    )


def _json_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def _positive_int(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return number


def _command(
    commands: Any, name: str, summary: str, func: Any = None, description: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand whose own ``--help`` starts with the line its parent lists it with."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}." + (f" {description}" if description else ""),
    )
    if func is not None:
        parser.set_defaults(func=func)
    return parser


def _actions(parser: argparse.ArgumentParser, dest: str) -> Any:
    return parser.add_subparsers(
        dest=dest, required=True, metavar="ACTION", title="actions", help="`ACTION --help` shows its options"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flowledger", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"flowledger {__version__}", help="print the version")
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        title="commands",
        help="`flowledger COMMAND --help` shows its options",
    )

    serve = _command(commands, "serve", "run every route, the embedded AWS store and the scheduler locally", cmd_serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    serve.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help="the saved store, signing key, admin credentials and local.json (default .flowledger)",
    )
    serve.add_argument(
        "--reset",
        action="store_true",
        help="start empty: forget the saved store, the signing key (old tokens stop working) and the credentials",
    )
    serve.add_argument(
        "--workers", type=_positive_int, default=4, help="worker processes running the REST functions (default 4)"
    )

    token = _command(commands, "token", "mint a bearer token from the local issuer", cmd_token)
    token.add_argument("--sub", required=True, help="the caller's subject (user id)")
    token.add_argument("--scopes", default="", help="comma-separated: reasoning.write,reasoning.read,chat,documents")
    token.add_argument("--patient-id", help="opaque patient id the token speaks for")
    token.add_argument("--ttl", type=_positive_int, default=3600, help="lifetime in seconds (default 3600)")
    token.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the dev server's data directory")

    jobs = _actions(_command(commands, "jobs", "list the scheduled jobs or run one now"), "jobs_command")
    _command(jobs, "list", "the registered jobs and their schedules", cmd_jobs_list)
    run = _command(jobs, "run", "run one job now against the local or AWS store", cmd_jobs_run)
    run.add_argument("name", help="the job's name (see `flowledger jobs list`)")
    _store_option(run)

    audit = _actions(
        _command(commands, "audit", "verify the audit ledger, write and check inclusion proofs"), "audit_command"
    )
    verify = _command(
        audit,
        "verify",
        "check every event, link, time and checkpoint, and look for stray chains; exit 1 on any finding",
        cmd_audit_verify,
        "One line per finding names its place (chain-003.42 or checkpoint ID);"
        " the last line counts the events, chains and checkpoints checked.",
    )
    verify.add_argument("--chain", action="append", help="only this chain (repeatable), e.g. chain-003")
    verify.add_argument("--from-checkpoint", help="start at this checkpoint, trusting its chain heads")
    _store_option(verify)
    proof = _command(audit, "proof", "write an inclusion proof for one event", cmd_audit_proof)
    proof.add_argument("event_id", help="the event's id, e.g. chain-003.42")
    proof.add_argument("--out", help="where to write it (default EVENT_ID.proof.json)")
    _store_option(proof)
    check = _command(audit, "check-proof", "check a proof file offline (no store needed)", cmd_audit_check_proof)
    check.add_argument("file", help="the proof file")

    backlog = _actions(_command(commands, "backlog", "the research backlog"), "backlog_command")
    status = _command(backlog, "status", "status counts, ages, retries, failures and loop health", cmd_backlog_status)
    _json_option(status, "the view")
    _store_option(status)

    pathways = _actions(_command(commands, "pathways", "the pathway library"), "pathways_command")
    inspect = _command(pathways, "inspect", "totals, models, maturity per trigger type, top hits", cmd_pathways_inspect)
    _json_option(inspect, "the stats")
    _store_option(inspect)

    knowledge = _actions(_command(commands, "knowledge", "manage the knowledge base documents"), "knowledge_command")
    add = _command(
        knowledge,
        "add",
        "index text, Markdown or PDF files",
        cmd_knowledge_add,
        "A file is keyed by its path relative to the current directory (absolute when outside it):"
        " adding it again with changed bytes makes a new version, with the same bytes changes nothing."
        " Every file is checked before the first one is stored.",
    )
    add.add_argument("files", nargs="+", metavar="FILE", help="the files to add (.txt, .md, .markdown, .pdf)")
    _scope_option(add)
    _store_option(add)
    listing = _command(knowledge, "list", "the documents: id, version, chunks, title, source", cmd_knowledge_list)
    _json_option(listing, "the documents")
    _scope_option(listing)
    _store_option(listing)
    remove = _command(
        knowledge,
        "remove",
        "remove a document: its metadata, chunks and every stored version of its body",
        cmd_knowledge_remove,
    )
    remove.add_argument("document_id", help="the document's id (see `flowledger knowledge list`)")
    _scope_option(remove)
    _store_option(remove)

    chat = _command(
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
    chat.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="the dev server's data directory")
    chat.add_argument("--url", help="the server's base URL (default: from the data directory)")
    chat.add_argument("--token", help="a bearer token with the chat scope (default: a local dev token)")
    # Contradictions argparse cannot express are refused as its own errors are: usage, one line, exit 2.
    chat.set_defaults(options_problem=chat_options_problem, command_parser=chat)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = args.options_problem(args) if hasattr(args, "options_problem") else None
    if problem:
        args.command_parser.error(problem)
    # botocore's exceptions alone load in a few milliseconds; boto3 itself loads only for a store command.
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    data_dir = getattr(args, "data_dir", None)
    try:
        status = int(args.func(args))
        sys.stdout.flush()  # a buffered pipe fails here, inside the handlers below, rather than at exit
        return status
    except FlowledgerError as exc:
        return _fail(exc.message)
    except (NoCredentialsError, PartialCredentialsError):
        return _fail(
            "no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,"
            " or pass --data-dir (FLOWLEDGER_DATA_DIR) of a running `flowledger serve`"
        )
    except EndpointConnectionError as exc:
        url = exc.kwargs.get("endpoint_url", "the AWS endpoint")
        if data_dir is not None:
            return _fail(f"cannot reach the store at {url}: is `flowledger serve --data-dir {data_dir}` running?")
        return _fail(f"cannot reach {url}: check the network and AWS_REGION")
    except ClientError as exc:
        return _fail(_refusal(exc, data_dir))
    except BotoCoreError as exc:
        return _fail(f"AWS: {exc}")
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly as other tools do, and keep the exit-time
        # flush of stdout from printing a second traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _refusal(exc: ClientError, data_dir: str | None) -> str:
    """One line for an AWS error response, with the likely fix when a table or bucket is missing."""
    error = exc.response.get("Error", {})
    code, message = error.get("Code", "unknown"), error.get("Message", "")
    if code not in ("ResourceNotFoundException", "NoSuchBucket"):
        return f"AWS refused {exc.operation_name}: {code}: {message}"
    if data_dir is not None:
        return f"the store has no such table or bucket ({code} on {exc.operation_name}): restart `flowledger serve`"
    return (
        f"a table or bucket is missing ({code} on {exc.operation_name}): deploy the stack,"
        " or check AWS_REGION and FLOWLEDGER_RESOURCE_PREFIX"
    )


def _fail(message: str) -> int:
    print(f"flowledger: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
