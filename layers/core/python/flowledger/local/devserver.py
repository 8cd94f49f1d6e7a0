"""``flowledger serve``: every route, the embedded AWS endpoint and the scheduler in one process.

REST requests run in worker processes on the handlers the functions deploy (``local/functions.py``);
the chat app is mounted in this process as Lambda Web Adapter runs it; the embedded store is saved
to the data directory at intervals and on shutdown, and restored at start.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_lambda_powertools.event_handler.openapi.swagger_ui.html import generate_swagger_html

from flowledger import __version__
from flowledger.api.chat_app import create_app
from flowledger.api.openapi import openapi_document
from flowledger.api.registry import rest_routes
from flowledger.api.routes import routes_of
from flowledger.api.tokens import TokenVerifier
from flowledger.config import DiagnosisSqlBackend, Settings, load_settings
from flowledger.diagnosis.demo_database import build_demo_database
from flowledger.diagnosis.demo_incident import DEMO_QUESTION
from flowledger.diagnosis.demo_logs import seed_demo_logs
from flowledger.errors import ConfigurationError
from flowledger.jobs import JOBS
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.llm.probe import model_banner
from flowledger.local.console import console_app
from flowledger.local.datadir import (
    EMBEDDED_CREDENTIALS,
    LOCAL_AUDIENCE,
    LOCAL_ISSUER,
    DataDir,
    LocalEndpoints,
)
from flowledger.local.demo_table import DEMO_TABLE, DEMO_WORKSPACE, DemoTable, ensure_demo_table
from flowledger.local.dev_token import development_token
from flowledger.local.functions import FunctionPool, settings_environment
from flowledger.local.gateway import LocalGateway
from flowledger.local.moto_server import LockedMotoServer
from flowledger.local.moto_state import DEFAULT_INTERVAL_SECONDS, PeriodicSnapshots, StateCounts
from flowledger.local.scheduler import LocalScheduler
from flowledger.local.sigv4 import SigV4Verifier
from flowledger.services import Services, build_services
from flowledger.store.provision import provision_all
from flowledger.store.tables import BUCKETS, TABLES

DEMO_DOCUMENTS = Path(__file__).parent / "demo_documents"
CONTINUITY_VARIABLE = "ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY"
# One execution environment per worker; the embedded store serialises requests anyway.
DEFAULT_WORKERS = 4
GRACEFUL_SHUTDOWN_SECONDS = 3
_SWAGGER = Path(generate_swagger_html.__code__.co_filename).parent
SWAGGER_JS = (_SWAGGER / "swagger-ui-bundle.min.js").read_text()
SWAGGER_CSS = (_SWAGGER / "swagger-ui.min.css").read_text()


@dataclass
class LocalStack:
    """Everything ``serve`` started, so it can be stopped in one call."""

    app: LocalGateway
    services: Services
    moto: LockedMotoServer
    functions: FunctionPool
    scheduler: LocalScheduler
    endpoints: LocalEndpoints
    snapshots: PeriodicSnapshots
    state_file: Path
    restored: StateCounts | None
    demo_table: DemoTable

    def stop(self) -> None:
        """Stop the jobs and the functions, save the store one last time, then stop it."""
        self.scheduler.stop()
        self.functions.stop()
        self.snapshots.stop()
        self.moto.stop()


def ensure_port_free(host: str, port: int) -> None:
    """Fail with one clear line before anything starts when the port is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As uvicorn binds: a port left in TIME_WAIT by a server that just stopped is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            raise ConfigurationError(f"port {port} on {host} is already in use; pick another with --port") from None


def start_local_stack(
    data_dir: Path,
    host: str,
    port: int,
    *,
    reset: bool = False,
    workers: int = DEFAULT_WORKERS,
    snapshot_interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
    **settings_overrides: Any,
) -> LocalStack:
    """Start the embedded AWS endpoint (restored from the data dir), the function workers and the gateway."""
    base_url = f"http://{host}:{port}"
    directory = DataDir(data_dir)
    if reset:
        directory.reset()
    state_file = directory.state_file
    moto = LockedMotoServer(host="127.0.0.1")
    restored = moto.restore(state_file)
    aws_endpoint = moto.start()
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
        provision_all(services.aws, settings.aws_region, settings.data_key_id, upload_origins=settings.cors_origin_list)
        if restored is None:  # a restored store keeps what its user made of the demo documents
            seed_demo_documents(services)
        demo_table = ensure_demo_table(services)
        seed_demo_incident(services, directory, fresh=restored is None)
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
        app = _gateway(settings, services, directory, functions)
        scheduler = LocalScheduler(JOBS, services)
        snapshots = PeriodicSnapshots(moto, state_file, snapshot_interval_seconds)
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
        restored=restored,
        demo_table=demo_table,
    )


def local_continuity_default(environ: Mapping[str, str]) -> dict[str, Any]:
    """Conversation continuity on for the local server, unless its variable is set (then it decides).

    An override of ``load_settings``, so the chat app and the function workers (which rebuild their
    settings from ``settings_environment``) get the same value. pydantic-settings reads variable
    names case-insensitively, so a lower-case spelling counts as set too.
    """
    if any(name.upper() == CONTINUITY_VARIABLE for name in environ):
        return {}
    return {"enable_mixed_source_conversation_continuity": True}


def _function_environment(settings: Settings) -> dict[str, str]:
    """What a function worker's ``bootstrap()`` reads: these settings and the embedded store's credentials."""
    key_id, secret = EMBEDDED_CREDENTIALS
    return {**settings_environment(settings), "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret}


def _gateway(settings: Settings, services: Services, directory: DataDir, functions: FunctionPool) -> LocalGateway:
    document = openapi_document(__version__)
    spec = json.dumps(document).encode()
    docs = generate_swagger_html(
        json.dumps(document), SWAGGER_JS, SWAGGER_CSS, swagger_base_url="", oauth2_config=None
    ).encode()
    jwks = json.dumps(directory.jwks()).encode()
    assert settings.jwks_url and settings.jwt_issuer
    gateway = LocalGateway(
        routes=rest_routes(),
        functions=functions,
        tokens=TokenVerifier(settings.jwks_url, settings.jwt_issuer, settings.jwt_audience),
        sigv4=SigV4Verifier(directory.admin_credentials()),
        cors_origins=settings.cors_origin_list,
        pages={
            "/openapi.json": lambda: ("application/json", spec),
            "/docs": lambda: ("text/html; charset=utf-8", docs),
            "/.well-known/jwks.json": lambda: ("application/json", jwks),
        },
        console=console_app(directory, aws_endpoint=settings.aws_endpoint_url),
    )
    chat_paths = {path: item for path, item in document["paths"].items() if path.startswith("/api/chat")}
    gateway.mount("chat", create_app(lambda: services), routes_of(chat_paths, function="chat"))
    return gateway


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
    index = KnowledgeIndex(services)
    documents = sorted(DEMO_DOCUMENTS.glob("*.md"))
    for path in documents:
        index.add_document(path.name, path.read_bytes(), scope="global")
    return len(documents)


def serve(data_dir: Path, host: str, port: int, *, reset: bool = False, workers: int = DEFAULT_WORKERS) -> None:
    """Run the dev server until Ctrl-C or SIGTERM; in-flight requests get a few seconds to finish."""
    import uvicorn  # a dev dependency: never imported by a Lambda function

    ensure_port_free(host, port)
    _log_requests()
    # uvicorn shuts down gracefully on SIGTERM, then raises it again under the previous handler:
    # make that one unwind like Ctrl-C, so the store is saved and the workers are stopped below.
    signal.signal(signal.SIGTERM, _interrupt)
    stack = start_local_stack(data_dir, host, port, reset=reset, workers=workers)
    try:
        _print_banner(stack, DataDir(data_dir), reset)
        stack.scheduler.start()
        stack.snapshots.start()
        config = uvicorn.Config(
            stack.app,
            host=host,
            port=port,
            lifespan="off",
            log_level="warning",
            access_log=False,  # the gateway logs each request itself, without query strings
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        )
        server = uvicorn.Server(config)
        # A closed terminal (SIGHUP) stops the server as Ctrl-C does, so the store is saved.
        signal.signal(signal.SIGHUP, lambda *_: server.handle_exit(signal.SIGTERM, None))
        server.run()
    finally:
        stack.stop()
        print(f"flowledger: stopped; state saved to {stack.state_file}", flush=True)


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


def _print_banner(stack: LocalStack, directory: DataDir, reset: bool) -> None:
    settings = stack.services.settings
    credentials = directory.admin_credentials()
    model = (
        "offline model (deterministic, no network): set OPENAI_API_KEY or OPENAI_BASE_URL to use a real one"
        if settings.uses_offline_model
        else model_banner(settings)  # the models list and a 1-token chat, ~2 s at most
    )
    if stack.restored is not None:
        state = f"restored {stack.restored.describe()} from {stack.state_file}"
    else:
        state = f"{'reset: ' if reset else ''}started empty; saved to {stack.state_file} while running"
    lines = [
        f"flowledger {__version__} serving on {stack.endpoints.base_url}",
        f"  docs             {stack.endpoints.base_url}/docs  (OpenAPI: /openapi.json)",
        f"  console          {stack.endpoints.base_url}/console/  (on loopback: as the local admin and a demo patient)",
        f"  embedded AWS     {stack.endpoints.aws_endpoint_url}  (tables and buckets in {directory.path}/local.json)",
        f"  state            {state}",
        f"  functions        {stack.functions.workers} worker processes running the Lambda handlers",
        f"  model            {model}",
        f'  demo incident    logs, database and runbook: try `flowledger chat "{DEMO_QUESTION}"`',
        _continuity_line(settings.enable_mixed_source_conversation_continuity),
        _research_line(settings),
        *_demo_table_lines(stack.demo_table, directory),
        f"  scheduler        {', '.join(f'{j.name} {j.schedule}' for j in JOBS)}",
        f"  admin (SigV4)    access key {credentials.access_key_id}, region {credentials.region},"
        f" service execute-api  ({directory.path}/admin-credentials.json)",
        "  dev token (all scopes, 12 h):",
        f"    {development_token(directory)}",
        "Ctrl-C stops everything.",
    ]
    print("\n".join(lines), flush=True)


def _research_line(settings: Settings) -> str:
    off = [v for v, field in RESEARCH_LOOP_VARIABLES.items() if not getattr(settings, field)]
    how = "on: flows recorded, weak results enqueued, the backlog consumer dispatches to the agents"
    if off:
        how = f"partly off ({', '.join(off)} false)"
    return f"  research loop    {how}"


def _continuity_line(enabled: bool) -> str:
    if enabled:
        how = f"on (the local default); start with {CONTINUITY_VARIABLE}=false to turn it off"
    else:
        how = f"off ({CONTINUITY_VARIABLE} is set); start with {CONTINUITY_VARIABLE}=true, or unset it, to turn it on"
    return f"  continuity       {how}"


def _demo_table_lines(demo: DemoTable, directory: DataDir) -> list[str]:
    """The demo table's id and the two turns to try on it, ready to copy."""
    if demo.document_id is None:
        return [
            f"  demo table       {DEMO_TABLE} was deleted from the workspace {DEMO_WORKSPACE}; --reset brings it back"
        ]
    # The CLI finds the server through its data dir: name it unless it is the one the CLI assumes.
    data_dir = "" if directory.path == Path(".flowledger") else f" --data-dir {directory.path}"
    return [
        f"  demo table       {DEMO_TABLE} {demo.document_id} (public workspace {DEMO_WORKSPACE}); try",
        f'                     flowledger chat{data_dir} "total amount by month" --select {demo.document_id}',
        f'                     flowledger chat{data_dir} --session ses_... "now break that down by region"',
    ]
