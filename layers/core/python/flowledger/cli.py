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
    from flowledger.local.datadir import EMBEDDED_CREDENTIALS

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
    from flowledger.local.datadir import DataDir

    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
    print(DataDir(Path(args.data_dir)).token(args.sub, scopes, patient_id=args.patient_id, ttl_seconds=args.ttl))
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
            return _print_chat_stream(response.iter_lines(), base_url)
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


def flow_line(flow_id: object, base_url: str | None) -> str:
    """The turn's flow and where the console shows it; says so when the turn was not recorded."""
    if not isinstance(flow_id, str):
        return "  flow: not recorded (flow capture is off here, or recording failed)"
    link = f"  {base_url.rstrip('/')}/console/flows/{flow_id}" if base_url else ""
    return f"  flow: {flow_id}{link}"


MAX_CLI_CELL_CHARS = 40


def table_lines(table: dict[str, Any]) -> list[str]:
    """A table answer as aligned text: a header, a rule, its rows (numbers right-aligned), and how many
    of how many rows when they were cut."""
    columns = [str(name) for name in table.get("columns") or []]
    rows = [["" if cell is None else _shorten(str(cell), MAX_CLI_CELL_CHARS) for cell in row] for row in table["rows"]]
    numeric = [all(_is_number(row[i]) for row in table["rows"] if row[i] is not None) for i in range(len(columns))]
    widths = [max([len(name), *(len(row[i]) for row in rows)]) for i, name in enumerate(columns)]

    def line(cells: list[str]) -> str:
        padded = [c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  " + "  ".join(padded).rstrip()

    lines = [line(columns), "  " + "  ".join("-" * w for w in widths), *(line(row) for row in rows)]
    shown, total = table.get("rows_shown", len(rows)), table.get("total_rows", len(rows))
    if shown < total:
        lines.append(f"  ({shown} of {total} rows shown)")
    return lines


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _server_message(raw: bytes, reason: str) -> str:
    """The ``message`` of an error body, else its text, else the status's reason phrase."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return _shorten(raw.decode(errors="replace").strip(), 200) or reason


def _print_chat_stream(lines: Iterable[str], base_url: str | None = None) -> int:
    """Print a turn's events as they arrive; 1 unless the stream ends with ``done``.

    ``base_url``: the server's, for the console link of the turn's flow (``<base>/console/flows/<id>``).
    """
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
            if kind in ("done", "error") and "flow_id" in data:
                print(flow_line(data.get("flow_id"), base_url), file=sys.stderr)
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
        for table in content.get("tables") or []:
            print("\n".join(table_lines(table)))
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


def cmd_recount(args: argparse.Namespace) -> int:
    """Rebuild the backlog's or the pathway library's counters from their rows (once, after an upgrade)."""
    import getpass

    services = _store_services(args.data_dir)
    if args.recount_of == "backlog":
        from flowledger.research.backlog_stats import BacklogStats

        counts = BacklogStats(services).recount(f"cli:{getpass.getuser()}")
    else:
        from flowledger.pathways.stats import PathwayStats

        counts = PathwayStats(services).recount(f"cli:{getpass.getuser()}")
    if args.json:
        print(json.dumps(counts, indent=2, sort_keys=True))
        return 0
    print(f"recounted the {args.recount_of} counters:")
    for name, count in counts.items():
        print(f"  {name:<32} {count:>8}")
    return 0


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


# ---- the research agents and the evaluation runner (`flowledger research ...`, `flowledger eval run`) ----
# An agent that gives up, or a model whose configuration cannot be read, is an answer that failed:
# one line and exit 1, as `chat` does; input refused before anything runs is exit 2.
TRIGGER_TYPE_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"  # a trigger type, as a flow records it
MAX_TRIGGER_REF_CHARS = 256
MAX_RESEARCH_QUESTION_CHARS = 2000
_NOT_RECORDED = "not recorded (REASONING_FLOW_CAPTURE_ENABLED is off, or recording failed)"


def _agent_failed(message: str) -> int:
    print(f"flowledger: error: {' '.join(message.split())}", file=sys.stderr)
    return 1


class _NoMetrics:
    """The console's stdout is the command's output: EMF records there are for CloudWatch in a Lambda."""

    def emit(self, name: str, value: float, unit: str, dimensions: Any) -> None:
        pass


def _agent_services(data_dir: str | None) -> Services:
    """The store's services, with the metrics a flow write emits kept off stdout (the table or the JSON)."""
    services = _store_services(data_dir)
    services.metrics = _NoMetrics()
    return services


def _agent_model(services: Services) -> Any:
    """The chat model the settings configure (the offline model without a key or server)."""
    from flowledger.llm.factory import chat_model_for

    return chat_model_for(services.settings)


def cmd_research_run(args: argparse.Namespace) -> int:
    from flowledger.llm.aws_model_config import ModelUnavailable
    from flowledger.research.agents.recording import AgentGaveUp, research_recorder
    from flowledger.research.agents.researcher import Researcher, ResearchQuestion

    services = _agent_services(args.data_dir)
    question = ResearchQuestion(args.trigger_type, args.trigger_ref, args.question)
    try:
        finding = Researcher(services, _agent_model(services), research_recorder(services)).research(question)
    except (AgentGaveUp, ModelUnavailable) as exc:
        return _agent_failed(exc.message)
    answer = finding.answer
    if args.json:
        body = {
            "outcome": finding.outcome,
            "composite_k": finding.composite_k,
            "hits": finding.hits,
            "queries": finding.queries,
            "answer": answer.model_dump(mode="json") if answer else None,
            "flow_id": finding.flow_id,
            "claim_id": finding.claim_id,
        }
        print(json.dumps(body, indent=2))
        return 0
    print(f"outcome      {finding.outcome}")
    print(f"composite_k  {finding.composite_k:.2f}")
    queries = f"{finding.queries} {'query' if finding.queries == 1 else 'queries'}"
    print(f"hits         {counted(finding.hits, 'document')} from {queries}")
    print(f"flow         {finding.flow_id or _NOT_RECORDED}")
    if answer is not None:
        print(f"\n{answer.text}")
        for reference in answer.references:
            print(f"  [{reference.document_id}] {reference.title}")
        if answer.limitations:
            print(f"limitations: {answer.limitations}")
    return 0


def cmd_research_correlate(args: argparse.Namespace) -> int:
    from flowledger.llm.aws_model_config import ModelUnavailable
    from flowledger.research.agents.correlator import Correlator
    from flowledger.research.agents.recording import AgentGaveUp, research_recorder

    services = _agent_services(args.data_dir)
    try:
        found = Correlator(services, _agent_model(services), research_recorder(services)).correlate(args.trigger_type)
    except (AgentGaveUp, ModelUnavailable) as exc:
        return _agent_failed(exc.message)
    aggregate = found.aggregate
    if args.json:
        body = {
            "trigger_type": found.trigger_type,
            "recommendation": found.recommendation,
            "reason_code": found.reason_code,
            "aggregate": asdict(aggregate),
            "flow_id": found.flow_id,
        }
        print(json.dumps(body, indent=2))
        return 0
    confidence = aggregate.mean_delivered_confidence
    print(f"recommendation  {found.recommendation} ({found.reason_code})")
    print(
        f"family          {found.trigger_type}: {counted(aggregate.flows, 'closed flow')} of the last 7 days,"
        f" {aggregate.aborted} aborted, {counted(aggregate.distinct_refs, 'distinct trigger ref')}"
    )
    outcomes = ", ".join(f"{kind} {count}" for kind, count in aggregate.outcomes.items())
    print(f"outcomes        {outcomes or '-'}")
    print(f"mean delivered  {'-' if confidence is None else f'{confidence:.2f}'}")
    print(f"flow            {found.flow_id or _NOT_RECORDED}")
    return 0


def cmd_eval_run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from flowledger.llm.aws_model_config import ModelUnavailable
    from flowledger.research.agents.recording import research_recorder
    from flowledger.research.evaluation import (
        MAX_FILE_BYTES,
        CasesInvalid,
        EvaluationRunner,
        check_run_id,
        parse_cases,
    )

    if args.run_id is not None:
        check_run_id(args.run_id)  # before the file is read or the store is reached
    try:
        with open(args.cases, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)  # one byte over says "too large" without reading it all
    except OSError as exc:
        raise CommandFailed(f"{args.cases}: {exc.strerror or type(exc).__name__}") from None
    try:
        cases = parse_cases(data)
    except CasesInvalid as exc:
        return _fail(f"{args.cases} {exc.message}")
    services = _agent_services(args.data_dir)
    try:
        model = _agent_model(services)
    except ModelUnavailable as exc:
        return _agent_failed(exc.message)
    runner = EvaluationRunner(services, model, research_recorder(services))
    # tqdm draws only on a terminal (disable=None), never over JSON output.
    with tqdm(
        total=len(cases), desc="cases", unit=" cases", leave=False, disable=True if args.json else None, file=sys.stderr
    ) as bar:
        report = runner.run(cases, run_id=args.run_id, on_case=lambda _: bar.update())
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        _print_evaluation(report)
    return 0 if report.all_passed else 1


def _print_evaluation(report: Any) -> None:
    """The report as a fixed-width table (one row per case, in file order) and a totals line."""
    width = max(len("case"), *(len(case.case_id) for case in report.cases))
    print(
        f"{'case':<{width}}  {'outcome':<24}  {'k':>4}  {'hits':>4}  {'cited':>5}  {'expected':>8}  "
        f"{'result':<6}  {'reason':<26}  flow"
    )
    for case in report.cases:
        expected = "-" if case.expected_found is None else f"{case.expected_found}/{case.expected}"
        print(
            f"{case.case_id:<{width}}  {case.outcome:<24}  {case.composite_k:>4.2f}  {case.hits:>4}  {case.cited:>5}  "
            f"{expected:>8}  {'pass' if case.passed else 'FAIL':<6}  {case.reason or '-':<26}  {case.flow_id or '-'}"
        )
    totals = report.totals
    print(
        f"{counted(totals.cases, 'case')}: {totals.passed} passed, {totals.failed} failed ({totals.gave_up} gave up);"
        f" mean composite_k {totals.mean_composite_k:.2f}; run {report.run_id} via {report.model}"
    )
    missing = sum(case.flow_id is None for case in report.cases)
    if not report.recorded:
        print("flows not recorded: REASONING_FLOW_CAPTURE_ENABLED is off")
    elif missing:  # the recorder is fail-soft: its warning on stderr says what failed
        print(f"{missing} of {counted(totals.cases, 'flow')} not recorded: recording failed")


def _pattern(pattern: str, what: str) -> Any:
    """An argparse type: the value when it matches ``pattern``, a usage error naming ``what`` otherwise."""
    import re

    def check(value: str) -> str:
        if not re.fullmatch(pattern, value):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return value

    return check


def _bounded_text(limit: int) -> Any:
    def check(value: str) -> str:
        if not value.strip() or len(value) > limit:
            raise argparse.ArgumentTypeError(f"must be 1 to {limit} characters, not blank")
        return value

    return check


def _add_research_commands(commands: Any) -> None:
    """`flowledger research run|correlate` and `flowledger eval run` (the agents load only when one runs)."""
    trigger_type = _pattern(TRIGGER_TYPE_PATTERN, "a trigger type (lowercase letters, digits, '_', '.', '-')")
    research = _actions(
        _command(commands, "research", "run the research agents once against the local or AWS store"),
        "research_command",
    )
    run = _command(
        research,
        "run",
        "research one question: retrieval, a checked synthesis and an evidence score, recorded as one flow",
        cmd_research_run,
        "A weak result enqueues deeper research when RESEARCH_AUTO_ENQUEUE_ENABLED is on; the flow is"
        " recorded when REASONING_FLOW_CAPTURE_ENABLED is on. Exits 1 when the researcher gives up.",
    )
    run.add_argument("question", type=_bounded_text(MAX_RESEARCH_QUESTION_CHARS), help="the question to research")
    run.add_argument("--trigger-type", required=True, type=trigger_type, help="the flow's trigger type, e.g. lab_trend")
    run.add_argument(
        "--trigger-ref",
        required=True,
        type=_bounded_text(MAX_TRIGGER_REF_CHARS),
        help="what triggered it, e.g. lab/hba1c-trend (its words are one of the retrieval queries)",
    )
    _json_option(run, "the finding")
    _store_option(run)
    correlate = _command(
        research,
        "correlate",
        "recommend what a trigger family needs from its closed flows of the last 7 days",
        cmd_research_correlate,
        "Exits 1 when the correlator gives up.",
    )
    correlate.add_argument("trigger_type", type=trigger_type, help="the family's trigger type, e.g. user_question")
    _json_option(correlate, "the recommendation and its aggregate")
    _store_option(correlate)

    evaluation = _actions(_command(commands, "eval", "benchmark the researcher on a file of cases"), "eval_command")
    eval_run = _command(
        evaluation,
        "run",
        "run every case of a JSONL file through the researcher and print a verdict per case",
        cmd_eval_run,
        'One case per line: {"case_id", "question", "expected_document_ids"?, "expected_outcome"?}'
        " (at most 1000); a bad line stops it before any case runs (exit 2). Each case is recorded as a"
        " flow user_question benchmark/RUN_ID/CASE_ID when REASONING_FLOW_CAPTURE_ENABLED is on, and never"
        " enqueues research. Exits 0 when every case passed, 1 otherwise.",
    )
    eval_run.add_argument("cases", metavar="CASES.jsonl", help="the cases file (JSON Lines)")
    eval_run.add_argument(
        "--run-id",
        help="name the run: 1 to 64 letters, digits, '_', '.', '-' (default ev_ + a new ULID);"
        " it is the middle of every case's trigger ref",
    )
    _json_option(eval_run, "the report")
    _store_option(eval_run)


# ---- exported flows: shape lint and the golden signature check (`flowledger flows ...`) ----
# Both read the export's JSONL offline (no store): a file that cannot be read or a line that is not a
# record is exit 2 naming the line; a check that ran and found a critical rule or too much drift is exit 1.


def _flow_records(path: str, check: Any) -> Any:
    """``check(records)`` over the records of ``path``, streamed; a bad line ends the command naming it."""
    from flowledger.reasoning.dataset import RecordInvalid, read_records

    try:
        with open(path, "rb") as file:
            return check(read_records(file))
    except OSError as exc:
        raise CommandFailed(f"{path}: {exc.strerror or type(exc).__name__}") from None
    except RecordInvalid as exc:
        raise CommandFailed(f"{path} {exc.message}") from None


def cmd_flows_lint(args: argparse.Namespace) -> int:
    from flowledger.reasoning.flow_lint import lint_records

    report = _flow_records(args.file, lint_records)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        for finding in report.findings:
            print(f"{finding.severity:<8}  line {finding.line}  {finding.flow_id}  {finding.rule}: {finding.detail}")
        print(
            f"{counted(report.flows, 'flow')}: {report.critical} critical, {counted(report.warnings, 'warning')}:"
            f" {report.verdict}"
        )
    return 1 if report.verdict == "FAIL" else 0


def signature_corpus(path: str | None) -> Any:
    """The golden corpus at ``path`` (``--corpus``), or the packaged one; an unreadable file ends the command."""
    from flowledger.reasoning.signatures import packaged_corpus, parse_corpus

    if path is None:
        return packaged_corpus()
    try:
        with open(path, "rb") as file:
            return parse_corpus(file.read(), path)
    except OSError as exc:
        raise CommandFailed(f"{path}: {exc.strerror or type(exc).__name__}") from None


def cmd_flows_signature_check(args: argparse.Namespace) -> int:
    from flowledger.reasoning.signatures import check_records

    corpus = signature_corpus(args.corpus)

    report = _flow_records(args.input, lambda records: check_records(corpus, records, args.threshold))
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        for finding in report.findings:
            if finding.finding != "matched":
                print(
                    f"{finding.finding:<14}  line {finding.line}  {finding.flow_id}  {finding.trigger_type}:"
                    f" {finding.detail}"
                )
        print(
            f"{counted(report.flows, 'flow')}: {report.matched} matched, {report.sequence_drift} sequence drift,"
            f" {report.outcome_drift} outcome drift, {report.skipped} skipped; drift {report.drift_share:.2%}"
            f" of {report.compared} compared (threshold {report.threshold:.2%}): {'PASS' if report.passed else 'FAIL'}"
        )
    return 0 if report.passed else 1


def _share(value: str) -> float:
    """An argparse type: a share between 0 and 1 (0.05 is 5 %)."""
    try:
        share = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0.0 <= share <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 1")
    return share


def _add_flows_commands(commands: Any) -> None:
    """`flowledger flows export|lint|signature-check|replay|otel-export`."""
    flows = _actions(
        _command(commands, "flows", "export closed reasoning flows, check, replay and trace them"),
        "flows_command",
    )
    lint = _command(
        flows,
        "lint",
        "check every flow for shape anomalies: 3 critical rules and 4 warnings",
        cmd_flows_lint,
        "Critical: empty_step_sequence, verdict_before_retrieval, no_model_call_ref. Warnings: empty_agent_set,"
        " aggregate_confidence_one, duplicate_consecutive_kinds, summary_hidden_majority. Exits 1 on any"
        " critical finding (FAIL), 0 on PASS or PASS-WITH-NOTES, 2 when a line is not a flow record.",
    )
    lint.add_argument("file", metavar="FILE", help="the flows file (JSONL, as `flows export --format raw` writes it)")
    _json_option(lint, "the verdict, the counts and every finding")
    check = _command(
        flows,
        "signature-check",
        "compare every flow's step kinds and outcome with the golden signatures of its trigger type",
        cmd_flows_signature_check,
        "Each flow is matched, sequence_drift, outcome_drift or skipped (its trigger type is not in the corpus)."
        " Exits 1 when the drifted share of the compared flows exceeds --threshold, 0 otherwise,"
        " 2 when a line is not a flow record or the corpus cannot be read.",
    )
    check.add_argument("--input", required=True, metavar="FILE", help="the flows file (JSONL) to check")
    check.add_argument(
        "--threshold",
        type=_share,
        default=0.0,
        help="the drifted share of compared flows allowed, 0 to 1 (default 0: any drift fails; 0.05 allows 5%%)",
    )
    check.add_argument(
        "--corpus",
        metavar="FILE",
        help="a signature corpus to use instead of the packaged one (flowledger/reasoning/expected_signatures.json)",
    )
    _json_option(check, "the counts and every flow's finding")
    from flowledger.cli_flows import export, listing, otel, replay

    for module in (export, replay, otel, listing):
        module.add_command(flows)


# ---- the chat model's endpoint (`flowledger model probe`) ----


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


def _add_model_commands(commands: Any) -> None:
    """`flowledger model probe`."""
    model = _actions(_command(commands, "model", "check the chat model's endpoint"), "model_command")
    probe = _command(
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
        type=_positive_int,
        default=30,
        metavar="SECONDS",
        help="how long each call may take (default 30)",
    )
    _json_option(probe, "the checks, the modes chosen and the verdict")


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
    backlog_recount = _command(
        backlog,
        "recount",
        "rebuild the status counters from every row (once, after upgrading a deployment)",
        cmd_recount,
        "Reads the whole table; audited as memory.job.backlog_counters.recounted.",
    )
    backlog_recount.set_defaults(recount_of="backlog")
    _json_option(backlog_recount, "the counts")
    _store_option(backlog_recount)

    pathways = _actions(_command(commands, "pathways", "the pathway library"), "pathways_command")
    inspect = _command(pathways, "inspect", "totals, models, maturity per trigger type, top hits", cmd_pathways_inspect)
    _json_option(inspect, "the stats")
    _store_option(inspect)
    pathways_recount = _command(
        pathways,
        "recount",
        "rebuild the library's counters and top-hits index from every pathway (once, after upgrading)",
        cmd_recount,
        "Reads the whole table; audited as memory.job.pathway_counters.recounted.",
    )
    pathways_recount.set_defaults(recount_of="pathways")
    _json_option(pathways_recount, "the counts")
    _store_option(pathways_recount)

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

    _add_research_commands(commands)
    _add_flows_commands(commands)
    _add_model_commands(commands)

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
