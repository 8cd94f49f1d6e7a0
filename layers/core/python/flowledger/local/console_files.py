"""The console's files as the dev server sends them: read and compressed once, sent from memory.

A first visit to a console page asks for some twenty small files at once, and a browser sends at most six
requests to one host at a time (HTTP/1.1): the page's own API reads queue behind them. Read from disk
through a thread and compressed per request at gzip's highest level (Starlette's ``StaticFiles`` and
``GZipMiddleware``), each file took 2-4 ms of the server's event loop on a quiet machine and 40-80 ms while
the API reads ran beside it. Here each file is read and compressed when it is first asked for or has
changed on disk (its size and modification time, checked on every request, so an edited file is sent as
edited), and answered with an ETag: a revisit that still has the file gets a 304 and no body.

An address under ``/console/`` that names no file and has no extension (``/console/flows/fl_…``) gets
the page shell, ``index.html``: the console routes in the browser (``js/boot.js``). One that climbs out
of the folder or names a missing file is a 404.
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import os
from dataclasses import dataclass
from pathlib import Path

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

SHELL = "index.html"
MIN_COMPRESSED_BYTES = 512  # below this, gzip's header and a round of inflate cost more than they save


@dataclass(frozen=True)
class _File:
    stamp: tuple[int, int]  # size and modification time (ns) when read
    body: bytes
    compressed: bytes | None
    media_type: str
    etag: str


class ConsoleFiles:
    """An ASGI app for the files under ``root`` (paths relative to it), with ``headers`` on every answer."""

    def __init__(self, root: Path, headers: dict[str, str]) -> None:
        self._root = root
        self._headers = headers
        self._files: dict[Path, _File] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.response(scope)(scope, receive, send)

    def response(self, scope: Scope) -> Response:
        """The answer to a GET or HEAD of ``scope["path"]`` (relative to the root, ``/`` for the shell)."""
        relative = scope["path"].lstrip("/")
        found = self._file(relative or SHELL)
        if found is None and "." not in relative.rsplit("/", 1)[-1]:
            found = self._file(SHELL)  # a page address: the browser routes it
        if found is None:
            return Response("Not Found", status_code=404, media_type="text/plain", headers=self._headers)
        request = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        headers = {**self._headers, "etag": found.etag, "vary": "accept-encoding"}
        if found.etag in _tags(request.get("if-none-match", "")):
            return Response(status_code=304, headers=headers)
        body = found.body
        if found.compressed is not None and "gzip" in request.get("accept-encoding", ""):
            body, headers["content-encoding"] = found.compressed, "gzip"
        if scope.get("method") == "HEAD":
            headers["content-length"] = str(len(body))
            return Response(status_code=200, media_type=found.media_type, headers=headers)
        return Response(body, media_type=found.media_type, headers=headers)

    def _file(self, relative: str) -> _File | None:
        """The file at ``relative`` under the root, read again when it changed; None when there is none."""
        root = self._root.resolve()
        path = (root / relative).resolve()
        if not path.is_relative_to(root):
            return None
        try:
            status = os.stat(path)
        except OSError:
            return None
        if not path.is_file():
            return None
        stamp = (status.st_size, status.st_mtime_ns)
        kept = self._files.get(path)
        if kept is not None and kept.stamp == stamp:
            return kept
        try:
            body = path.read_bytes()
        except OSError:
            return None
        compressed = gzip.compress(body, compresslevel=9, mtime=0) if len(body) >= MIN_COMPRESSED_BYTES else None
        media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
        kept = self._files[path] = _File(stamp, body, compressed, media_type, etag)
        return kept


def _tags(header: str) -> set[str]:
    """The entity tags of an If-None-Match header (weak ones compared by their opaque part, as RFC 9110 says)."""
    return {tag.strip().removeprefix("W/") for tag in header.split(",") if tag.strip()}
