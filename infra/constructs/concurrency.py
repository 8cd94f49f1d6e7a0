"""Reserved concurrency per function, from ``flowledger:reservedConcurrency`` (default: none reserved).

The value maps a function's service name (its folder under ``functions/``, or ``chat-buffered`` for the
chat's buffered routes, which run ``functions/chat`` apart from the streaming route) to a positive
integer: ``cdk deploy -c 'flowledger:reservedConcurrency={"chat": 20, "chat-buffered": 5, "jobs": 2}'``. Reserving
caps that function (beyond it, calls are throttled, and its throttles alarm) and sets that much of
the account's concurrency aside for it; the account must keep 100 unreserved, which only the deploy
can check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from constructs import Node

from infra.constructs.chat import BUFFERED_SERVICE
from infra.constructs.context import context_object
from infra.constructs.functions import function_names

RESERVED_CONCURRENCY_CONTEXT = "flowledger:reservedConcurrency"


@dataclass(frozen=True)
class ReservedConcurrency:
    """How many concurrent executions each named function has reserved; a function not named has none."""

    by_function: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_context(cls, node: Node) -> ReservedConcurrency:
        """The reservations from ``flowledger:reservedConcurrency``; a bad value fails the synth naming it."""
        value = context_object(node, RESERVED_CONCURRENCY_CONTEXT, service_names())
        if not value:
            return cls()
        for name, count in value.items():
            # bool is an int to Python, and `true` is no count.
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ValueError(f"{RESERVED_CONCURRENCY_CONTEXT}: {name} must be a positive integer, not {count!r}")
        return cls(dict(value))


def service_names() -> tuple[str, ...]:
    """Every name a function reports itself as (``POWERTOOLS_SERVICE_NAME``): its folder, or a name of its own."""
    return tuple(sorted(function_names() | {BUFFERED_SERVICE}))
