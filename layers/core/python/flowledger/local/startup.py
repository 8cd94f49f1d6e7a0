"""The dev server's start in two halves, and the gate between them.

``/health`` answers as soon as the gateway listens and one function worker is up; provisioning,
the demo data, the chat app and the other workers are finished behind it by a background thread.
A request that needs any of that waits at the gate until the start is done (at most
``WAIT_SECONDS``, then a 503 with ``Retry-After``), so no client ever sees a half-built store.
"""

from __future__ import annotations

import asyncio
import threading

from flowledger.errors import UpstreamUnavailable

WAIT_SECONDS = 30.0
_POLL_SECONDS = 0.05


class StillStarting(UpstreamUnavailable):
    """The dev server has not finished starting (or failed to); a 503 with ``Retry-After``."""

    code = "starting"


class StartupGate:
    """Opened once by the thread that finishes the start, or marked failed with the reason."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.failure: str | None = None

    @property
    def ready(self) -> bool:
        return self._done.is_set() and self.failure is None

    def open(self) -> None:
        self._done.set()

    def fail(self, reason: str) -> None:
        self.failure = reason
        self._done.set()

    async def wait(self, timeout: float = WAIT_SECONDS) -> None:
        """Return once the start is done; :class:`StillStarting` if it failed or takes over ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._done.is_set() and loop.time() < deadline:
            await asyncio.sleep(_POLL_SECONDS)  # polls: the opening thread has no event loop to signal
        if self.failure is not None:
            raise StillStarting(f"the dev server failed to start: {self.failure}")
        if not self._done.is_set():
            raise StillStarting(f"the dev server is still starting after {timeout:.0f} s; retry shortly")
