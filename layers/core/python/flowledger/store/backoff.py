"""Jittered exponential backoff for the retry loops of conditional writes."""

from __future__ import annotations

import random


def backoff_seconds(attempt: int, base: float = 0.002, cap: float = 0.02) -> float:
    """A random pause before retry ``attempt`` (0-based): up to ``base * 2**attempt``, at most ``cap``.

    Full jitter: writers that collided once pick different pauses, so they rarely collide again.
    """
    return random.uniform(0, min(cap, base * 2**attempt))  # noqa: S311 - load spreading, not security
