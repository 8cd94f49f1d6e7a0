"""The dev server's banner: what runs where, once it listens, then the store and the demo data once ready.

Every command it offers runs as printed (pasted in the directory the server was started from):
the data dir is named whenever the CLI would not find it by itself.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from flowledger import __version__
from flowledger.config import Settings
from flowledger.diagnosis.demo_incident import DEMO_QUESTION
from flowledger.jobs import JOBS
from flowledger.llm.probe import model_banner
from flowledger.local.datadir import DEFAULT_DATA_DIR, DataDir, LocalEndpoints
from flowledger.local.demo_table import DEMO_TABLE, DEMO_WORKSPACE, DemoTable
from flowledger.local.dev_token import development_token
from flowledger.local.local_defaults import CONTINUITY_VARIABLE, RESEARCH_LOOP_VARIABLES
from flowledger.local.moto_state import StateCounts


def listening_lines(
    endpoints: LocalEndpoints, settings: Settings, directory: DataDir, workers: int, metrics_stdout: bool
) -> str:
    """What the server is, printed once it listens; the store, the demo data and the ready line follow."""
    credentials = directory.admin_credentials()
    base_url = endpoints.base_url
    metrics = (
        "EMF lines on standard output (--metrics-stdout)"
        if metrics_stdout
        else f"{directory.metrics_file}; counters at {base_url}/metrics (from this machine)"
    )
    lines = [
        f"flowledger {__version__} serving on {base_url}",
        f"  docs             {base_url}/docs  (OpenAPI: /openapi.json)",
        f"  console          {base_url}/console/  (on loopback: as the local admin and a demo patient)",
        f"  embedded AWS     {endpoints.aws_endpoint_url}  (tables and buckets in {directory.path}/local.json)",
        f"  functions        {workers} worker processes running the Lambda handlers",
        _continuity_line(settings.enable_mixed_source_conversation_continuity),
        _research_line(settings),
        f"  scheduler        {', '.join(f'{j.name} {j.schedule}' for j in JOBS)}",
        f"  metrics          {metrics}",
        f"  admin (SigV4)    access key {credentials.access_key_id}, region {credentials.region},"
        f" service execute-api  ({directory.path}/admin-credentials.json)",
        "  dev token (all scopes, 12 h):",
        f"    {development_token(directory)}",
        "starting: the store, the demo data and the other workers; requests wait for them (/health does not)",
    ]
    return "\n".join(lines)


def ready_lines(
    settings: Settings,
    directory: DataDir,
    restored: StateCounts | None,
    reset: bool,
    demo_table: DemoTable | None,
    seconds: float,
) -> str:
    """The store, the demo data's hints (each runs as printed) and the ready line."""
    if restored is not None:
        state = f"restored {restored.describe()} from {directory.state_file}"
    else:
        state = f"{'reset: ' if reset else ''}started empty; saved to {directory.state_file} while running"
    model = (
        "offline model (deterministic, no network): set OPENAI_API_KEY or OPENAI_BASE_URL to use a real one"
        if settings.uses_offline_model
        else model_banner(settings)  # the models list and a 1-token chat, ~2 s at most
    )
    chat = f"flowledger chat{_data_dir_option(directory)}"
    lines = [
        f"  state            {state}",
        f"  model            {model}",
        f'  demo incident    logs, database and runbook: try `{chat} "{DEMO_QUESTION}"`',
        *_demo_table_lines(demo_table, chat),
        f"ready in {seconds:.1f} s. Ctrl-C stops everything.",
    ]
    return "\n".join(lines)


def _data_dir_option(directory: DataDir) -> str:
    """`` --data-dir PATH`` for the CLI hints, unless the CLI would find this data dir by itself."""
    if directory.path.resolve() == Path(DEFAULT_DATA_DIR).resolve():
        return ""
    return f" --data-dir {shlex.quote(str(directory.path))}"


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


def _demo_table_lines(demo: DemoTable | None, chat: str) -> list[str]:
    """The demo table's id and the turn to try on it, ready to copy."""
    if demo is None:
        return []
    if demo.document_id is None:
        return [
            f"  demo table       {DEMO_TABLE} was deleted from the workspace {DEMO_WORKSPACE}; --reset brings it back"
        ]
    return [
        f"  demo table       {DEMO_TABLE} {demo.document_id} (public workspace {DEMO_WORKSPACE}); try",
        f'                     {chat} "total amount by month" --select {demo.document_id}',
        "                   then follow up with --session and the session id that answer prints"
        ' ("now break that down by region")',
    ]
