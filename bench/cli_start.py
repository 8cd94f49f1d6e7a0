"""How long the CLI takes: `flowledger --help`, and `flowledger chat "hello"` against a running server
with the server's own share taken out.

The server's share is the same request (same body, same token) made as a raw HTTP call on a fresh
connection, read to the stream's end, in the same run: each chat run is paired with one raw call and
the CLI's added time is the median of the pairs' differences, so a machine that slows down midway
moves both sides of a pair. Targets: help at most 0.3 s, chat at most 0.5 s over the server's answer.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from serving import free_port, wait_for

from flowledger.local.datadir import DataDir
from flowledger.local.dev_token import development_token

RUNS = 7
HELP_TARGET_SECONDS = 0.3
CHAT_ADDED_TARGET_SECONDS = 0.5
QUESTION = "hello"


def flowledger() -> list[str]:
    """The console script as a user runs it (``python -m flowledger.cli`` where it is not installed)."""
    script = shutil.which("flowledger", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "flowledger.cli"]


def timed(command: list[str], environment: dict[str, str]) -> float:
    """Wall seconds of one run of ``command``, which must succeed."""
    began = time.perf_counter()
    subprocess.run(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - began


def raw_chat(port: int, token: str) -> float:
    """Wall seconds of ``POST /api/chat`` on a new connection, until the last byte of the stream."""
    began = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request(
            "POST",
            "/api/chat",
            body=json.dumps({"query": QUESTION}),
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "text/event-stream",
                "Content-Type": "application/json",
            },
        )
        response = connection.getresponse()
        stream = response.read()
    finally:
        connection.close()
    if response.status != 200 or b"event: done" not in stream:
        raise SystemExit(f"the raw chat call answered {response.status}: {stream[:200]!r}")
    return time.perf_counter() - began


def verdict(seconds: float, target: float) -> str:
    return f"target <= {target:.3f} s  {'ok' if seconds <= target else 'MISSED'}"


def main() -> int:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OPENAI_", "FLOWLEDGER_"))}
    cli = flowledger()
    timed([*cli, "--help"], environment)  # the first run fills the file cache and byte-code; not counted
    help_seconds = statistics.median(timed([*cli, "--help"], environment) for _ in range(RUNS))
    with tempfile.TemporaryDirectory() as scratch:
        data_dir, port = Path(scratch) / "data", free_port()
        server = subprocess.Popen(
            [*cli, "serve", "--port", str(port), "--data-dir", str(data_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=environment,
        )
        try:
            wait_for(f"http://127.0.0.1:{port}/health", server)
            token = development_token(DataDir(data_dir))
            chat = [*cli, "chat", QUESTION, "--data-dir", str(data_dir)]
            timed(chat, environment), raw_chat(port, token)  # warm both paths once
            pairs = [(timed(chat, environment), raw_chat(port, token)) for _ in range(RUNS)]
        finally:
            server.terminate()
            server.wait(timeout=30)
    chat_seconds = statistics.median(whole for whole, _ in pairs)
    server_seconds = statistics.median(raw for _, raw in pairs)
    added_seconds = statistics.median(whole - raw for whole, raw in pairs)
    print(f"CLI start, median of {RUNS} runs")
    print(f"{'flowledger --help':<40} {help_seconds:>7.3f} s  {verdict(help_seconds, HELP_TARGET_SECONDS)}")
    print(f"{'flowledger chat ' + json.dumps(QUESTION) + ', end to end':<40} {chat_seconds:>7.3f} s")
    print(f"{'  the server (same request, raw HTTP)':<40} {server_seconds:>7.3f} s")
    print(f"{'  added by the CLI':<40} {added_seconds:>7.3f} s  {verdict(added_seconds, CHAT_ADDED_TARGET_SECONDS)}")
    met = help_seconds <= HELP_TARGET_SECONDS and added_seconds <= CHAT_ADDED_TARGET_SECONDS
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
