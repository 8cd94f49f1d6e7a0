"""The loop-health verdict: one server-side rule for the console, the CLI and monitoring."""

from __future__ import annotations

from typing import Literal

CRITICAL_DISPATCHED_SECONDS = 25 * 60
CRITICAL_PENDING_SECONDS = 60 * 60
WARN_DISPATCHED_SECONDS = 15 * 60
WARN_RECENT_FAILURES = 5


def loop_health(
    oldest_pending_seconds: int | None, oldest_dispatched_seconds: int | None, recent_failures: int
) -> Literal["healthy", "warn", "critical"]:
    """critical at oldest dispatched >= 25 min or oldest pending >= 1 h; warn at oldest dispatched
    >= 15 min or >= 5 recent failures; healthy otherwise."""
    dispatched = oldest_dispatched_seconds or 0
    pending = oldest_pending_seconds or 0
    if dispatched >= CRITICAL_DISPATCHED_SECONDS or pending >= CRITICAL_PENDING_SECONDS:
        return "critical"
    if dispatched >= WARN_DISPATCHED_SECONDS or recent_failures >= WARN_RECENT_FAILURES:
        return "warn"
    return "healthy"
