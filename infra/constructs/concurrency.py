"""Reserved concurrency per function, from ``flowledger:reservedConcurrency`` (default: none reserved).

The value maps a function's name (its folder under ``functions/``, the ``name`` it is made with) to a
positive integer: ``cdk deploy -c 'flowledger:reservedConcurrency={"chat": 20, "jobs": 2}'``. Every
function made from that folder reserves the number (``chat`` names both chat functions). Reserving
caps that function (beyond it, calls are throttled, and its throttles alarm) and sets that much of
the account's concurrency aside for it; the account must keep 100 unreserved, which only the deploy
can check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from constructs import Node

from infra.constructs.functions import function_names
from infra.constructs.model_config import context_object

RESERVED_CONCURRENCY_CONTEXT = "flowledger:reservedConcurrency"


@dataclass(frozen=True)
class ReservedConcurrency:
    """How many concurrent executions each named function has reserved; a function not named has none."""

    by_function: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_context(cls, node: Node) -> ReservedConcurrency:
        """The reservations from ``flowledger:reservedConcurrency``; a bad value fails the synth naming it."""
        value = context_object(node, RESERVED_CONCURRENCY_CONTEXT, tuple(sorted(function_names())))
        if not value:
            return cls()
        for name, count in value.items():
            # bool is an int to Python, and `true` is no count.
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ValueError(f"{RESERVED_CONCURRENCY_CONTEXT}: {name} must be a positive integer, not {count!r}")
        return cls(dict(value))
