"""The journal's file format and group commit: what a restart can rely on reading back."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from flowledger.errors import ConfigurationError
from flowledger.local import journal as journal_module
from flowledger.local.journal import FaultInjection, Journal, frame, scan, segment_numbers, segment_path


def written(directory: Path, payloads: list[bytes]) -> Journal:
    journal = Journal(directory)
    journal.open(1)
    for payload in payloads:
        journal.sync(journal.append(payload))
    return journal


def test_records_read_back_in_order_across_segments(tmp_path: Path) -> None:
    journal = written(tmp_path, [b"one", b"two"])
    assert journal.rotate() == 2
    journal.sync(journal.append(b"three"))
    journal.close()
    found = scan(tmp_path, 1)
    assert found.payloads == [b"one", b"two", b"three"]
    assert found.last_segment == 2 and found.torn is None
    assert scan(tmp_path, 2).payloads == [b"three"]  # what a snapshot taken at the rotation leaves to replay


@pytest.mark.parametrize("cut", [1, 5, 9, 12])
def test_a_torn_last_record_is_dropped_and_cut_off(tmp_path: Path, cut: int) -> None:
    written(tmp_path, [b"kept", b"torn-record"]).close()
    path = segment_path(tmp_path, 1)
    path.write_bytes(path.read_bytes()[:-cut])  # power lost mid-write

    found = scan(tmp_path, 1)
    assert found.payloads == [b"kept"]
    found.repair()
    journal = Journal(tmp_path)
    journal.open(2)
    journal.sync(journal.append(b"after"))
    assert scan(tmp_path, 1).payloads == [b"kept", b"after"]  # the cut tail no longer sits behind new records


def test_a_last_record_with_a_bad_checksum_or_a_zero_filled_tail_is_torn(tmp_path: Path) -> None:
    written(tmp_path, [b"kept", b"garbled"]).close()
    path = segment_path(tmp_path, 1)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data) + b"\0" * 64)
    assert scan(tmp_path, 1).payloads == [b"kept"]


def test_a_bad_record_with_records_after_it_is_refused_not_skipped(tmp_path: Path) -> None:
    written(tmp_path, [b"first", b"second", b"third"]).close()
    path = segment_path(tmp_path, 1)
    data = bytearray(path.read_bytes())
    second = data.index(b"second")
    data[second] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigurationError) as refused:
        scan(tmp_path, 1)
    assert "fails its checksum and records follow it" in refused.value.message
    assert str(path) in refused.value.message and "--reset" in refused.value.message


def test_a_torn_segment_followed_by_records_is_refused(tmp_path: Path) -> None:
    journal = written(tmp_path, [b"one"])
    journal.rotate()
    journal.sync(journal.append(b"two"))
    journal.close()
    first = segment_path(tmp_path, 1)
    first.write_bytes(first.read_bytes() + frame(b"half")[:-2])
    with pytest.raises(ConfigurationError, match="later segment holds records"):
        scan(tmp_path, 1)


def test_a_failed_append_leaves_no_half_record(tmp_path: Path) -> None:
    fault = tmp_path / "disk-full"
    journal = Journal(tmp_path / "journal", faults=FaultInjection(fault))
    journal.open(1)
    journal.sync(journal.append(b"before"))
    fault.touch()
    with pytest.raises(OSError, match="No space left"):
        journal.append(b"refused")
    fault.unlink()
    journal.sync(journal.append(b"after"))
    assert scan(tmp_path / "journal", 1).payloads == [b"before", b"after"]


def test_drop_before_deletes_the_segments_a_snapshot_covers(tmp_path: Path) -> None:
    journal = written(tmp_path, [b"one"])
    journal.rotate()
    journal.rotate()
    journal.drop_before(3)
    assert segment_numbers(tmp_path) == [3]


def test_group_commit_fsyncs_once_for_writers_waiting_together(tmp_path: Path) -> None:
    calls: list[int] = []

    def slow_fsync(fd: int) -> None:
        calls.append(fd)
        time.sleep(0.005)  # a disk's flush: others queue up behind it

    journal = Journal(tmp_path, fsync=slow_fsync)
    journal.open(1)
    calls.clear()  # the segment header's own
    request_lock = threading.Lock()
    writes_per_thread, threads = 25, 16

    def writer(number: int) -> None:
        for i in range(writes_per_thread):
            with request_lock:
                sequence = journal.append(f"{number}-{i}".encode())
            journal.sync(sequence)
            assert journal.synced >= sequence  # answered only once its own record is flushed

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    total = writes_per_thread * threads
    assert journal.synced == journal.written == total
    assert len(calls) == journal.fsyncs < total / 2  # grouped: far fewer flushes than writes
    assert len(scan(tmp_path, 1).payloads) == total


def test_dropping_segments_syncs_the_directory_after_the_unlinks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = written(tmp_path, [b"one"])
    journal.rotate()
    synced: list[list[int]] = []
    monkeypatch.setattr(journal_module, "_sync_directory", lambda directory: synced.append(segment_numbers(directory)))
    journal.drop_before(2)
    assert synced == [[2]]  # once the old segment is gone: until then a crash could bring it back
    journal.drop_before(2)
    assert synced == [[2]]  # nothing dropped, nothing to sync
    journal.close()
