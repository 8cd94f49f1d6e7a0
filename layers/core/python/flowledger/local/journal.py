"""The embedded store's write-ahead journal: checksummed records in numbered segment files.

Every request that changed the store is appended here (``journal_effects`` says what a record holds)
and made durable with one ``fsync`` shared by every request waiting at the time: a group commit.
``append`` runs under the server's request lock, so records are in the order moto applied them;
``sync`` runs outside it, and a caller whose record an earlier ``fsync`` already covered returns at
once. A snapshot starts a new segment (``rotate``) and, once its file is durable, the segments it
covers are deleted (``drop_before``).

A segment file is records only, each ``>II`` (payload length, CRC32 of the payload) then the
payload; the first record of a segment is a JSON header (magic, format, moto version), since a
record may hold moto's own objects. Reading back, a torn last record (a write cut short by power
loss: too short for its length, a checksum that fails at the very end, or a zero-filled tail) is
dropped and cut off the file; a bad record with good data after it is damage, refused with a
``ConfigurationError``, never skipped.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import moto

from flowledger.errors import ConfigurationError
from flowledger.local.moto_state import header_problem, read_header

_PREFIX = struct.Struct(">II")  # payload length, CRC32 of the payload
_MAGIC = "flowledger-journal"
FORMAT_VERSION = 1
_SEGMENT_GLOB = "segment-*.log"

Fsync = Callable[[int], None]


def segment_path(directory: Path, number: int) -> Path:
    """Where segment ``number`` lives (zero-padded, so names sort as numbers)."""
    return directory / f"segment-{number:08d}.log"


def segment_numbers(directory: Path) -> list[int]:
    """The segments in ``directory``, oldest first."""
    return sorted(int(path.stem.split("-")[1]) for path in directory.glob(_SEGMENT_GLOB))


def frame(payload: bytes) -> bytes:
    """One record as written: length and checksum prefix, then the payload."""
    return _PREFIX.pack(len(payload), zlib.crc32(payload)) + payload


def _header() -> bytes:
    return json.dumps({"magic": _MAGIC, "format": FORMAT_VERSION, "moto": moto.__version__}).encode()


class FaultInjection:
    """Makes journal and snapshot writes fail with ENOSPC while ``path`` exists: a full disk, for tests.

    Where a small filesystem cannot be mounted, the disk-full test creates the file to fill the "disk"
    and deletes it to free space. Off (``path`` None) in normal use.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path

    def check(self) -> None:
        """Raise ``OSError(ENOSPC)`` while the fault file exists."""
        if self.path is not None and self.path.exists():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (injected)")


@dataclass
class JournalScan:
    """What reading the segments found: the payloads in order, and a torn tail to cut off if any."""

    payloads: list[bytes] = field(default_factory=list)
    last_segment: int = 0
    torn: tuple[Path, int] | None = None  # (segment, length of its good part)

    def repair(self) -> None:
        """Cut the torn tail off its segment, so records appended after it are never behind damage."""
        if self.torn is not None:
            path, good = self.torn
            with path.open("r+b") as handle:
                handle.truncate(good)
                handle.flush()
                os.fsync(handle.fileno())
            self.torn = None


def _refuse(path: Path, problem: str) -> ConfigurationError:
    return ConfigurationError(
        f"cannot replay the embedded store's journal {path}: {problem}; "
        "start with --reset to discard the store and begin empty"
    )


def _read_segment(path: Path) -> tuple[list[bytes], int | None]:
    """The segment's payloads (header excluded) and, if its end is torn, the length of its good part."""
    data = path.read_bytes()
    payloads: list[bytes] = []
    offset = 0
    while offset < len(data):
        end = offset + _PREFIX.size
        if end > len(data):
            return payloads, offset  # cut short inside the prefix
        length, checksum = _PREFIX.unpack_from(data, offset)
        stop = end + length
        if stop > len(data):
            return payloads, offset  # cut short inside the payload
        payload = data[end:stop]
        # Records are never empty, so a zero length is the zero-filled tail a crash can leave.
        if length == 0 or zlib.crc32(payload) != checksum:
            if not data[stop:].strip(b"\0"):
                return payloads, offset  # the last record, half written (zeros at most after it)
            raise _refuse(path, f"record at byte {offset:,} fails its checksum and records follow it")
        payloads.append(payload)
        offset = stop
    return payloads, None


def scan(directory: Path, first_segment: int) -> JournalScan:
    """Read every record of the segments numbered ``first_segment`` and up, in order.

    Raises ``ConfigurationError`` for damage that is not a torn end: a bad record followed by good
    ones, a torn segment followed by a segment with records, or a segment from another version.
    """
    result = JournalScan()
    for number in segment_numbers(directory):
        if number < first_segment:
            continue
        path = segment_path(directory, number)
        payloads, torn_at = _read_segment(path)
        if result.torn is not None and payloads:
            raise _refuse(result.torn[0], "it ends in a torn record and a later segment holds records")
        result.last_segment = number
        if payloads:
            _check_header(path, payloads[0])
            result.payloads.extend(payloads[1:])
        if torn_at is not None:
            result.torn = (path, torn_at)
    return result


def _check_header(path: Path, payload: bytes) -> None:
    header = read_header(payload)
    problem = header_problem(header, _MAGIC, FORMAT_VERSION, "a Flowledger journal segment", "written")
    if problem is not None:
        raise _refuse(path, problem)


class Journal:
    """Appends records to the current segment and fsyncs them in groups.

    ``append`` and ``rotate`` are called under the server's request lock (one at a time); ``sync`` is
    called outside it by any number of threads.
    """

    def __init__(self, directory: Path, *, fsync: Fsync = os.fsync, faults: FaultInjection | None = None) -> None:
        self.directory = directory
        self._fsync = fsync
        self._faults = faults or FaultInjection()
        self._sync_lock = threading.Lock()  # held by the one fsync running (and by rotate and close)
        self._synced_changed = threading.Condition()
        self._fd: int | None = None
        self._offset = 0
        self.segment = 0
        self.written = 0  # records appended so far (their sequence numbers are 1..written)
        self.synced = 0  # records an fsync has made durable
        self.fsyncs = 0

    def open(self, segment: int) -> None:
        """Start appending to a new segment ``segment`` (the directory is created if missing)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, offset = self._new_segment(segment)
        self._fd, self._offset, self.segment = fd, offset, segment

    def _new_segment(self, segment: int) -> tuple[int, int]:
        self._faults.check()
        path = segment_path(self.directory, segment)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            header = frame(_header())
            _write_all(fd, header, 0)
            self._fsync(fd)
            _sync_directory(self.directory)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        return fd, len(header)

    def append(self, payload: bytes) -> int:
        """Write one record (not yet durable: pass the number returned to ``sync``).

        On failure the segment is cut back to where it was, so no half record stays behind, and the
        ``OSError`` is raised.
        """
        if self._fd is None:
            raise RuntimeError("the journal is not open")
        record = frame(payload)
        try:
            self._faults.check()
            _write_all(self._fd, record, self._offset)
        except OSError:
            # Freeing space never needs space; if even this fails the next snapshot drops the segment.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._offset)
            raise
        self._offset += len(record)
        self.written += 1
        return self.written

    def sync(self, sequence: int) -> None:
        """Return once record ``sequence`` is on disk; one fsync covers every record written before it.

        One caller at a time fsyncs (the leader, holding the sync lock); the others wait on a condition that
        wakes them all when it ends. Waiting on the lock itself would wake one waiter per fsync, each to find
        its record already covered only after the next fsync: a convoy of one flush per record.
        """
        while self.synced < sequence:
            if not self._sync_lock.acquire(blocking=False):
                with self._synced_changed:
                    # The leader releases the lock and updates ``synced`` under this condition, so nothing is missed.
                    if self.synced < sequence and self._sync_lock.locked():
                        self._synced_changed.wait()
                continue
            covered = self.synced
            try:
                if self.synced >= sequence:
                    return  # another thread's fsync covered it
                target, fd = self.written, self._fd
                if fd is None:
                    raise RuntimeError("the journal is closed")
                self._fsync(fd)
                self.fsyncs += 1
                covered = max(self.synced, target)
            finally:
                self._release_sync_lock(covered)

    def _release_sync_lock(self, synced: int) -> None:
        with self._synced_changed:
            self.synced = synced
            self._sync_lock.release()
            self._synced_changed.notify_all()

    def rotate(self) -> int:
        """Start the next segment and make the current one durable; the new segment's number.

        A snapshot taken at this point covers every record in the segments before the one returned.
        If the new segment cannot be made, nothing changes and the ``OSError`` is raised.
        """
        fd, offset = self._new_segment(self.segment + 1)
        self._sync_lock.acquire()
        synced = self.synced
        try:
            old = self._fd
            try:
                if old is not None:
                    self._fsync(old)
                    self.fsyncs += 1
            except OSError:
                os.close(fd)
                segment_path(self.directory, self.segment + 1).unlink(missing_ok=True)
                raise
            synced = self.written
            self._fd, self._offset, self.segment = fd, offset, self.segment + 1
        finally:
            self._release_sync_lock(synced)
        if old is not None:
            os.close(old)
        return self.segment

    def drop_before(self, segment: int) -> None:
        """Delete the segments a durable snapshot covers (numbered below ``segment``), durably.

        The directory is synced too: until it is, a crash could bring a deleted segment back, and with it
        every value it held (an erasure relies on their being gone).
        """
        dropped = False
        for number in segment_numbers(self.directory):
            if number < segment:
                segment_path(self.directory, number).unlink(missing_ok=True)
                dropped = True
        if dropped:
            _sync_directory(self.directory)

    def close(self) -> None:
        self._sync_lock.acquire()
        try:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        finally:
            self._release_sync_lock(self.synced)


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _sync_directory(directory: Path) -> None:
    """A new file's name is durable only once its directory is synced."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
