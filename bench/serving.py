"""Servers a benchmark starts for itself: a free port, and waiting until one answers."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(url: str, process: subprocess.Popen[bytes]) -> None:
    """Return once ``url`` answers 200; exit the benchmark if ``process`` dies or a minute passes."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")
