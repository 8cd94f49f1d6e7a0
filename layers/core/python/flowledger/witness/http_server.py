"""``flowledger witness serve``: the witness over HTTP with the standard library's threading server."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from flowledger.ledger.witnessing import MAX_REQUEST_BYTES
from flowledger.witness.service import Answer, Witness, answer


def witness_server(witness: Witness, host: str, port: int) -> ThreadingHTTPServer:
    """A server answering the witness protocol on ``host:port`` (port 0: any free one); ``serve_forever`` runs it."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "flowledger-witness"

        def do_POST(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0:
                self._send(Answer(400, "a body needs a Content-Length\n"))
                return
            body = self.rfile.read(length) if length <= MAX_REQUEST_BYTES else None
            if body is None:
                # Read a little past the limit, so a client still sending gets its 413 rather than a reset;
                # the rest is never read, and the connection closes.
                self._discard(min(length, 4 * MAX_REQUEST_BYTES))
                self.close_connection = True
            self._send(answer(witness, "POST", self.path, body, length))

        def _discard(self, length: int) -> None:
            while length > 0:
                chunk = self.rfile.read(min(length, 64 * 1024))
                if not chunk:
                    return
                length -= len(chunk)

        def do_GET(self) -> None:
            self._send(answer(witness, "GET", self.path, b""))

        def _send(self, reply: Answer) -> None:
            data = reply.body.encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # the CLI prints its own line per request (below), without the client's address twice

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            print(f"{self.command} {self.path} {code}", flush=True)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
