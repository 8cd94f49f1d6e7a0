"""Runs the registered jobs on their schedules inside ``flowledger serve``.

EventBridge Scheduler does this in AWS; here one daemon thread wakes up for the next due job.
A failing job is logged and tried again at its next slot, as a scheduled Lambda would be.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from aws_lambda_powertools import Logger

from flowledger.jobs import Job, run_job
from flowledger.services import Services

logger = Logger(child=True)


class LocalScheduler:
    def __init__(
        self, jobs: Sequence[Job], services: Services, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._jobs = list(jobs)
        self._services = services
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs: dict[str, int] = {job.name: 0 for job in self._jobs}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop scheduling; a job still running after ``timeout`` is left to die with the process.

        The server stops within seconds whatever a job is doing (a backlog consumer may be mid-way
        through an agent run); the store's own request lock keeps the final snapshot consistent.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        start = self._monotonic()
        due = {job.name: start + job.interval_seconds for job in self._jobs}
        while not self._stop.is_set():
            now = self._monotonic()
            for job in self._jobs:
                if now >= due[job.name]:
                    self.run_now(job.name)
                    due[job.name] = now + job.interval_seconds
            next_due = min(due.values(), default=now + 60)
            self._stop.wait(timeout=max(0.05, next_due - self._monotonic()))

    def run_now(self, name: str) -> None:
        """Run one job in this thread; failures are logged, never raised."""
        try:
            run_job(name, self._services)
        except Exception:
            logger.exception("scheduled job failed", extra={"job": name})
        finally:
            self.runs[name] += 1
