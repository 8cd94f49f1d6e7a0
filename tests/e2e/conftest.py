"""Starts `flowledger serve` as a user would, on a free port, and stops it with Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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
    log: Path  # the server's stdout and stderr (a file: a full pipe would block the server)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*FLOWLEDGER, *args], capture_output=True, text=True, timeout=60, check=False, env=clean_env()
        )

    def output(self) -> str:
        return self.log.read_text()

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> int:
        """Stop the server as a user would (Ctrl-C by default); its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)


def clean_env() -> dict[str, str]:
    """The machine's environment without AWS or model settings that could reach a real service."""
    drop = ("AWS_", "OPENAI_", "FLOWLEDGER_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


# Each worker is a process that imports and builds every function before the ready line (about 1.8 s of CPU);
# the suite starts some sixty servers, two at a time on two cores, and one worker serves every test that is
# not about concurrency. Those ask for more: the journal's kill -9 and full-disk tests run two, the drain of
# the backlog by sixteen consumers four.
TEST_WORKERS = 1


def launch_server(
    data_dir: Path, *args: str, port: int | None = None, env: dict[str, str] | None = None, ready: bool = True
) -> RunningServer:
    """Start ``flowledger serve`` and wait until it says it is ready (its store and functions are warm then).

    ``env`` adds variables to the clean environment (``BACKLOG_CONSUMER_ENABLED=false``, say). With
    ``ready=False`` it returns once ``/health`` answers: other requests then wait for the start to finish.
    """
    port = port or free_port()
    if "--workers" not in args:
        args = (*args, "--workers", str(TEST_WORKERS))
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir.parent / f"serve-{port}.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [*FLOWLEDGER, "serve", "--port", str(port), "--data-dir", str(data_dir), *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            env={**clean_env(), **(env or {})},
        )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            # /health answers before the start has finished; the banner's ready line comes after.
            answered = httpx.get(f"{base_url}/health", timeout=1).status_code == 200
            if answered and (not ready or "\nready in " in log.read_text()):
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"flowledger serve did not come up:\n{log.read_text()}")
        time.sleep(0.2)
    return RunningServer(base_url, port, DataDir(data_dir), process, log)


@pytest.fixture(scope="session")
def launch() -> Callable[..., RunningServer]:
    """``launch(data_dir, *serve_args)``: a server of the test's own, for tests that stop or fill one."""
    return launch_server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = launch_server(tmp_path_factory.mktemp("e2e") / "data")
    yield running
    running.stop()
