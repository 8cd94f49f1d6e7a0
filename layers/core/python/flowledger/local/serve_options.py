"""The checks ``flowledger serve`` runs on its arguments before anything starts.

Each failure is a :class:`ConfigurationError` whose message is the one line the CLI prints (exit
code 2). Only the standard library is imported here, so a refusal comes at once, before the
server's own imports.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from flowledger.errors import ConfigurationError

MAX_WORKERS = 32


def whole_number(option: str, text: str) -> int:
    """``text`` as a whole number, or the error naming ``option``."""
    try:
        return int(text)
    except ValueError:
        raise ConfigurationError(f"{option} {text!r} is not a whole number") from None


def check_port(host: str, port: int) -> None:
    """A port number this process can listen on at ``host``, free now."""
    if not 1 <= port <= 65535:
        raise ConfigurationError(f"--port {port} is not a port number (1-65535)")
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except (socket.gaierror, UnicodeError):
        raise ConfigurationError(f"--host {host} is not an address this machine knows") from None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As uvicorn binds: a port left in TIME_WAIT by a server that just stopped is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigurationError(_bind_problem(host, port, exc)) from None


def _bind_problem(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} on {host} is already in use; pick another with --port"
    if exc.errno == errno.EACCES:
        return f"port {port} on {host} needs privileges this user lacks; pick one above 1023 with --port"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"--host {host} is not an address of this machine"
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"


def check_workers(workers: int) -> None:
    if not 1 <= workers <= MAX_WORKERS:
        raise ConfigurationError(f"--workers {workers} is out of range (1-{MAX_WORKERS})")


def prepare_data_dir(path: Path) -> None:
    """Create ``path`` if it is missing; refuse a file, a path through a file, or a directory it cannot write."""
    if path.exists() and not path.is_dir():
        raise ConfigurationError(f"--data-dir {path} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(f"--data-dir {path} cannot be created: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigurationError(f"--data-dir {path} is not writable by this user")
    probe = path / ".write-check"
    try:  # os.access says yes to root on a read-only mount: write to be sure
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigurationError(f"--data-dir {path} is not writable: {exc.strerror or exc}") from None
