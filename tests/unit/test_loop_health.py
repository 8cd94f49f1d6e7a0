from __future__ import annotations

import pytest

from flowledger.research.health import loop_health

MIN = 60


@pytest.mark.parametrize(
    ("pending", "dispatched", "failures", "verdict"),
    [
        (None, None, 0, "healthy"),
        (59 * MIN + 59, 14 * MIN + 59, 4, "healthy"),
        (None, 15 * MIN, 0, "warn"),
        (None, None, 5, "warn"),
        (None, 25 * MIN - 1, 0, "warn"),
        (None, 25 * MIN, 0, "critical"),
        (60 * MIN, None, 0, "critical"),
        (60 * MIN - 1, None, 100, "warn"),
    ],
)
def test_verdict_at_each_threshold(pending: int | None, dispatched: int | None, failures: int, verdict: str) -> None:
    assert loop_health(pending, dispatched, failures) == verdict
