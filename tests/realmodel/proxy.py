"""A recording proxy between Flowledger and a real model server: every request and the status it got.

Flowledger is pointed at the proxy (``OPENAI_BASE_URL``); the proxy forwards each request unchanged to
the real server and keeps what was sent and answered, so a test can assert on the wire: every call
bounded, tools offered with ``tool_choice``, no request refused. It adds nothing to the answers.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


@dataclass
class Exchange:
    number: int  # arrival order: an answer that comes back late still belongs to the turn that asked
    method: str
    path: str
    request: dict[str, Any]
    status: int
    response: dict[str, Any]
    seconds: float


@dataclass
class RecordingProxy:
    upstream: str  # the real server's origin, http://127.0.0.1:PORT
    exchanges: list[Exchange] = field(default_factory=list)

    def __post_init__(self) -> None:
        owner = self
        client = httpx.Client(base_url=self.upstream, timeout=600)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def _forward(self, body: bytes | None) -> None:
                started = time.monotonic()
                with owner._lock:
                    number = owner._arrived
                    owner._arrived += 1
                headers = {"content-type": "application/json"} if body is not None else {}
                try:
                    answer = client.request(self.command, self.path, content=body, headers=headers)
                except httpx.TransportError:
                    self.send_response(502)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with owner._lock:
                    owner.exchanges.append(
                        Exchange(
                            number,
                            self.command,
                            self.path,
                            _json(body),
                            answer.status_code,
                            _json(answer.content),
                            time.monotonic() - started,
                        )
                    )
                try:
                    self.send_response(answer.status_code)
                    self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
                    self.send_header("Content-Length", str(len(answer.content)))
                    self.end_headers()
                    self.wfile.write(answer.content)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller gave up first (its timeout): the exchange is recorded all the same

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._lock = threading.Lock()
        self._arrived = 0
        self._client = client
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def completions(self, since: int = 0) -> list[Exchange]:
        """The chat completion calls that arrived after ``since`` (a ``mark``), answered by now."""
        with self._lock:
            return [e for e in self.exchanges if e.number >= since and e.path.endswith("/chat/completions")]

    def mark(self) -> int:
        """How many requests have arrived: what came before belongs to earlier turns."""
        with self._lock:
            return self._arrived

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()


def _json(raw: bytes | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {"raw": raw[:2000].decode(errors="replace")}
    return data if isinstance(data, dict) else {"value": data}
