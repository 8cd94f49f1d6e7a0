"""``flowledger serve``: every route, the embedded AWS endpoint and the scheduler in one process.

REST requests run in worker processes on the handlers the functions deploy (``local/functions.py``);
the chat app is mounted in this process as Lambda Web Adapter runs it; the embedded store is saved
to the data directory at intervals and on shutdown, and restored at start.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowledger import __version__
from flowledger.api.openapi import openapi_document
from flowledger.api.registry import rest_routes
from flowledger.api.routes import routes_of
from flowledger.api.tokens import TokenVerifier
from flowledger.config import DiagnosisSqlBackend, Settings, load_settings
from flowledger.errors import ConfigurationError, FlowledgerError
from flowledger.heap import freeze_long_lived
from flowledger.jobs import jobs_with_checkpoints_every
from flowledger.local.banner import listening_lines, ready_lines
from flowledger.local.console import console_app
from flowledger.local.datadir import (
    EMBEDDED_CREDENTIALS,
    LOCAL_AUDIENCE,
    LOCAL_ISSUER,
    DataDir,
    LocalEndpoints,
)
from flowledger.local.datadir_lock import DataDirLock
from flowledger.local.demo_table import DemoTable, ensure_demo_table
from flowledger.local.durability import Durability
from flowledger.local.functions import FunctionPool, settings_environment
from flowledger.local.gateway import LocalGateway, Page, gateway_log
from flowledger.local.journal import FaultInjection
from flowledger.local.local_defaults import (  # noqa: F401  (CONTINUITY_VARIABLE: tests import it from here)
    CONTINUITY_VARIABLE,
    local_continuity_default,
    local_research_defaults,
)
from flowledger.local.metrics_view import MetricsView
from flowledger.local.moto_server import LockedMotoServer
from flowledger.local.moto_state import DEFAULT_INTERVAL_SECONDS, PeriodicSnapshots, StateCounts
from flowledger.local.scheduler import LocalScheduler
from flowledger.local.serve_options import check_port, prepare_data_dir
from flowledger.local.sigv4 import SigV4Verifier
from flowledger.local.startup import StartupGate
from flowledger.metrics import METRICS_FILE_VARIABLE
from flowledger.services import Services, build_services
from flowledger.store.provision import provision_all
from flowledger.store.tables import BUCKETS, TABLES

DEMO_DOCUMENTS = Path(__file__).parent / "demo_documents"
# One execution environment per worker; the embedded store serialises requests anyway.
DEFAULT_WORKERS = 4
# In-flight requests get this long once a stop is asked for; the whole stop fits in about 3 s.
GRACEFUL_SHUTDOWN_SECONDS = 1
# Past this, a stop stuck on anything (a hung worker, a socket) leaves the process regardless.
STOP_DEADLINE_SECONDS = 8.0
# For benchmarks only: `off` runs without the journal (writes since the last snapshot die with the process).
JOURNAL_VARIABLE = "FLOWLEDGER_JOURNAL"
# For the disk-full test where no small filesystem can be mounted: while this file exists, the journal
# and snapshots fail with ENOSPC.
JOURNAL_FAULT_VARIABLE = "FLOWLEDGER_JOURNAL_FAULT_FILE"


@dataclass
class LocalStack:
    """Everything ``serve`` started, so it can be stopped in one call.

    ``open_local_stack`` starts what ``/health`` needs; ``finish`` does the rest (provisioning, the
    demo data, the chat app, the other workers) and then opens ``gate``.
    """

    app: LocalGateway
    services: Services
    moto: LockedMotoServer
    functions: FunctionPool
    scheduler: LocalScheduler
    endpoints: LocalEndpoints
    snapshots: PeriodicSnapshots
    state_file: Path
    restored: StateCounts | None
    directory: DataDir
    gate: StartupGate
    durability: Durability | None = None  # None when the journal is off
    demo_table: DemoTable | None = None
    finished: bool = False
    saved: bool = True  # False when the last save on stop failed

    def finish(self, stopping: Callable[[], bool] = lambda: False) -> None:
        """The start's second half; returns early (gate closed) once ``stopping()`` is true."""
        services, settings = self.services, self.services.settings
        steps: list[Callable[[], object]] = [
            self._restore,
            lambda: provision_all(services.aws, settings, upload_origins=settings.cors_origin_list),
            # A restored store keeps what its user made of the demo documents.
            lambda: self.restored is None and seed_demo_documents(services),
            lambda: setattr(self, "demo_table", ensure_demo_table(services)),
            lambda: seed_demo_incident(services, self.directory, fresh=self.restored is None),
            lambda: _mount_chat(self.app, services),
        ]
        # The other workers start and warm up in their own processes meanwhile: on a second core while a
        # restore replays its journal, and the ready line waits for the longer of the two, not their sum.
        growing = threading.Thread(target=self.functions.grow, name="workers", daemon=True)
        growing.start()
        for step in steps:
            if stopping():
                return
            step()
        self.finished = True
        freeze_long_lived()  # the restored store lives as long as the server
        self.gate.open()  # requests run on the first worker until the others are warm
        growing.join()

    def _restore(self) -> None:
        """Load the saved store (when there is one), then let the embedded endpoint answer."""
        began = time.monotonic()
        self.restored = self.moto.restore(self.state_file)  # moto's backends load here: a second, maybe more
        if self.moto.replayed:
            gateway_log.info(
                "replayed %d journal records after the snapshot in %.2f s", self.moto.replayed, time.monotonic() - began
            )
        self.moto.serve()

    def stop(self) -> None:
        """Stop the jobs and the functions, save the store one last time, then stop it.

        A fresh store whose start was cut short is not saved: it holds only part of the demo data and
        nothing of the user's (requests wait at the gate), and the next start seeds it whole.
        """
        self.scheduler.stop()
        self.functions.stop()
        if self.finished:
            self.saved = self.snapshots.stop() is not None
        elif self.restored is not None:
            try:
                self.moto.snapshot(self.state_file)  # writes only if the interrupted start changed something
            except OSError as exc:
                self.snapshots.final_error = exc.strerror or str(exc)
                self.saved = False
        self.moto.stop()


def start_local_stack(data_dir: Path, host: str, port: int, **options: Any) -> LocalStack:
    """The whole stack, both halves of the start done in this thread (options as ``open_local_stack``)."""
    stack = open_local_stack(data_dir, host, port, **options)
    try:
        stack.finish()
    except BaseException:
        stack.stop()
        raise
    return stack


def open_local_stack(
    data_dir: Path,
    host: str,
    port: int,
    *,
    reset: bool = False,
    workers: int = DEFAULT_WORKERS,
    snapshot_interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
    journal: bool = True,
    journal_fault_file: Path | None = None,
    **settings_overrides: Any,
) -> LocalStack:
    """Start what ``/health`` needs: one function worker and the gateway; ``finish`` does the rest.

    The embedded AWS endpoint is bound here but answers only once ``finish`` restored the store, and
    ``local.json`` is written here: a CLI command run as soon as ``/health`` answers finds the server,
    and waits for the store rather than seeing it empty. ``journal=False`` (benchmarks only) keeps
    writes in memory until the next snapshot; ``journal_fault_file`` fails the journal while it exists.
    """
    base_url = f"http://{host}:{port}"
    directory = DataDir(data_dir)
    if reset:
        directory.reset()
    state_file = directory.state_file
    moto = LockedMotoServer(host="127.0.0.1")
    aws_endpoint = moto.bind()
    durability = (
        moto.use_journal(directory.journal_dir, state_file, FaultInjection(journal_fault_file)) if journal else None
    )
    functions: FunctionPool | None = None
    try:
        settings = load_settings(
            **{
                "aws_endpoint_url": aws_endpoint,
                "jwks_url": f"{base_url}/.well-known/jwks.json",
                "jwt_issuer": LOCAL_ISSUER,
                "jwt_audience": LOCAL_AUDIENCE,
                "cors_origins": f"{base_url},http://localhost:{port}",
                **local_continuity_default(os.environ),
                **local_research_defaults(os.environ),
                **settings_overrides,
            }
        )
        settings = with_demo_database(settings, directory)
        directory.ensure(settings.aws_region)
        services = build_services(settings, EMBEDDED_CREDENTIALS)
        endpoints = LocalEndpoints(
            base_url=base_url,
            aws_endpoint_url=aws_endpoint,
            region=settings.aws_region,
            resource_prefix=settings.resource_prefix,
            bucket_suffix=settings.bucket_suffix,
            tables={t.name: services.aws.table_name(t.name) for t in TABLES},
            buckets={b.name: services.aws.bucket_name(b.name) for b in BUCKETS},
        )
        directory.write_endpoints(endpoints)
        functions = FunctionPool(_function_environment(settings), workers)
        functions.start()
        gate = StartupGate()
        app = _gateway(settings, directory, functions, gate, durability)
        scheduler = LocalScheduler(jobs_with_checkpoints_every(settings.checkpoint_minutes), services)
        snapshots = PeriodicSnapshots(moto, state_file, snapshot_interval_seconds, durability)
    except BaseException:
        if functions is not None:
            functions.stop()
        moto.stop()
        raise
    return LocalStack(
        app=app,
        services=services,
        moto=moto,
        functions=functions,
        scheduler=scheduler,
        endpoints=endpoints,
        snapshots=snapshots,
        state_file=state_file,
        restored=None,
        directory=directory,
        gate=gate,
        durability=durability,
    )


def _function_environment(settings: Settings) -> dict[str, str]:
    """What a function worker's ``bootstrap()`` reads: these settings and the embedded store's credentials."""
    key_id, secret = EMBEDDED_CREDENTIALS
    return {**settings_environment(settings), "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret}


def _gateway(
    settings: Settings, directory: DataDir, functions: FunctionPool, gate: StartupGate, durability: Durability | None
) -> LocalGateway:
    jwks = json.dumps(directory.jwks()).encode()
    metrics = MetricsView(directory.metrics_file)
    assert settings.jwks_url and settings.jwt_issuer
    return LocalGateway(
        routes=rest_routes(),
        functions=functions,
        tokens=TokenVerifier(settings.jwks_url, settings.jwt_issuer, settings.jwt_audience),
        sigv4=SigV4Verifier(directory.admin_credentials()),
        cors_origins=settings.cors_origin_list,
        pages={
            "/openapi.json": _api_description("application/json"),
            "/docs": _api_description("text/html; charset=utf-8"),
            "/.well-known/jwks.json": lambda: ("application/json", jwks),
        },
        loopback_pages={"/metrics": lambda: ("application/json", json.dumps(metrics.summary(), indent=1).encode())},
        console=console_app(directory, aws_endpoint=settings.aws_endpoint_url),
        gate=gate,
        store_health=durability.health if durability is not None else None,
    )


def _api_description(content_type: str) -> Page:
    """``/openapi.json`` or ``/docs``, built on first request (half a second the start does not wait for)."""

    def page() -> tuple[str, bytes]:
        spec, docs = _openapi_pages()
        return content_type, docs if content_type.startswith("text/html") else spec

    return page


@functools.cache
def _openapi_pages() -> tuple[bytes, bytes]:
    from aws_lambda_powertools.event_handler.openapi.swagger_ui.html import generate_swagger_html

    swagger = Path(generate_swagger_html.__code__.co_filename).parent
    document = _document()
    docs = generate_swagger_html(
        json.dumps(document),
        (swagger / "swagger-ui-bundle.min.js").read_text(),
        (swagger / "swagger-ui.min.css").read_text(),
        swagger_base_url="",
        oauth2_config=None,
    )
    return json.dumps(document).encode(), docs.encode()


@functools.cache
def _document() -> dict[str, Any]:
    return openapi_document(__version__)


def _mount_chat(gateway: LocalGateway, services: Services) -> None:
    """The streaming chat app, served in this process as Lambda Web Adapter runs it."""
    from flowledger.api.chat_app import create_app  # its imports cost a quarter second: after /health

    chat_paths = {path: item for path, item in _document()["paths"].items() if path.startswith("/api/chat")}
    gateway.mount("chat", create_app(lambda: services), routes_of(chat_paths, function="chat"))


def with_demo_database(settings: Settings, directory: DataDir) -> Settings:
    """``settings`` with ``query_sql`` on the data dir's demo database, unless a database is configured.

    Functions and the chat app both get these settings, so every diagnosis reads the same file.
    """
    if settings.diagnosis_sql_backend is not DiagnosisSqlBackend.SQLITE or settings.diagnosis_sqlite_path:
        return settings
    return settings.model_copy(update={"diagnosis_sqlite_path": str(directory.demo_database)})


def seed_demo_incident(services: Services, directory: DataDir, *, fresh: bool) -> None:
    """On a fresh store, the demo incident: its log events in the embedded Logs and its database.

    Both are built from one clock reading, so they tell the same night. A restored store keeps its
    logs and its database (the database is rebuilt only if it went missing, since query_sql needs a
    file); a database configured elsewhere is never touched.
    """
    from flowledger.diagnosis.demo_database import build_demo_database
    from flowledger.diagnosis.demo_logs import seed_demo_logs

    now = services.clock()
    if fresh:
        seed_demo_logs(services.aws.logs, now)
    if services.settings.diagnosis_sqlite_path != str(directory.demo_database):
        return
    if fresh or not directory.demo_database.exists():
        build_demo_database(directory.demo_database, now)  # written whole, then renamed over any older night


def seed_demo_documents(services: Services) -> int:
    """Index the demo documents shipped with the package into the ``global`` scope.

    Run at every start: unchanged bytes write nothing, and a store saved before scopes existed is
    moved into ``global`` by the first of these adds.
    """
    from flowledger.knowledge.index import KnowledgeIndex

    index = KnowledgeIndex(services)
    documents = sorted(DEMO_DOCUMENTS.glob("*.md"))
    for path in documents:
        index.add_document(path.name, path.read_bytes(), scope="global")
    return len(documents)


def serve(
    data_dir: Path,
    host: str,
    port: int,
    *,
    reset: bool = False,
    workers: int = DEFAULT_WORKERS,
    metrics_stdout: bool = False,
    lock: DataDirLock | None = None,
) -> None:
    """Run the dev server until Ctrl-C, SIGTERM or SIGHUP, which stop it within seconds, start-up included.

    ``lock``: the data dir's lock when the caller took it already (the CLI does, before these imports).
    """
    import uvicorn  # a dev dependency: never imported by a Lambda function

    began = time.monotonic()
    # Until uvicorn takes them over, a stop signal unwinds like Ctrl-C, through the finally below.
    for stop_signal in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop_signal, _interrupt)
    base_url = f"http://{host}:{port}"
    if lock is None:
        prepare_data_dir(data_dir)
        check_port(host, port)
        lock = DataDirLock.acquire(data_dir, base_url)
    directory = DataDir(data_dir)
    stack: LocalStack | None = None
    try:
        _log_requests()
        if lock.took_over is not None:
            gateway_log.info(
                "took over %s from pid %d, which stopped without releasing it", lock.path, lock.took_over.pid
            )
        if not metrics_stdout:  # read by flowledger.metrics here and, through the environment, in every worker
            os.environ[METRICS_FILE_VARIABLE] = str(directory.metrics_file)
        stack = open_local_stack(data_dir, host, port, reset=reset, workers=workers, **_journal_options())
        server = uvicorn.Server(
            uvicorn.Config(
                stack.app,
                host=host,
                port=port,
                lifespan="off",
                log_level="warning",
                access_log=False,  # the gateway logs each request itself, without query strings
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
            )
        )
        # A closed terminal (SIGHUP) stops the server as Ctrl-C does, so the store is saved.
        signal.signal(signal.SIGHUP, lambda *_: server.handle_exit(signal.SIGTERM, None))
        threading.Thread(
            target=_finish_start, args=(stack, server, reset, metrics_stdout, began), name="start", daemon=True
        ).start()
        server.run()  # uvicorn handles SIGINT and SIGTERM itself, then raises them again once it has stopped
    finally:
        _stop_within(STOP_DEADLINE_SECONDS)
        if stack is not None:
            stack.stop()
        print(f"flowledger: stopped{_what_was_saved(stack, directory)}", flush=True)
        lock.release()
        if stack is not None and not stack.saved:
            raise SystemExit(1)  # replaces the Ctrl-C on its way out: the exit status says it
    if stack.gate.failure is not None:
        raise ConfigurationError(f"the server could not finish starting: {stack.gate.failure}")


def _finish_start(stack: LocalStack, server: Any, reset: bool, metrics_stdout: bool, began: float) -> None:
    """In a thread: once the gateway listens, print the banner, finish the start, then the ready line."""

    def stopping() -> bool:
        return bool(server.should_exit)

    while not server.started and not stopping():
        time.sleep(0.02)
    if stopping():
        return
    settings = stack.services.settings
    print(
        listening_lines(stack.endpoints, settings, stack.directory, stack.functions.workers, metrics_stdout), flush=True
    )
    try:
        stack.finish(stopping)
    except Exception as exc:
        if stopping():
            return  # the store was stopped under it
        if isinstance(exc, FlowledgerError):  # a damaged store file, say: its message says it all
            stack.gate.fail(exc.message)
        else:
            gateway_log.exception("the start could not finish")
            stack.gate.fail(f"{type(exc).__name__}: {exc}")
        server.should_exit = True
        return
    if stopping():
        return
    stack.scheduler.start()
    stack.snapshots.start()
    ready = ready_lines(settings, stack.directory, stack.restored, reset, stack.demo_table, time.monotonic() - began)
    print(ready, flush=True)


def _journal_options() -> dict[str, Any]:
    """The journal switches read from the environment (benchmarks and the disk-full test set them)."""
    fault = os.environ.get(JOURNAL_FAULT_VARIABLE)
    return {
        "journal": os.environ.get(JOURNAL_VARIABLE, "on").lower() != "off",
        "journal_fault_file": Path(fault) if fault else None,
    }


def _what_was_saved(stack: LocalStack | None, directory: DataDir) -> str:
    if stack is not None and not stack.saved:
        return _what_was_not_saved(stack, directory)
    if stack is not None and (stack.finished or stack.restored is not None):
        return f"; state saved to {directory.state_file}"
    if directory.state_file.exists():  # stopped before the saved store was even loaded
        return f" during the start; {directory.state_file} is as it was"
    return " during the start of an empty store; nothing to save yet"


def _what_was_not_saved(stack: LocalStack, directory: DataDir) -> str:
    """The stop line when the last snapshot failed: what is on disk, and exactly what is not."""
    reason = stack.snapshots.final_error or "unknown error"
    durability = stack.durability
    if durability is None:
        return (
            f"; NOT SAVED: the snapshot to {directory.state_file} failed ({reason}); "
            "every write since the last snapshot is lost"
        )
    unsaved = durability.unsaved
    applied = (
        f"; {unsaved} change{'s' if unsaved != 1 else ''} applied in memory but answered 503 (not journaled)"
        if unsaved
        else ""
    )
    return (
        f"; NOT SAVED: the final snapshot to {directory.state_file} failed ({reason}). "
        f"Saved: every write answered 2xx, in the journal {directory.journal_dir} (replayed at the next start). "
        f"Not saved: {durability.refused} write{'s' if durability.refused != 1 else ''} refused with 503 "
        f"while the store could not save{applied}"
    )


def _stop_within(seconds: float) -> None:
    """Leave the process after ``seconds`` whatever the stop is stuck on, rather than hold the ports."""

    def give_up() -> None:
        print(f"flowledger: the stop took over {seconds:.0f} s; leaving without waiting further", flush=True)
        os._exit(1)

    timer = threading.Timer(seconds, give_up)
    timer.daemon = True
    timer.start()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _log_requests() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    for name in ("flowledger.access", "flowledger.local"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        logger.propagate = False
