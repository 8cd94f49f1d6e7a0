"""Starts `flowledger serve` as a user would, on a free port, and stops it with Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from flowledger.local.datadir import DataDir

FLOWLEDGER = [sys.executable, "-m", "flowledger.cli"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RunningServer:
    base_url: str
    port: int
    data_dir: DataDir
    process: subprocess.Popen[str]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*FLOWLEDGER, *args], capture_output=True, text=True, timeout=60, check=False, env=clean_env()
        )


def clean_env() -> dict[str, str]:
    """The machine's environment without AWS or model settings that could reach a real service."""
    drop = ("AWS_", "OPENAI_", "FLOWLEDGER_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    data_dir = tmp_path_factory.mktemp("e2e") / "data"
    port = free_port()
    process = subprocess.Popen(
        [*FLOWLEDGER, "serve", "--port", str(port), "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(),
    )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base_url}/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            output = process.stdout.read() if process.stdout else ""
            process.kill()
            pytest.fail(f"flowledger serve did not come up:\n{output}")
        time.sleep(0.2)
    running = RunningServer(base_url, port, DataDir(Path(data_dir)), process)
    yield running
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
