"""A DuckDB connection that can read only the files it was opened for, and a deadline that interrupts it.

The connection is in memory, loads no extension, spills nothing to disk and, once opened, cannot change
its own configuration: ``enable_external_access`` is off with the named files and directories as the only
exceptions, and ``lock_configuration`` is on, so no statement run on it can widen what it reads or costs.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import duckdb

from flowledger.tabular.errors import QueryTooExpensive

# How often a passed deadline interrupts again: an interrupt that lands between two statements is lost.
_REINTERRUPT_SECONDS = 0.005


@contextmanager
def locked_connection(
    *,
    threads: int,
    memory_limit_mb: int,
    files: Sequence[Path] = (),
    directories: Sequence[Path] = (),
) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory connection that may read (and write) only ``files`` and under ``directories``, locked."""
    con = duckdb.connect(
        ":memory:",
        config={
            "threads": threads,
            "memory_limit": f"{memory_limit_mb}MB",
            "temp_directory": "",  # no spilling: a query that needs more memory fails instead of writing disk
            "autoload_known_extensions": False,
            "autoinstall_known_extensions": False,
            "allow_community_extensions": False,
        },
    )
    try:
        # allowed_* can only be set once the database runs, and must be set before access is switched off.
        con.execute("SET allowed_paths = ?", [[str(path) for path in files]])
        con.execute("SET allowed_directories = ?", [[f"{directory}/" for directory in directories]])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        yield con
    finally:
        con.close()


@contextmanager
def deadline(con: duckdb.DuckDBPyConnection, seconds: float, what: str, advice: str) -> Iterator[None]:
    """Interrupt whatever ``con`` runs once ``seconds`` have passed.

    The interruption, or running out of the connection's memory, is a QueryTooExpensive naming ``what``
    and saying what to do (``advice``).
    """
    done = threading.Event()

    def watch() -> None:
        if done.wait(seconds):
            return
        while not done.is_set():
            con.interrupt()
            done.wait(_REINTERRUPT_SECONDS)

    watcher = threading.Thread(target=watch, name="tabular-deadline", daemon=True)
    watcher.start()
    try:
        yield
    except duckdb.InterruptException as exc:
        raise QueryTooExpensive(f"{what} did not finish within {seconds:g} s; {advice}") from exc
    except duckdb.OutOfMemoryException as exc:
        raise QueryTooExpensive(f"{what} needed more memory than the engine allows; {advice}") from exc
    finally:
        done.set()
        watcher.join()


@contextmanager
def private_directory() -> Iterator[Path]:
    """A fresh directory only this process can read (mode 0700), removed with everything in it."""
    path = Path(tempfile.mkdtemp(prefix="flowledger-tabular-")).resolve()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
