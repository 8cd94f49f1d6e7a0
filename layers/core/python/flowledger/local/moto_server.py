"""An embedded moto server whose WSGI app handles one request at a time.

moto's DynamoDB checks a condition and then mutates without a lock, and werkzeug's threaded
server runs requests concurrently, so two conditional writes can both succeed. Serialising the
whole WSGI app behind one lock makes conditional writes behave as they do in DynamoDB; the dev
server and every concurrency test use this server for that reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

from flowledger.local import moto_transactions

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class SerializedWSGI:
    """Runs the wrapped WSGI app, body included, under one lock."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self._lock:
            # Materialise the body inside the lock: a lazy iterable would run outside it.
            return list(self._app(environ, start_response))


class LockedMotoServer:
    """moto in this process on a loopback port; ``start()`` returns once it accepts requests."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        # One access-log line per DynamoDB call drowns the dev server's own output.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        moto_transactions.install()
        app = SerializedWSGI(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self._host, self._port, app, threaded=True, request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto", daemon=True)
        self._thread.start()
        return self.endpoint_url

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the moto server is not started")
        return f"http://{self._host}:{self._server.server_port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None
