"""The REST functions of the dev server: worker processes that run the deployed Lambda handlers.

Each worker is one execution environment, as in Lambda: it handles one invocation at a time with
the very handler ``functions/<name>/handler.py`` deploys, and keeps its warm state (clients,
caches) between invocations. Processes rather than threads, because powertools keeps the current
event on its ``BaseRouter`` class, so two invocations in one process would read each other's
requests; and separate environments exercise the same cross-process paths (head caches,
conditional writes) that concurrent Lambdas do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.pool import AsyncResult, Pool
from typing import Any, cast

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import SecretStr

from flowledger.config import Settings
from flowledger.heap import freeze_long_lived

logger = logging.getLogger("flowledger.local")
# /health's function and event: the first worker answers it once before any request comes, so the
# imports and clients a cold invocation loads are in place when the first client asks.
WARM_FUNCTION = "core"
WARM_EVENT: dict[str, Any] = {
    "resource": "/health",
    "path": "/health",
    "httpMethod": "GET",
    "headers": {},
    "requestContext": {"requestId": "warm-up", "resourcePath": "/health", "httpMethod": "GET"},
}
# The other workers warm every function on a path no route serves: the resolver answers 404 without
# touching the store or the audit ledger, yet the handler, its decorators and imports are built.
WARM_ALL_PATH = "/__flowledger_warm_up__"
# API Gateway's own integration timeout: a slower function gets a 504, as it would in AWS.
INTEGRATION_TIMEOUT_SECONDS = 29.0
# Locally nothing ships the EMF lines or X-Ray segments, so they would only flood the terminal.
WORKER_ENVIRONMENT = {"POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_TRACE_DISABLED": "true"}


class FunctionTimeout(Exception):
    """The function did not answer within the integration timeout."""


def settings_environment(settings: Settings) -> dict[str, str]:
    """The environment variables from which ``load_settings()`` in a worker rebuilds ``settings``."""
    environment: dict[str, str] = {}
    for name, info in Settings.model_fields.items():
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, bool):
            value = "true" if value else "false"
        environment[str(info.validation_alias or name.upper())] = str(value)
    return environment


@dataclass
class LocalLambdaContext:
    """The parts of Lambda's context object the handlers and powertools read."""

    function_name: str
    aws_request_id: str
    deadline: float = field(default_factory=lambda: time.monotonic() + INTEGRATION_TIMEOUT_SECONDS)
    memory_limit_in_mb: int = 1024
    function_version: str = "$LATEST"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:local:000000000000:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


class FunctionPool:
    """Worker processes; ``invoke`` runs one event on the least busy of them.

    ``start`` spawns one worker, so the server can answer while the others start: ``grow`` spawns
    the rest (each spawn imports the handlers, a second or two of CPU on a small machine).
    """

    def __init__(self, environment: dict[str, str], workers: int) -> None:
        self._environment = {**environment, **WORKER_ENVIRONMENT}
        self._workers = workers
        # One pool per spawn batch, with the invocations each runs now; a Pool's size is fixed.
        self._pools: list[tuple[Pool, int]] = []
        self._busy: dict[int, int] = {}
        self._first_warm: AsyncResult[None] | None = None
        self._stopped = False
        # What each worker said it had built once ``grow`` returned: worker pid -> function names.
        self.warm: dict[int, tuple[str, ...]] = {}

    @property
    def workers(self) -> int:
        return self._workers

    @property
    def started(self) -> int:
        """How many worker processes are spawned so far."""
        return sum(size for _, size in self._pools)

    def start(self) -> None:
        """Spawn the first worker and have it build the function ``/health`` runs on."""
        self._spawn(1)
        self._first_warm = self._pools[0][0].apply_async(_warm_up)

    def grow(self, wait_seconds: float = 60.0) -> None:
        """Spawn the workers beyond the first, once the first is warm, and return when all are warm.

        On a two-core machine, three workers importing the handlers at once would hold up the first.
        Each new worker builds every function as it starts (``_start_worker``), and the first builds
        the ones beyond ``/health`` meanwhile: a request that lands on a worker's first use of a
        function would otherwise wait about a second for its imports (X-Ray's SDK alone, which the
        tracer imports even with tracing off, is half of that). ``wait_seconds`` bounds each wait.
        """
        if not self._pools or self.started >= self._workers:
            return
        if self._first_warm is not None:
            self._first_warm.wait(wait_seconds)
        if self._stopped:  # stop() may have run meanwhile
            return
        count = self._workers - self.started
        deadline = time.monotonic() + wait_seconds
        self._spawn(count, warm=True)
        self._pools[0][0].apply_async(_warm_all)  # the first worker's own queue: it runs before what follows
        self._await_workers(self._pools[0][0], 1, deadline)
        self._await_workers(self._pools[-1][0], count, deadline)

    def _await_workers(self, pool: Pool, count: int, deadline: float) -> None:
        """Return once ``count`` distinct workers of ``pool`` said what they built (or at ``deadline``).

        A worker takes tasks only after its initializer, so a worker heard from here has warmed up.
        """
        heard: dict[int, tuple[str, ...]] = {}
        while len(heard) < count and not self._stopped and time.monotonic() < deadline:
            answers = [pool.apply_async(_built_functions) for _ in range(count)]
            for answer in answers:
                with contextlib.suppress(multiprocessing.TimeoutError):
                    pid, built = answer.get(max(0.0, deadline - time.monotonic()))
                    heard[pid] = built
        self.warm.update(heard)

    def _spawn(self, count: int, *, warm: bool = False) -> None:
        # spawn, not fork: the server process holds threads (moto, the scheduler) a fork would copy mid-state.
        context = multiprocessing.get_context("spawn")
        # A Ctrl-C reaches the whole process group: a worker still importing would print a traceback.
        # Spawned with SIGINT blocked, it never sees one (the mask survives exec); the server stops it.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            pool = context.Pool(count, initializer=_start_worker, initargs=(self._environment, warm))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        self._busy[id(pool)] = 0  # first: the event loop may look a pool up as soon as it is listed
        self._pools.append((pool, count))

    def _least_busy(self) -> Pool:
        return min(self._pools, key=lambda entry: self._busy[id(entry[0])] / entry[1])[0]

    async def invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any]:
        """The function's proxy response to ``event``; :class:`FunctionTimeout` after the integration timeout."""
        if not self._pools:
            raise RuntimeError("the function pool is not started")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()

        def settle(setter: Callable[[Any], None]) -> Callable[[Any], None]:
            def settle_on_loop(value: Any) -> None:
                loop.call_soon_threadsafe(lambda: None if future.done() else setter(value))

            return settle_on_loop

        pool = self._least_busy()
        self._busy[id(pool)] += 1  # the event loop's thread only: no lock
        try:
            pool.apply_async(
                _invoke,
                (function, event),
                callback=settle(future.set_result),
                error_callback=settle(future.set_exception),
            )
            return await asyncio.wait_for(future, INTEGRATION_TIMEOUT_SECONDS)
        except TimeoutError:
            raise FunctionTimeout(f"{function} did not answer within {INTEGRATION_TIMEOUT_SECONDS:.0f} s") from None
        finally:
            self._busy[id(pool)] -= 1

    def stop(self) -> None:
        """Stop every worker now, whatever it is doing (the server is shutting down)."""
        self._stopped = True
        pools, self._pools = self._pools, []
        for pool, _ in pools:
            pool.terminate()
        for pool, _ in pools:
            pool.join()


_handlers: dict[str, Callable[[dict[str, Any], LambdaContext], dict[str, Any]]] = {}  # this worker's warm ones


def _start_worker(environment: dict[str, str], warm: bool = False) -> None:
    os.environ.update(environment)
    # Functions that publish no metric flush an empty EMF batch and warn; expected, and noise here.
    warnings.filterwarnings("ignore", "No application metrics to publish")
    # Ctrl-C reaches the whole process group; the server stops its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A server killed outright (kill -9) cannot stop its workers: each leaves when it is orphaned.
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), name="parent-watch", daemon=True).start()
    if warm:
        try:
            _warm_all()
        except Exception:  # an initializer that raises would be respawned for ever; this worker builds lazily
            logger.warning("a worker could not build its functions ahead of use", exc_info=True)


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _warm_up() -> None:
    """Run the warm-up invocation in this worker, as the first ``/health`` would."""
    _invoke(WARM_FUNCTION, WARM_EVENT)


def _warm_all() -> None:
    """Build every function in this worker, and the AWS clients they share, before any request needs them."""
    from flowledger.api.registry import CAPABILITY_MODULES
    from flowledger.services import bootstrap

    event = {
        **WARM_EVENT,
        "resource": WARM_ALL_PATH,
        "path": WARM_ALL_PATH,
        "requestContext": {"requestId": "warm-up", "resourcePath": WARM_ALL_PATH, "httpMethod": "GET"},
    }
    for function in CAPABILITY_MODULES:
        _invoke(function, event)
    clients = bootstrap().aws
    # Each client is made on first use: about a tenth of a second each, loading botocore's models.
    _ = clients.dynamodb, clients.s3, clients.kms
    freeze_long_lived()


def _built_functions() -> tuple[int, tuple[str, ...]]:
    """This worker's pid and the functions it has built."""
    return os.getpid(), tuple(sorted(_handlers))


def _handler(function: str) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    from flowledger.api.registry import capability_handler

    handler = _handlers.get(function)
    if handler is None:
        handler = _handlers[function] = capability_handler(function)
    return handler


def _invoke(function: str, event: dict[str, Any]) -> dict[str, Any]:
    """Run one invocation in a worker, building the function's handler on its first (cold) one."""
    handler = _handler(function)
    request_id = str((event.get("requestContext") or {}).get("requestId", ""))
    return handler(event, cast(LambdaContext, LocalLambdaContext(function, request_id)))
