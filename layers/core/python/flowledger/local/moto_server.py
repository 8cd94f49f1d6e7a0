"""An embedded moto server whose WSGI app handles one request at a time.

moto's DynamoDB checks a condition and then mutates without a lock, and werkzeug's threaded
server runs requests concurrently, so two conditional writes can both succeed. Serialising the
whole WSGI app behind one lock makes conditional writes behave as they do in DynamoDB; the dev
server and every concurrency test use this server for that reason.

The same lock makes snapshots of the store consistent: ``snapshot`` pickles the backends while no
request is inside moto, and skips the file when no request that may write came in since the last one.
With a journal (``use_journal``, what ``flowledger serve`` does), every write is journaled before it
is answered and snapshots are forked (``journaled_store``).

``POST /_flowledger/compact`` (``COMPACT_PATH``), from this machine only, is the server's own: it is never
passed to moto nor journaled. It answers ``{"compacted": true}`` once the files hold only the store as it
is now (``LockedMotoServer.compact``): what ``flowledger.store.compaction`` asks for after an erasure.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from moto.moto_server import werkzeug_app
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

from flowledger.local import (
    moto_kms_ed25519,
    moto_reads,
    moto_responses,
    moto_s3_erasure,
    moto_state,
    moto_transactions,
)
from flowledger.local.durability import Durability
from flowledger.local.journal import FaultInjection
from flowledger.local.journaled_store import JournaledStore, Restored
from flowledger.local.moto_state import SnapshotInfo, StateCounts
from flowledger.store.compaction import COMPACT_PATH

logger = logging.getLogger("flowledger.local")
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

# moto answers every browser with "any origin" unless told not to; S3 answers only by the bucket's own
# CORS rules (the console's presigned PUT, store/provision.py). Read when each service's app is built.
werkzeug_app.DISABLE_GLOBAL_CORS = True  # type: ignore[attr-defined]

# Calls that never change moto's state. Anything not listed counts as a change: a needless snapshot
# costs a file write, a missed one loses data. DynamoDB and KMS name the call in X-Amz-Target.
_READ_ONLY_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_READ_ONLY_TARGETS = frozenset(
    {
        *(
            f"DynamoDB_20120810.{call}"
            for call in (
                "BatchGetItem",
                "DescribeContinuousBackups",
                "DescribeEndpoints",
                "DescribeTable",
                "DescribeTimeToLive",
                "GetItem",
                "ListTables",
                "ListTagsOfResource",
                "Query",
                "Scan",
                "TransactGetItems",
            )
        ),
        *(
            f"TrentService.{call}"
            for call in (
                "Decrypt",
                "DescribeKey",
                "Encrypt",
                "GenerateDataKey",
                "GenerateDataKeyWithoutPlaintext",
                "GenerateMac",
                "GenerateRandom",
                "GetKeyPolicy",
                "GetKeyRotationStatus",
                "GetPublicKey",
                "ListAliases",
                "ListKeys",
                "ListResourceTags",
                "Sign",
                "Verify",
                "VerifyMac",
            )
        ),
        # The diagnosis agent's log queries must not make the store look changed (and snapshot it).
        *(
            f"Logs_20140328.{call}"
            for call in ("DescribeLogGroups", "DescribeLogStreams", "FilterLogEvents", "GetLogEvents")
        ),
    }
)


def may_change_state(environ: dict[str, Any]) -> bool:
    """False only for requests known not to write (S3 GETs, DynamoDB, KMS and CloudWatch Logs reads)."""
    if environ.get("REQUEST_METHOD", "") in _READ_ONLY_METHODS:
        return False
    return environ.get("HTTP_X_AMZ_TARGET") not in _READ_ONLY_TARGETS


class HostCachingDispatcher(DomainDispatcherApplication):
    """moto's dispatcher, remembering which backend serves each host.

    moto finds it by listing its own package directory and stat-ing every entry on every request: a
    fifth of the serialized server's time under load. The answer depends only on the host.
    """

    MAX_HOSTS = 64  # a loopback endpoint sees a handful; past this, look up as moto does

    def __init__(self, create_app: Callable[..., Any]) -> None:
        super().__init__(create_app)
        self._backends: dict[str | None, Any] = {}

    def get_backend_for_host(self, host: str | None) -> Any:
        if host in self._backends:
            return self._backends[host]
        backend = super().get_backend_for_host(host)
        if len(self._backends) < self.MAX_HOSTS:
            self._backends[host] = backend
        return backend


def _is_compaction(environ: dict[str, Any]) -> bool:
    """A request to ``COMPACT_PATH`` on the endpoint itself (a virtual-hosted S3 key of that name is moto's)."""
    if environ.get("PATH_INFO") != COMPACT_PATH:
        return False
    host = str(environ.get("HTTP_HOST") or environ.get("SERVER_NAME") or "")
    name = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0] or host
    if name == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _from_loopback(environ: dict[str, Any]) -> bool:
    try:
        return ipaddress.ip_address(str(environ.get("REMOTE_ADDR", ""))).is_loopback
    except ValueError:
        return False


def _answer_json(start_response: Callable[..., Any], status: str, body: dict[str, Any]) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


class SerializedWSGI:
    """Runs the wrapped WSGI app, body included, under one lock, and counts requests that may write.

    With a ``store``, requests that may write go through it (journaled, answered once durable). With a
    ``compactor``, ``POST /_flowledger/compact`` from loopback runs it (``LockedMotoServer.compact``).
    """

    def __init__(self, app: WSGIApp) -> None:
        self.inner = app
        self.lock = threading.Lock()
        self.changes = 0
        self.store: JournaledStore | None = None
        self.compactor: Callable[[], object] | None = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if self.compactor is not None and _is_compaction(environ):
            return self._compact(environ, start_response)
        writes = may_change_state(environ)
        if writes and self.store is not None:
            return self.store.write(environ, start_response)
        with self.lock:
            if writes:
                self.changes += 1
            # Materialise the body inside the lock: a lazy iterable would run outside it.
            return list(self.inner(environ, start_response))

    def _compact(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        """Answer a compaction request: neither moto's nor journaled, and not a change to the store."""
        assert self.compactor is not None
        if not _from_loopback(environ):
            return _answer_json(start_response, "403 Forbidden", {"compacted": False, "error": "loopback only"})
        if environ.get("REQUEST_METHOD") != "POST":
            return _answer_json(start_response, "405 Method Not Allowed", {"compacted": False, "error": "POST only"})
        try:
            self.compactor()
        except OSError as exc:
            logger.error("could not compact the embedded store: %s", exc)
            reason = exc.strerror or str(exc)
            return _answer_json(start_response, "503 Service Unavailable", {"compacted": False, "error": reason})
        return _answer_json(start_response, "200 OK", {"compacted": True})


class LockedMotoServer:
    """moto in this process on a loopback port; ``start()`` returns once it accepts requests."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        # Built here, not in start(), so restore() before start() takes the same lock.
        self._app = SerializedWSGI(HostCachingDispatcher(create_backend_app))
        self._app.compactor = self.compact
        # Held across a whole snapshot (pickle and write), so two snapshots never write out of order.
        self._snapshot_lock = threading.Lock()
        self._saved: tuple[Path, int] | None = None  # (path, change count) of the last snapshot or restore
        self._state_file: Path | None = None  # without a journal: the state file restore() read, which compact rewrites
        self.replayed = 0  # journal records the last restore replayed

    def start(self) -> str:
        """Listen and serve; the endpoint URL."""
        self.bind()
        return self.serve()

    def bind(self) -> str:
        """Listen without answering yet: the endpoint URL is known, and connections wait until ``serve()``.

        The dev server binds, restores the store after it answers ``/health``, then serves: a client
        that connects in between waits for the restored store instead of seeing an empty one.
        """
        # One access-log line per DynamoDB call drowns the dev server's own output.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        moto_transactions.install()
        moto_s3_erasure.install()
        moto_reads.install()
        moto_responses.install()
        moto_kms_ed25519.install()
        self._server = make_server(self._host, self._port, self._app, threaded=True, request_handler=MotoRequestHandler)
        return self.endpoint_url

    def serve(self) -> str:
        """Start answering on the bound socket (in a daemon thread); the endpoint URL."""
        if self._server is None:
            raise RuntimeError("the moto server is not bound")
        # serve_forever looks for a shutdown request between polls: 0.02 s, not its 0.5 s default, bounds
        # how long stop() waits (every test server and the dev server's Ctrl-C pay it); 50 idle wakeups a
        # second cost nothing measurable.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="moto", daemon=True
        )
        self._thread.start()
        return self.endpoint_url

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the moto server is not started")
        return f"http://{self._host}:{self._server.server_port}"

    def stop(self) -> None:
        if self._server is not None:
            if self._thread is not None:  # shutdown() waits for serve_forever, forever if it never ran
                self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None
        if self._app.store is not None:
            self._app.store.close()

    def use_journal(self, directory: Path, state_file: Path, faults: FaultInjection | None = None) -> Durability:
        """Journal every write in ``directory`` and snapshot to ``state_file`` by fork; call before ``restore``.

        The durability it returns is what ``/health`` and the shutdown report.
        """
        self._app.store = JournaledStore(self._app, directory, state_file, faults)
        return self._app.store.durability

    @property
    def journaled(self) -> JournaledStore | None:
        return self._app.store

    @property
    def dirty(self) -> bool:
        """True when a request that may write came in since the last snapshot or restore."""
        return self._saved is None or self._saved[1] != self._app.changes

    def restore(self, path: Path) -> StateCounts | None:
        """Replace moto's DynamoDB, S3, KMS and Logs state with the snapshot at ``path``; None if there is none.

        Call it before ``start()`` (or while running: requests wait). Raises ``ConfigurationError``
        for a file from another moto version or a damaged one. With a journal, ``path`` must be the
        journal's state file, and the journal after the snapshot is replayed too.
        """
        store = self._app.store
        if store is not None:
            with self._snapshot_lock:
                restored: Restored = store.restore()
            self.replayed = restored.replayed
            return restored.counts
        with self._snapshot_lock, self._app.lock:
            self._state_file = path
            moto_state.remove_temporary_files(path)  # a crashed server's: every snapshot here holds the lock
            counts = moto_state.load_state(path)
            if counts is not None:
                self._saved = (path, self._app.changes)
            return counts

    def snapshot(self, path: Path, *, force: bool = False) -> SnapshotInfo:
        """Save moto's DynamoDB, S3, KMS and Logs state to ``path`` atomically, unless nothing changed.

        The backends are pickled under the request lock, so the file never holds half a request;
        the file is written after the lock is released. Without ``force``, a snapshot to the same
        path with no write in between leaves the file as it is (``written`` is False).
        """
        store = self._app.store
        if store is not None and path == store.state_file:
            with self._snapshot_lock:
                return store.snapshot(force=force)
        with self._snapshot_lock:
            return self._write_snapshot(path, force=force)

    def _write_snapshot(self, path: Path, *, force: bool) -> SnapshotInfo:
        """``snapshot`` without a journal; call it holding the snapshot lock."""
        with self._app.lock:
            changes = self._app.changes
            counts = moto_state.count_state()
            if not force and self._saved == (path, changes) and path.exists():
                return SnapshotInfo(path=path, counts=counts, written=False, size_bytes=path.stat().st_size)
            data = moto_state.dump_state()
        moto_state.write_state_file(path, data)
        self._saved = (path, changes)
        return SnapshotInfo(path=path, counts=counts, written=True, size_bytes=len(data))

    def compact(self) -> SnapshotInfo | None:
        """Leave on disk only the store as it is now (after an erasure); None when it keeps no files.

        With a journal, ``JournaledStore.compact``: a snapshot, no journal segment before it, no older
        snapshot's file. Without one (``FLOWLEDGER_JOURNAL=off``), the state file ``restore`` read is
        rewritten now and stale temporary files deleted; a server that never restored keeps nothing.
        Raises ``OSError`` when it cannot be done.
        """
        store = self._app.store
        with self._snapshot_lock:
            if store is not None:
                return store.compact()
            if self._state_file is None:
                return None
            info = self._write_snapshot(self._state_file, force=True)
            moto_state.remove_temporary_files(self._state_file)
            return info

    def state_counts(self) -> StateCounts:
        """What moto holds now (tables, items, buckets, objects, keys), read under the request lock."""
        with self._app.lock:
            return moto_state.count_state()
