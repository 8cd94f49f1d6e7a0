"""`flowledger serve` as a user starts and stops it: one server per data dir, quick stops, quiet output.

Through real `flowledger serve` processes: a second server on a data dir is refused naming the
first, a lock left by a killed server is taken over, a stop during the start keeps the store, bad
arguments are one line each, metrics go to the data dir's file and ``/metrics`` rather than the
terminal, and every command the banner prints runs as printed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import FLOWLEDGER, clean_env, free_port

pytestmark = pytest.mark.e2e
HANG_GUARD_SECONDS = 10  # a bound against a hang, not a speed check (bench/serve_start.py times it)


@pytest.fixture
def launch(launch: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """The e2e ``launch``, killing at the end whatever a failed test left running."""
    started: list[Any] = []

    def launched(*args: Any, **options: Any) -> Any:
        started.append(launch(*args, **options))
        return started[-1]

    yield launched
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FLOWLEDGER, "serve", *args], capture_output=True, text=True, timeout=60, check=False, env=clean_env()
    )


def banner_commands(output: str) -> list[str]:
    """Every `flowledger ...` command the banner offers: in backticks, or on a line of its own."""
    quoted = re.findall(r"`(flowledger [^`]+)`", output)
    alone = [line.strip() for line in output.splitlines() if line.strip().startswith("flowledger chat")]
    return quoted + alone


def paste(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``command`` as a shell would, with the console script on PATH."""
    venv_bin = str(Path(sys.executable).parent)
    return subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env={**clean_env(), "PATH": f"{venv_bin}:{os.environ['PATH']}"},
    )


def test_one_server_per_data_dir_metrics_off_the_terminal_and_banner_hints_that_run(
    tmp_path: Path, launch: Callable[..., Any]
) -> None:
    data_dir = tmp_path / "my data"  # not the default, and with a space: the hints must quote it
    first = launch(data_dir)
    local_json = (data_dir / "local.json").read_text()

    second = serve("--port", str(free_port()), "--data-dir", str(data_dir))
    assert second.returncode == 2
    assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
    assert f"pid {first.process.pid}, {first.base_url}" in second.stderr
    assert (data_dir / "local.json").read_text() == local_json  # the refused server wrote nothing

    commands = banner_commands(first.output())
    assert len(commands) == 2, first.output()  # the demo incident and the demo table
    for command in commands:
        assert f"--data-dir {shlex.quote(str(data_dir))}" in command
        pasted = paste(command, Path.cwd())
        assert pasted.returncode == 0, (command, pasted.stderr)

    # The chats emitted metrics: into the data dir's file and /metrics, never onto the terminal.
    assert '"_aws"' not in first.output()
    records = [json.loads(line) for line in (data_dir / "metrics.jsonl").read_text().splitlines()]
    assert records and all("_aws" in record for record in records)
    view = httpx.get(f"{first.base_url}/metrics", timeout=10)
    assert view.status_code == 200
    counted = {metric["name"]: metric["count"] for metric in view.json()["metrics"]}
    names = {m["Name"] for record in records for m in record["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert names and names <= set(counted)
    first.stop()


def test_with_the_default_data_dir_the_banner_hints_run_as_printed_from_there(tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "serve.log"
    with log.open("w") as sink:
        running = subprocess.Popen(
            [*FLOWLEDGER, "serve", "--port", str(port)],  # no --data-dir: .flowledger in its working directory
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=clean_env(),
        )
    try:
        deadline = time.monotonic() + 60
        while "\nready in " not in log.read_text():
            assert running.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        commands = banner_commands(log.read_text())
        table_turn = [c for c in commands if "--select" in c]
        assert len(commands) == 2 and table_turn, log.read_text()
        pasted = paste(table_turn[0], tmp_path)
        assert pasted.returncode == 0, pasted.stderr
        assert all("--data-dir" not in command for command in commands)  # the CLI finds .flowledger itself
    finally:
        running.send_signal(signal.SIGINT)
        running.wait(timeout=HANG_GUARD_SECONDS)


def test_metrics_on_stdout_when_asked(tmp_path: Path, launch: Callable[..., Any]) -> None:
    own = launch(tmp_path / "data", "--metrics-stdout")
    result = own.cli("jobs", "run", "heartbeat", "--data-dir", str(own.data_dir.path))
    assert result.returncode == 0, result.stderr
    chat = own.cli("chat", "--data-dir", str(own.data_dir.path), "hello")
    assert chat.returncode == 0, chat.stderr
    own.stop()
    assert '{"_aws"' in own.output()
    assert not (tmp_path / "data" / "metrics.jsonl").exists()


def test_a_lock_left_by_a_killed_server_is_taken_over(tmp_path: Path, launch: Callable[..., Any]) -> None:
    data_dir = tmp_path / "data"
    killed = launch(data_dir)
    killed.process.kill()  # kill -9: no chance to release anything
    killed.process.wait(timeout=HANG_GUARD_SECONDS)
    again = launch(data_dir)
    assert f"from pid {killed.process.pid}, which stopped without releasing it" in again.output()
    holder = json.loads((data_dir / "serve.lock").read_text())
    assert holder["pid"] == again.process.pid and holder["url"] == again.base_url
    assert json.loads((data_dir / "local.json").read_text())["base_url"] == again.base_url
    assert again.stop(signal.SIGTERM) == 0
    assert (data_dir / "serve.lock").read_text() == ""  # a clean stop leaves nothing to take over


def test_sigterm_during_the_start_stops_it_and_keeps_the_store(tmp_path: Path, launch: Callable[..., Any]) -> None:
    data_dir = tmp_path / "data"
    first = launch(data_dir)
    note = tmp_path / "kept.md"
    note.write_text("# Kept across a stop\n\nWritten before a restart that was stopped half way.\n")
    added = first.cli("knowledge", "add", str(note), "--data-dir", str(data_dir))
    assert added.returncode == 0, added.stderr
    assert first.stop(signal.SIGTERM) == 0

    port = free_port()
    log = tmp_path / "restart.log"
    with log.open("w") as sink:
        restarting = subprocess.Popen(
            [*FLOWLEDGER, "serve", "--port", str(port), "--data-dir", str(data_dir)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=clean_env(),
        )
    deadline = time.monotonic() + 60
    while "serving on" not in log.read_text():  # the gateway listens; the start is not finished yet
        assert restarting.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.02)
    restarting.send_signal(signal.SIGTERM)
    try:
        assert restarting.wait(timeout=HANG_GUARD_SECONDS) == 0, log.read_text()
    finally:
        restarting.kill()
    assert "Traceback" not in log.read_text()
    assert (data_dir / "serve.lock").read_text() == ""

    third = launch(data_dir)
    listed = third.cli("knowledge", "list", "--data-dir", str(data_dir))
    assert "Kept across a stop" in listed.stdout, listed.stderr
    third.stop()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--port", "99999"], "--port 99999 is not a port number (1-65535)"),
        (["--port", "eighty"], "--port 'eighty' is not a whole number"),
        (["--workers", "0"], "--workers 0 is out of range (1-32)"),
        (["--host", "no-such-host.invalid"], "--host no-such-host.invalid is not an address this machine knows"),
        (["--data-dir", "{file}"], "--data-dir {file} is a file, not a directory"),
        (["--data-dir", "{file}/inside"], "--data-dir {file}/inside cannot be created: Not a directory"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(tmp_path: Path, arguments: list[str], message: str) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    defaults = ["--data-dir", str(tmp_path / "data"), "--port", str(free_port())]  # the argument under test wins
    result = serve(*defaults, *[a.format(file=a_file) for a in arguments])
    assert result.returncode == 2
    assert result.stderr == f"flowledger: error: {message.format(file=a_file)}\n"
