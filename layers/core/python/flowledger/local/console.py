"""The web console as ``flowledger serve`` serves it at ``/console/``: the static files, and a config.

In AWS the same files sit in S3 behind CloudFront, with a ``config.json`` that names the Cognito pools.
Locally ``config.json`` is made by the server (and kept for half its tokens' life): it hands a page
opened on loopback the local admin credentials (for SigV4 in the browser), a demo patient's token and
the dev user's chat token. None of them goes to a page opened from another host, or through a name
other than a loopback one: a page of another site that rebinds its DNS name to 127.0.0.1 asks with
its own ``Host``, and gets none.

The pages connect to this origin only, and to one more locally: the embedded AWS endpoint, which a
large upload's presigned PUT goes to (in AWS the CSP is CloudFront's: infra/constructs/console.py).
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from flowledger.local.console_files import ConsoleFiles
from flowledger.local.datadir import DEV_USER, DataDir

PREFIX = "/console"
# The console is a static site beside the Lambda code, not part of any layer (see infra/constructs/console.py).
CONSOLE_DIR = Path(os.environ.get("FLOWLEDGER_CONSOLE_DIR") or Path(__file__).resolve().parents[5] / "console")
DEMO_PATIENT = "patient-demo"
PAGE_TOKEN_TTL_SECONDS = 3600  # the tokens a loopback page gets; it asks again on every load
# A loopback page's config is minted once and handed out until half its tokens' life has passed, so
# every token a page gets has at least 30 minutes left: minting signs two RS256 tokens (some 150 ms on
# this machine's 2 cores), which every page load used to wait for.
REMINT_AFTER_SECONDS = PAGE_TOKEN_TTL_SECONDS // 2
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
CONNECT_SRC = "connect-src 'self'"
# The console loads nothing from elsewhere and is framed by nothing; the API is this same origin.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def is_loopback_request(scope: Scope) -> bool:
    """The request came from this machine and names it by a loopback host (no DNS-rebound name)."""
    client = scope.get("client") or ("", 0)
    try:
        from_loopback = ipaddress.ip_address(client[0]).is_loopback
    except ValueError:
        return False
    host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1").lower()
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    return from_loopback and name in LOOPBACK_NAMES


def local_console_config(directory: DataDir, *, loopback: bool) -> dict[str, Any]:
    """What the console's pages read from ``/console/config.json`` on the dev server."""
    credentials = directory.admin_credentials()
    config: dict[str, Any] = {"mode": "local", "api_base": "", "region": credentials.region}
    if loopback:
        config["operator"] = {
            "access_key_id": credentials.access_key_id,
            "secret_access_key": credentials.secret_access_key,
        }
        ttl = PAGE_TOKEN_TTL_SECONDS
        config["patient_token"] = directory.token(
            DEMO_PATIENT, ["reasoning.read"], patient_id=DEMO_PATIENT, ttl_seconds=ttl
        )
        config["user_token"] = directory.token(DEV_USER, ["chat", "documents"], ttl_seconds=ttl)
    return config


class ConsoleConfigs:
    """The two configs a page can get (loopback or not), each kept until ``REMINT_AFTER_SECONDS`` old."""

    def __init__(self, directory: DataDir, clock: Callable[[], float] = time.monotonic) -> None:
        self._directory = directory
        self._clock = clock
        self._minted: dict[bool, tuple[float, bytes]] = {}

    def body(self, *, loopback: bool) -> bytes:
        """``config.json``'s body for a page opened from loopback or not."""
        now = self._clock()
        kept = self._minted.get(loopback)
        if kept is None or now - kept[0] >= REMINT_AFTER_SECONDS:
            kept = (now, json.dumps(local_console_config(self._directory, loopback=loopback)).encode())
            self._minted[loopback] = kept
        return kept[1]


def security_headers(aws_endpoint: str | None = None) -> dict[str, str]:
    """``SECURITY_HEADERS``, with ``connect-src`` also allowing ``aws_endpoint``'s origin when one is given.

    A large upload's presigned PUT goes to the storage endpoint, not to the API: locally that is the
    embedded AWS endpoint on its own port, another origin. Only its origin is added (no path, no wildcard).
    """
    if not aws_endpoint:
        return dict(SECURITY_HEADERS)
    parts = urlsplit(aws_endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"the embedded AWS endpoint {aws_endpoint!r} is not an http(s) URL")
    origin = f"{parts.scheme}://{parts.netloc}"
    policy = SECURITY_HEADERS["content-security-policy"].replace(CONNECT_SRC, f"{CONNECT_SRC} {origin}")
    return {**SECURITY_HEADERS, "content-security-policy": policy}


def console_app(directory: DataDir, root: Path = CONSOLE_DIR, *, aws_endpoint: str | None = None) -> ASGIApp:
    """An ASGI app for ``/console`` and everything under it (GET and HEAD), compressed when asked (console_files).

    ``aws_endpoint`` (the embedded AWS endpoint) is the one other origin the pages may connect to.
    """
    headers = security_headers(aws_endpoint)
    configs = ConsoleConfigs(directory)
    files = ConsoleFiles(root, headers)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if path == PREFIX:
            await Response(status_code=308, headers={"location": f"{PREFIX}/"})(scope, receive, send)
            return
        if path == f"{PREFIX}/config.json":
            body = configs.body(loopback=is_loopback_request(scope))
            await Response(body, media_type="application/json", headers={**headers, "cache-control": "no-store"})(
                scope, receive, send
            )
            return
        if not root.is_dir():
            await Response("the console's files are not installed here", status_code=404)(scope, receive, send)
            return
        await files({**scope, "path": path[len(PREFIX) :] or "/", "root_path": ""}, receive, send)

    return app


def is_console_path(path: str) -> bool:
    """``/console`` or an address under it."""
    return path == PREFIX or path.startswith(f"{PREFIX}/")
