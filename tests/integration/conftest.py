"""Integration fixtures: moto in-process, a locked moto server, a loopback JWKS issuer."""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from flowledger.config import load_settings
from flowledger.ledger.store import Ledger
from flowledger.local import moto_kms_ed25519, moto_transactions
from flowledger.local.datadir import DataDir
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.local.moto_server import LockedMotoServer
from flowledger.pathways.matcher import _CACHE
from flowledger.pathways.snapshot import _POINTERS
from flowledger.reasoning.dimensions import compute_dimensions
from flowledger.reasoning.models import FlowView, Outcome
from flowledger.services import Services, bootstrap, build_services
from tests.integration.provisioned import ProvisionedStates
from tests.jwks import jwks_served


@pytest.fixture
def anyio_backend() -> str:
    """The async tests run on asyncio (the chat app's loop under uvicorn and Lambda Web Adapter)."""
    return "asyncio"


@pytest.fixture(params=["sse", "json"])
def via(request: pytest.FixtureRequest) -> str:
    """A chat turn through each of its two adapters: the SSE stream and the JSON variant."""
    return str(request.param)


@pytest.fixture
def moto_services(clean_environment: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Services]:
    """Services against moto patched in-process (no server), with the dev server's transaction rollback."""
    # moto in process is not safe for writes from several threads (the locked server is): one erasure worker.
    monkeypatch.setenv("FLOWLEDGER_ERASURE_WORKERS", "1")
    moto_transactions.install()
    moto_kms_ed25519.install()  # the ledger's Ed25519 signing key
    with mock_aws():
        yield build_services(load_settings(), EMBEDDED_CREDENTIALS)


@pytest.fixture
def fresh_ledger() -> Callable[[Services], Ledger]:
    """Ledgers with their own empty head cache, as other processes would have."""

    def make(services: Services) -> Ledger:
        return Ledger(
            services.aws.dynamodb, services.aws.table_name("ledger"), services.settings.ledger_shards, services.clock
        )

    return make


@pytest.fixture(scope="session")
def provisioned_states(tmp_path_factory: pytest.TempPathFactory) -> ProvisionedStates:
    return ProvisionedStates(tmp_path_factory.mktemp("provisioned"))


@pytest.fixture
def services(moto_services: Services, provisioned_states: ProvisionedStates) -> Iterator[Services]:
    """moto with every declared table, bucket and the data key; a function's own bootstrap starts fresh."""
    provisioned_states.provision(moto_services)
    bootstrap.cache_clear()
    # A fresh moto is a new deployment: no pathway snapshot or pointer carries over from another test.
    _CACHE.rankers.clear()
    _POINTERS.clear()
    yield moto_services
    bootstrap.cache_clear()


@pytest.fixture(scope="session")
def locked_moto() -> Iterator[str]:
    """The locked moto server every concurrency test runs against; yields its endpoint URL."""
    server = LockedMotoServer()
    endpoint = server.start()
    yield endpoint
    server.stop()


@pytest.fixture(scope="session")
def issuer_key_pem(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """One local issuer key for this test process: generating a 2048-bit RSA key takes 50-200 ms."""
    made = DataDir(tmp_path_factory.mktemp("issuer") / "data")
    made.ensure("us-east-1")
    return made.private_key_pem()


@pytest.fixture
def data_dir(tmp_path: Path, issuer_key_pem: bytes) -> DataDir:
    """A fresh data dir (its own admin credentials) holding this process's issuer key; ``ensure`` keeps a key
    it finds, as it does for a data dir a user made earlier."""
    directory = DataDir(tmp_path / "data")
    directory.path.mkdir(parents=True)
    key_file = directory._key_file
    key_file.touch(mode=0o600)
    key_file.write_bytes(issuer_key_pem)
    directory.ensure("us-east-1")
    return directory


@pytest.fixture
def jwks_url(data_dir: DataDir) -> Iterator[str]:
    """The data dir's JWKS served over loopback HTTP, as an issuer would serve it."""
    with jwks_served(data_dir.jwks()) as url:
        yield url


class ScriptedOpenAI:
    """An OpenAI-compatible chat completions server on loopback that answers from a script.

    Each script entry is one response: ``{"json": obj}``, ``{"text": str}``, ``{"raw": str}``,
    ``{"status": 500, "message": "..."}``, ``{"drop": True}`` (close without answering), ``{"tool_calls": [...]}``,
    optionally with ``"delay": seconds``, ``"no_usage": True`` or ``"finish_reason": "length"``; or a callable
    taking the request body and returning such an entry.
    """

    def __init__(self) -> None:
        self.script: list[Any] = []
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.endswith("/embeddings"):
                    # Deterministic vectors: the same text always embeds the same way.
                    data = [
                        {
                            "object": "embedding",
                            "index": i,
                            "embedding": [b / 255 for b in hashlib.sha256(text.encode()).digest() * 4][
                                : body.get("dimensions", 128)
                            ],
                        }
                        for i, text in enumerate(body["input"])
                    ]
                    owner.requests.append(body)
                    self._send(
                        200,
                        {
                            "object": "list",
                            "data": data,
                            "model": body["model"],
                            "usage": {"prompt_tokens": 1, "total_tokens": 1},
                        },
                    )
                    return
                with owner._lock:
                    owner.requests.append(body)
                    entry = owner.script.pop(0) if owner.script else {"status": 500}
                if callable(entry):
                    entry = entry(body)
                time.sleep(entry.get("delay", 0))
                if entry.get("drop"):
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if "status" in entry:
                    message = entry.get("message", "scripted failure")
                    self._send(entry["status"], {"error": {"message": message, "type": "server_error"}})
                    return
                content = json.dumps(entry["json"]) if "json" in entry else entry.get("text", entry.get("raw"))
                self._send(
                    200,
                    {
                        "id": "chatcmpl-scripted",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "scripted",
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": entry.get("finish_reason", "stop"),
                                "message": {
                                    "role": "assistant",
                                    "content": content,
                                    "tool_calls": entry.get("tool_calls"),
                                },
                            }
                        ],
                        **(
                            {}
                            if entry.get("no_usage")
                            else {"usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}
                        ),
                    },
                )

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                # The client may have given up already (a timeout test): nothing to answer then.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted_openai() -> Iterator[ScriptedOpenAI]:
    server = ScriptedOpenAI()
    yield server
    server.close()


@pytest.fixture
def qualifying_flow() -> Callable[[str, str], FlowView]:
    """A closed flow that qualifies for a pathway (completed, safe, every confidence >= 0.9)."""

    def make(flow_id: str, trigger_ref: str) -> FlowView:
        return FlowView(
            flow_id=flow_id,
            trigger_type="user_question",
            trigger_ref=trigger_ref,
            trigger_summary="A question about a lab trend",
            flow_state="completed",
            created_by="agent-researcher",
            created_at="2026-11-30T09:00:00.000000Z",
            closed_at="2026-11-30T09:01:00.000000Z",
            step_count=1,
            outcome=Outcome(type="claim_created", summary="Created a claim", confidence=0.97),
            patient_safe_summary=True,
            dimensions_snapshot=compute_dimensions([], 0.97, aborted=False, summaries_safe=True),
        )

    return make


@pytest.fixture
def request_of_a_trace() -> Iterator[Any]:
    """One agent's trace as the OpenTelemetry SDK encodes it (tests/unit/test_otlp_ingest_mapping.agent_trace)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.unit.test_otlp_ingest_mapping import agent_trace

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent_trace(provider)
    yield encode_spans(exporter.get_finished_spans())
    provider.shutdown()
