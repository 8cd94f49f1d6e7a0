"""The embedded store's persistence: the journal under the snapshot, and honest answers when it fails.

A mutating request runs as before under the server's request lock; while still under it, its
effect is appended to the journal (``journal_effects``), and outside it the request waits for the
group fsync that covers its record before it is answered. A request whose effect cannot be
replayed is answered only once a snapshot holding it is durable. A snapshot (``fork_snapshot``)
starts a new journal segment at the fork and deletes the older ones once its file is published.

A restart loads the snapshot and replays the journal segments it does not cover: the store holds
every write that was answered 2xx, and at most some that were not yet answered when the process died.

``compact`` leaves on disk only what the store holds now: after an erasure's deletes, no journal segment,
snapshot or snapshot in progress from before them is left holding the erased values.
"""

from __future__ import annotations

import gc
import io
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from flowledger.local import fork_snapshot, journal_effects
from flowledger.local.durability import Durability, refuse
from flowledger.local.fork_snapshot import PendingSnapshot
from flowledger.local.journal import FaultInjection, Journal, scan, segment_numbers
from flowledger.local.moto_state import (
    SnapshotInfo,
    StateCounts,
    count_state,
    journal_from,
    load_state,
    remove_temporary_files,
)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# How long a compaction waits for the snapshots forked before its own (each pickles the whole store: a few
# seconds for a large one); past it the compaction fails, and the erasure that asked for it is retried.
COMPACT_WAIT_SECONDS = 60.0
logger = logging.getLogger("flowledger.local")


class Serialized(Protocol):
    """What the store needs of the locked WSGI app (``moto_server.SerializedWSGI``)."""

    lock: threading.Lock
    changes: int
    inner: WSGIApp


@dataclass(frozen=True)
class Restored:
    """What a restore found: the store's counts (None: nothing saved) and how many records it replayed."""

    counts: StateCounts | None
    replayed: int
    refused: int  # replayed requests moto answered with an error (logged; expected to be 0)


class _Answer:
    """moto's status and headers, held until the write is durable."""

    def __init__(self) -> None:
        self.status = "500 Internal Server Error"
        self.headers: list[tuple[str, str]] = []

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        self.status, self.headers = status, headers

    @property
    def ok(self) -> bool:
        return self.status.startswith("2")


class JournaledStore:
    """Journals, snapshots and restores the store served by one ``SerializedWSGI``."""

    def __init__(
        self, served: Serialized, directory: Path, state_file: Path, faults: FaultInjection | None = None
    ) -> None:
        self._served = served
        self._faults = faults or FaultInjection()
        self.journal = Journal(directory, faults=self._faults)
        self.state_file = state_file
        self.durability = Durability()
        self._publish_lock = threading.Lock()
        self._begun = 0  # snapshots forked so far; each one's number orders their publication
        self._published = 0
        self._saved_changes: int | None = None
        # Per child: its number, the failure count when it forked, and whether the store was failing then.
        self._pending_meta: dict[int, tuple[int, int, bool]] = {}
        # Snapshots begun and not yet published, discarded or failed: number -> their temporary file.
        self._unfinished: dict[int, Path] = {}
        self._finished = threading.Condition()

    # -- requests -----------------------------------------------------------------------------------------

    def write(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        """Run a mutating request and answer it once its effect is durable, or 503 when it cannot be."""
        served, durability = self._served, self.durability
        if not durability.durable:
            durability.refused += 1
            return refuse(environ, durability.cause or "unknown", start_response)
        body = _read_body(environ)
        answer = _Answer()
        ticket: int | PendingSnapshot | None = None
        failed: str | None = None
        with served.lock:
            served.changes += 1
            snapshot = journal_effects.needs_snapshot(environ)
            items = None if snapshot else journal_effects.item_write(environ, body)
            output = list(served.inner(environ, answer.start_response))
            if answer.ok:
                try:
                    if snapshot:
                        ticket = self._begin_snapshot()
                    elif items is not None:
                        ticket = self.journal.append(journal_effects.item_record(items))
                    else:
                        ticket = self.journal.append(journal_effects.request_record(environ, body, answer.headers))
                except OSError as exc:
                    failed = "the snapshot" if snapshot else f"the journal in {self.journal.directory}"
                    durability.fail(f"could not write {failed}", exc)
                    if items is not None:
                        journal_effects.rollback(items)  # as if moto had refused it
                    else:
                        durability.unsaved += 1
        if failed is None:
            failed = self._wait(ticket)
        if failed is not None:
            return refuse(environ, durability.cause or failed, start_response)
        start_response(answer.status, answer.headers)
        return output

    def _wait(self, ticket: int | PendingSnapshot | None) -> str | None:
        """Wait until the ticket is durable; what failed, or None."""
        if isinstance(ticket, int):
            try:
                self.journal.sync(ticket)
            except OSError as exc:
                self.durability.fail(f"could not flush the journal in {self.journal.directory}", exc)
                self.durability.unsaved += 1
                return "the journal"
        elif isinstance(ticket, PendingSnapshot):
            try:
                self._finish_snapshot(ticket)
            except OSError:
                self.durability.unsaved += 1
                return "the snapshot"
        return None

    # -- snapshots ----------------------------------------------------------------------------------------

    def snapshot(self, *, force: bool = False) -> SnapshotInfo:
        """Save the store to the state file (forked), unless nothing changed since the last one.

        Raises ``OSError`` (and the store stops being durable) when it cannot be written.
        """
        path = self.state_file
        with self._served.lock:
            changes = self._served.changes
            counts = count_state()
            unchanged = self._saved_changes == changes and path.exists() and self.durability.durable
            if unchanged and not force:
                return SnapshotInfo(path=path, counts=counts, written=False, size_bytes=path.stat().st_size)
            pending = self._begin_snapshot()
        size = self._finish_snapshot(pending)
        self._saved_changes = changes
        return SnapshotInfo(path=path, counts=counts, written=True, size_bytes=size)

    def _begin_snapshot(self) -> PendingSnapshot:
        """Under the request lock: a new journal segment, and a child writing the store as it is."""
        failures, was_failing = self.durability.failures, not self.durability.durable
        try:
            segment = self.journal.rotate()
            pending = fork_snapshot.begin(self.state_file, segment, self._faults)
        except OSError as exc:
            self.durability.fail(f"could not start a snapshot in {self.state_file.parent}", exc)
            raise
        self._begun += 1
        self._pending_meta[pending.pid] = (self._begun, failures, was_failing)
        with self._finished:
            self._unfinished[self._begun] = pending.temporary
        return pending

    def _finish_snapshot(self, pending: PendingSnapshot) -> int:
        number, failures, was_failing = self._pending_meta.pop(pending.pid)
        try:
            size = fork_snapshot.finish(pending)
            with self._publish_lock:
                if number > self._published:
                    fork_snapshot.publish(pending)
                    self._published = number
                    assert pending.journal_from is not None
                    self.journal.drop_before(pending.journal_from)
                else:  # a newer snapshot is already in place and holds all this one does
                    fork_snapshot.discard(pending)
        except OSError as exc:
            self.durability.fail(f"could not write the snapshot {self.state_file}", exc)
            raise
        finally:
            with self._finished:
                del self._unfinished[number]
                self._finished.notify_all()
        if was_failing:
            self.durability.recover(failures)  # it holds everything: no write ran since the failure
        return size

    def compact(self, wait_seconds: float = COMPACT_WAIT_SECONDS) -> SnapshotInfo:
        """Leave on disk only the store as it is now: call it after an erasure's deletes were answered.

        A snapshot is forked and published (or a newer one was, which holds all it does), which deletes
        every journal segment before it; every snapshot forked before it is waited for (published or
        discarded, its file is gone); then every temporary snapshot file no snapshot in progress writes
        is deleted, and each deletion made durable. Raises ``OSError`` when it cannot be done
        (``TimeoutError`` when an older snapshot is still running after ``wait_seconds``).
        """
        with self._served.lock:
            changes = self._served.changes
            counts = count_state()
            pending = self._begin_snapshot()
            number = self._begun
        size = self._finish_snapshot(pending)
        self._saved_changes = changes

        def none_older() -> bool:
            return all(begun > number for begun in self._unfinished)

        with self._finished:
            if not self._finished.wait_for(none_older, timeout=wait_seconds):
                raise TimeoutError(f"a snapshot begun before the compaction still runs after {wait_seconds:g} s")
        with self._served.lock:  # no snapshot begins meanwhile: every other temporary file is stale
            with self._finished:
                in_progress = list(self._unfinished.values())
            remove_temporary_files(self.state_file, keep=in_progress)
        return SnapshotInfo(path=self.state_file, counts=counts, written=True, size_bytes=size)

    # -- restart ------------------------------------------------------------------------------------------

    def restore(self) -> Restored:
        """Load the snapshot, replay the journal after it, and open a new segment for appends.

        Call it with no request inside moto. Raises ``ConfigurationError`` for a damaged snapshot or
        journal (a torn last record is not damage: it is dropped).
        """
        with self._served.lock:
            with self._finished:
                in_progress = list(self._unfinished.values())
            # Only this server uses the directory (its lock): any other is a crashed or killed one's leftover.
            remove_temporary_files(self.state_file, keep=in_progress)
            counts = load_state(self.state_file)
            first = (journal_from(self.state_file) if counts is not None else None) or 1
            found = scan(self.journal.directory, first)
            found.repair()
            self.journal.drop_before(first)  # left behind by a crash between publishing and deleting
            refused = _replay(found.payloads, self._served.inner)
            if found.payloads:
                counts = count_state()
                self._served.changes += 1  # the replayed writes are not in the snapshot yet
            segments = segment_numbers(self.journal.directory)
            self.journal.open(max([found.last_segment, first - 1, *segments]) + 1)
            self._saved_changes = self._served.changes if not found.payloads else None
        return Restored(counts=counts, replayed=len(found.payloads), refused=refused)

    def close(self) -> None:
        self.journal.close()


def _replay(payloads: list[bytes], app: WSGIApp) -> int:
    # As in moto_state's restore: the cyclic collector would run over and over, finding nothing.
    enabled = gc.isenabled()
    gc.disable()
    refused = 0
    backends: dict[tuple[str, str], Any] = {}
    try:
        for payload in payloads:
            if not journal_effects.apply(payload, app, backends):
                refused += 1
    finally:
        if enabled:
            gc.enable()
    if refused:
        logger.warning("%d journaled requests were refused on replay", refused)
    return refused


def _read_body(environ: dict[str, Any]) -> bytes:
    """Read the request body once (the journal keeps it) and hand moto a copy."""
    stream = environ["wsgi.input"]
    length = environ.get("CONTENT_LENGTH") or ""
    if length.isdigit():
        body = stream.read(int(length))
    elif environ.get("wsgi.input_terminated"):
        body = stream.read()
    else:
        body = b""
    environ["wsgi.input"] = io.BytesIO(body)
    return bytes(body)
