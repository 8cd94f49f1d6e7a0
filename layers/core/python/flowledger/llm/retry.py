"""Retry policies for model calls, in one place (the seed's ``HarnessRetryPolicies``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from flowledger.llm.ports import (
    ModelDegenerateOutput,
    ModelError,
    ModelInvalidOutput,
    ModelTimeout,
    ModelTransportError,
)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often one call may be tried, and on which failures."""

    name: str
    max_attempts: int
    retry_on: tuple[type[ModelError], ...]

    def run(self, attempt: Callable[[], T]) -> tuple[T, int]:
        """Call ``attempt`` (with identical input each time) until it succeeds or the policy gives up.

        Returns the result and the number of attempts made; re-raises the last failure.
        """
        for number in range(1, self.max_attempts + 1):
            try:
                return attempt(), number
            except self.retry_on:
                if number == self.max_attempts:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover


class HarnessRetryPolicies:
    @staticmethod
    def intent_router() -> RetryPolicy:
        """At most one retry, on timeout, transport error or invalid output."""
        return RetryPolicy("intent_router", 2, (ModelTimeout, ModelTransportError, ModelInvalidOutput))

    @staticmethod
    def executor_answer() -> RetryPolicy:
        """Executors' answer calls: one retry on technical failures and on junk (a template token or a loop, which
        a second sample rarely repeats); other invalid output is not retried."""
        return RetryPolicy("executor_answer", 2, (ModelTimeout, ModelTransportError, ModelDegenerateOutput))

    @staticmethod
    def diagnosis_step() -> RetryPolicy:
        """A diagnosis agent step: one retry on timeout, transport error or an answer outside the schema."""
        return RetryPolicy("diagnosis_step", 2, (ModelTimeout, ModelTransportError, ModelInvalidOutput))
