"""One ``flowledger serve`` per data directory: an OS file lock, and who holds it.

Two servers saving one store would each overwrite the other's snapshot and ``local.json``, so the
server takes an exclusive ``flock`` on ``serve.lock`` before it touches anything else in the
directory, and writes its pid and URL into that file for the one-line refusal a second server
prints. The kernel drops the lock when the holder dies, however it dies (``kill -9`` included), so
a stale lock needs no guessing from pids: a record left in the file by a holder that never
released it only tells the next server whose lock it took over.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from flowledger.errors import ConfigurationError

LOCK_FILE = "serve.lock"


@dataclass(frozen=True)
class LockHolder:
    """The server that holds (or last held) a data directory."""

    pid: int
    url: str
    started_at: float

    @classmethod
    def parse(cls, text: str) -> LockHolder | None:
        """The record in a lock file, or None when it is empty or not one of ours."""
        try:
            fields = json.loads(text)
            return cls(pid=int(fields["pid"]), url=str(fields["url"]), started_at=float(fields["started_at"]))
        except (ValueError, KeyError, TypeError):
            return None


class DataDirLock:
    """The exclusive lock of one data directory, held from ``acquire`` until ``release`` (or death)."""

    def __init__(self, path: Path, fd: int, took_over: LockHolder | None) -> None:
        self.path = path
        self._fd: int | None = fd
        self.took_over = took_over  # a holder that died without releasing the lock, if any

    @classmethod
    def acquire(cls, directory: Path, url: str) -> DataDirLock:
        """Lock ``directory`` for the server at ``url``; :class:`ConfigurationError` naming the holder if taken."""
        path = directory / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # O_CLOEXEC by default: workers never inherit it
        except OSError as exc:
            raise ConfigurationError(f"cannot create {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = LockHolder.parse(_read(fd))
            os.close(fd)
            who = f"pid {holder.pid}, {holder.url}" if holder else "another process"
            raise ConfigurationError(
                f"{directory} is in use by another flowledger serve ({who}); stop it or pick another --data-dir"
            ) from None
        stale = LockHolder.parse(_read(fd))
        record = LockHolder(pid=os.getpid(), url=url, started_at=time.time())
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(asdict(record)).encode() + b"\n", 0)
        return cls(path, fd, stale)

    def release(self) -> None:
        """Empty the record (a clean stop leaves nothing to take over) and drop the lock."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the only descriptor releases the flock
        self._fd = None


def _read(fd: int) -> str:
    return os.pread(fd, 4096, 0).decode("utf-8", "replace")
