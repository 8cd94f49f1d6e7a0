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
import logging
import multiprocessing
import os
import signal
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.pool import Pool
from typing import Any, cast

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import SecretStr

from flowledger.config import Settings

logger = logging.getLogger("flowledger.local")
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
    """A fixed set of worker processes; ``invoke`` runs one event on whichever worker is free."""

    def __init__(self, environment: dict[str, str], workers: int) -> None:
        self._environment = {**environment, **WORKER_ENVIRONMENT}
        self._workers = workers
        self._pool: Pool | None = None

    @property
    def workers(self) -> int:
        return self._workers

    def start(self) -> None:
        # spawn, not fork: the server process holds threads (moto, the scheduler) a fork would copy mid-state.
        context = multiprocessing.get_context("spawn")
        self._pool = context.Pool(self._workers, initializer=_start_worker, initargs=(self._environment,))

    async def invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any]:
        """The function's proxy response to ``event``; :class:`FunctionTimeout` after the integration timeout."""
        if self._pool is None:
            raise RuntimeError("the function pool is not started")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()

        def settle(setter: Callable[[Any], None]) -> Callable[[Any], None]:
            def settle_on_loop(value: Any) -> None:
                loop.call_soon_threadsafe(lambda: None if future.done() else setter(value))

            return settle_on_loop

        self._pool.apply_async(
            _invoke,
            (function, event),
            callback=settle(future.set_result),
            error_callback=settle(future.set_exception),
        )
        try:
            return await asyncio.wait_for(future, INTEGRATION_TIMEOUT_SECONDS)
        except TimeoutError:
            raise FunctionTimeout(f"{function} did not answer within {INTEGRATION_TIMEOUT_SECONDS:.0f} s") from None

    def stop(self) -> None:
        """Stop every worker now, whatever it is doing (the server is shutting down)."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


_handlers: dict[str, Callable[[dict[str, Any], LambdaContext], dict[str, Any]]] = {}  # this worker's warm ones


def _start_worker(environment: dict[str, str]) -> None:
    os.environ.update(environment)
    # Functions that publish no metric flush an empty EMF batch and warn; expected, and noise here.
    warnings.filterwarnings("ignore", "No application metrics to publish")
    # Ctrl-C reaches the whole process group; the server stops its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _invoke(function: str, event: dict[str, Any]) -> dict[str, Any]:
    """Run one invocation in a worker, building the function's handler on its first (cold) one."""
    from flowledger.api.registry import capability_handler

    handler = _handlers.get(function)
    if handler is None:
        handler = _handlers[function] = capability_handler(function)
    request_id = str((event.get("requestContext") or {}).get("requestId", ""))
    return handler(event, cast(LambdaContext, LocalLambdaContext(function, request_id)))
