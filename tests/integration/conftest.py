"""Integration fixtures: moto in-process, a locked moto server, a loopback JWKS issuer."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from moto import mock_aws

from flowledger.config import load_settings
from flowledger.ledger.store import Ledger
from flowledger.local.datadir import DataDir
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import Services, build_services


@pytest.fixture
def moto_services(clean_environment: None) -> Iterator[Services]:
    """Services against moto patched in-process (no server)."""
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
def locked_moto() -> Iterator[str]:
    """The locked moto server every concurrency test runs against; yields its endpoint URL."""
    server = LockedMotoServer()
    endpoint = server.start()
    yield endpoint
    server.stop()


@pytest.fixture
def data_dir(tmp_path: Path) -> DataDir:
    directory = DataDir(tmp_path / "data")
    directory.ensure("us-east-1")
    return directory


@pytest.fixture
def jwks_url(data_dir: DataDir) -> Iterator[str]:
    """The data dir's JWKS served over loopback HTTP, as an issuer would serve it."""
    body = json.dumps(data_dir.jwks()).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/.well-known/jwks.json"
    server.shutdown()
    server.server_close()
