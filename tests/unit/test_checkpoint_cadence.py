"""The checkpoint cadence a deployment chooses, 1 to 60 minutes, and nothing else."""

from __future__ import annotations

import pytest

from flowledger.config import load_settings
from flowledger.errors import ConfigurationError
from flowledger.jobs import CHECKPOINT_JOB, JOBS, jobs_with_checkpoints_every


@pytest.mark.parametrize(
    ("minutes", "schedule"), [(1, "rate(1 minute)"), (5, "rate(5 minutes)"), (60, "rate(60 minutes)")]
)
def test_the_checkpoint_job_runs_at_the_chosen_cadence_and_the_others_as_ever(minutes: int, schedule: str) -> None:
    jobs = jobs_with_checkpoints_every(minutes)
    chosen = next(job for job in jobs if job.name == CHECKPOINT_JOB)
    assert (chosen.schedule, chosen.interval_seconds) == (schedule, minutes * 60)
    assert [job for job in jobs if job.name != CHECKPOINT_JOB] == [job for job in JOBS if job.name != CHECKPOINT_JOB]


@pytest.mark.parametrize("minutes", [0, 61, -5])
def test_a_cadence_outside_one_to_sixty_minutes_is_refused(minutes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="1 to 60 minutes"):
        jobs_with_checkpoints_every(minutes)
    monkeypatch.setenv("FLOWLEDGER_CHECKPOINT_MINUTES", str(minutes))
    with pytest.raises(ConfigurationError, match="FLOWLEDGER_CHECKPOINT_MINUTES"):
        load_settings()
