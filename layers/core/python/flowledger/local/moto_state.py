"""Save the embedded moto store to one file and load it back, so ``flowledger serve`` survives a restart.

moto keeps DynamoDB tables, S3 buckets, KMS keys and CloudWatch Logs groups in process-wide
backends; this pickles the backends of the services the project uses (``PERSISTED_SERVICES``) into
one file and puts them back. Plain pickle is not enough, so our own pickler (never the global
``copyreg`` table) handles:

- KMS asymmetric keys, which hold ``cryptography`` key objects that cannot be pickled: they are
  stored as PKCS8 / SubjectPublicKeyInfo DER and loaded back;
- S3 object versions: moto's key store is a dict subclass whose ``items()`` yields only the latest
  version of each key, so default pickling would keep one version per key and drop the rest;
- DynamoDB items, whose attribute dict re-measures the item on every insert: loading them
  through it makes a restore quadratic in attributes per item.

The file is one JSON header line (format version, moto version, payload length and SHA-256) and
the pickle. A file from another moto version, another format or with a damaged payload is refused
with a ``ConfigurationError`` before anything in memory is touched.

None of these functions lock: the caller makes sure no request is inside moto (``LockedMotoServer``
snapshots and restores under its request lock).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import json
import logging
import os
import pickle
import tempfile
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import moto
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa, x448, x25519
from moto.core.base_backend import BackendDict, backend_lock
from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.models.dynamo_type import LimitedSizeDict
from moto.kms.models import kms_backends
from moto.logs.models import logs_backends
from moto.s3.models import FakeKey, s3_backends
from moto.s3.utils import _VersionedKeyStore

from flowledger.errors import ConfigurationError

FORMAT_VERSION = 1
# What provision_all creates and the application calls, and the demo incident's log groups (the
# diagnosis agent's query_logs reads them). Nothing else holds state the project depends on: the
# IAM backend moto builds by itself carries only moto's defaults.
_BACKENDS: dict[str, BackendDict[Any]] = {
    "dynamodb": dynamodb_backends,
    "s3": s3_backends,
    "kms": kms_backends,
    "logs": logs_backends,
}
PERSISTED_SERVICES = tuple(_BACKENDS)
# Every write is in the fsynced journal before it is answered, so a periodic snapshot only bounds what a
# restart replays (two minutes of writes: well inside the 100,000 the restart benchmark replays in < 5 s).
# Each one pickles the whole store in a forked child, ~2.5 s of a core at 20,000 steps: taken every 15 s
# while anything was written, as before the journal, it took a sixth of a core from the server it serves.
DEFAULT_INTERVAL_SECONDS = 120.0

_MAGIC = "flowledger-moto-state"
_HEADER_LIMIT = 4096
# moto's KMS holds RSA and EC keys; the other kinds cost nothing to cover (FFDH is left out, its
# classes warn as deprecated on mere access).
_PRIVATE_KEY_TYPES = (
    rsa.RSAPrivateKey,
    ec.EllipticCurvePrivateKey,
    ed25519.Ed25519PrivateKey,
    ed448.Ed448PrivateKey,
    dsa.DSAPrivateKey,
    x25519.X25519PrivateKey,
    x448.X448PrivateKey,
)
_PUBLIC_KEY_TYPES = (
    rsa.RSAPublicKey,
    ec.EllipticCurvePublicKey,
    ed25519.Ed25519PublicKey,
    ed448.Ed448PublicKey,
    dsa.DSAPublicKey,
    x25519.X25519PublicKey,
    x448.X448PublicKey,
)

# Dict subclasses pickled by their entries and loaded past their own __setitem__, which pickle
# would otherwise call once per entry (see the module docstring for what that breaks).
_DICT_SUBCLASSES = frozenset({_VersionedKeyStore, LimitedSizeDict})

logger = logging.getLogger("flowledger.local")


@dataclass(frozen=True)
class StateCounts:
    """How much the persisted backends hold, for the server banner."""

    tables: int = 0
    items: int = 0
    buckets: int = 0
    objects: int = 0
    keys: int = 0

    def describe(self) -> str:
        """E.g. ``9 tables (1,234 items), 2 buckets (5 objects), 1 key``."""
        return (
            f"{_plural(self.tables, 'table')} ({_plural(self.items, 'item')}), "
            f"{_plural(self.buckets, 'bucket')} ({_plural(self.objects, 'object')}), {_plural(self.keys, 'key')}"
        )


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot: where, what it holds, and whether the file was written or left as it was."""

    path: Path
    counts: StateCounts
    written: bool  # False when nothing changed since the last snapshot to this path
    size_bytes: int


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _load_private_key(der: bytes) -> Any:
    # The key was checked when moto made it and the file's checksum was checked before unpickling, so
    # the RSA consistency check (about 30 ms a key, on every restore) would find nothing new.
    return serialization.load_der_private_key(der, password=None, unsafe_skip_rsa_key_validation=True)


def _load_public_key(der: bytes) -> Any:
    return serialization.load_der_public_key(der)


def _restore_dict(store: dict[str, Any], state: tuple[dict[str, Any], dict[str, Any]]) -> None:
    entries, attributes = state
    dict.update(store, entries)  # past the subclass's __setitem__ (see _DICT_SUBCLASSES)
    store.__dict__.update(attributes)


def _reduce_dict(store: dict[str, Any]) -> Any:
    # A state setter, not constructor arguments: the dict is memoised before its entries are
    # pickled, so anything in them that refers back to it still resolves.
    state = (dict(dict.items(store)), dict(vars(store)))
    return (type(store), (), state, None, None, _restore_dict)


def _reduce_private_key(key: Any) -> Any:
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return (_load_private_key, (der,))


def _reduce_public_key(key: Any) -> Any:
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return (_load_public_key, (der,))


def _reducer_for(kind: type) -> Callable[[Any], Any] | None:
    if kind in _DICT_SUBCLASSES:
        return _reduce_dict
    # issubclass, not a table of concrete classes: cryptography's key classes live in its private
    # Rust bindings and are only registered with these public ABCs.
    if issubclass(kind, _PRIVATE_KEY_TYPES):
        return _reduce_private_key
    if issubclass(kind, _PUBLIC_KEY_TYPES):
        return _reduce_public_key
    return None


class _StatePickler(pickle.Pickler):
    """A pickler for moto backends; its reducers apply to this pickler only, never to ``copyreg``."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        # One answer per type: the hook runs for every object, and ABC checks on each one more than
        # doubled the time to pickle 20,000 items.
        self._reducers: dict[type, Callable[[Any], Any] | None] = {}

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        try:
            reducer = self._reducers[kind]
        except KeyError:
            reducer = self._reducers[kind] = _reducer_for(kind)
        return NotImplemented if reducer is None else reducer(obj)


def pickle_moto_objects(value: Any) -> bytes:
    """``value`` (moto objects among others) pickled as a snapshot pickles them (the journal's records)."""
    buffer = io.BytesIO()
    _StatePickler(buffer).dump(value)
    return buffer.getvalue()


def dump_state(journal_from: int | None = None) -> bytes:
    """The persisted backends as the bytes of a state file (header line and pickle).

    ``journal_from``: the first journal segment this state does not cover (restore replays from it).
    """
    state = {
        "backends": {
            service: {account: dict(regions.items()) for account, regions in backends.items()}
            for service, backends in _BACKENDS.items()
        },
        # Which account owns each bucket name lives beside the S3 backends, not in them.
        "s3_bucket_accounts": dict(s3_backends.bucket_accounts),
    }
    buffer = io.BytesIO()
    _StatePickler(buffer).dump(state)
    payload = buffer.getvalue()
    header = {
        "magic": _MAGIC,
        "format": FORMAT_VERSION,
        "moto": moto.__version__,
        "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        "journal_from": journal_from,
    }
    return json.dumps(header).encode() + b"\n" + payload


def write_state_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (mode 0600): a crash leaves the old file or the new one."""
    # mkstemp creates the file 0600; in the same directory so os.replace is a rename, never a copy.
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    # The rename itself is durable only once the directory is synced.
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def remove_temporary_files(path: Path, keep: Collection[Path] = ()) -> int:
    """Delete the temporary files of snapshots to ``path`` not in ``keep``; how many were deleted.

    Both ``write_state_file`` and a forked snapshot (``fork_snapshot``) write ``.<name>.<...>.tmp`` beside
    ``path`` and rename it over ``path`` when done. One left behind (a crash, or a killed server's forked
    child that went on writing) holds a whole copy of the store as it was. The removals are made durable.
    """
    kept = {Path(file) for file in keep}
    removed = 0
    for leftover in path.parent.glob(f".{path.name}.*.tmp"):
        if leftover not in kept:
            leftover.unlink(missing_ok=True)
            removed += 1
    if removed:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    return removed


def read_header(raw: bytes) -> Any:
    """A file's JSON header line as read (None when it is not JSON)."""
    try:
        return json.loads(raw)
    except ValueError:
        return None


def header_problem(header: Any, magic: str, format_version: int, kind: str, written: str) -> str | None:
    """What keeps a state file's or journal segment's header from being read here, or None.

    Not ours (``kind`` names what it should be), another format, or another moto version: pickles of
    moto's objects load only into the moto that made them.
    """
    if not isinstance(header, dict) or header.get("magic") != magic:
        return f"it is not {kind}"
    if header.get("format") != format_version:
        return f"it has format {header.get('format')!r}, this version reads format {format_version}"
    if header.get("moto") != moto.__version__:
        return f"it was {written} by moto {header.get('moto')}, this is moto {moto.__version__}"
    return None


def _refuse(path: Path, problem: str) -> ConfigurationError:
    return ConfigurationError(
        f"cannot restore the embedded AWS state from {path}: {problem}; "
        "start with --reset to discard it and begin empty"
    )


def _checked_payload(path: Path, data: bytes) -> bytes:
    end = data.find(b"\n", 0, _HEADER_LIMIT)
    if end < 0:
        raise _refuse(path, "it is not a Flowledger state file (no header)")
    header = read_header(data[:end])
    problem = header_problem(header, _MAGIC, FORMAT_VERSION, "a Flowledger state file (bad header)", "saved")
    if problem is not None:
        raise _refuse(path, problem)
    payload = data[end + 1 :]
    if len(payload) != header.get("payload_bytes"):
        raise _refuse(path, f"it is truncated ({len(payload):,} of {header.get('payload_bytes')} payload bytes)")
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise _refuse(path, "it is corrupt (checksum mismatch)")
    return payload


def journal_from(path: Path) -> int | None:
    """The first journal segment the state file at ``path`` does not cover; None if it names none.

    Read from the header line alone; call it after ``load_state`` checked the file.
    """
    try:
        with path.open("rb") as handle:
            header = json.loads(handle.readline(_HEADER_LIMIT))
    except (OSError, ValueError):
        return None
    value = header.get("journal_from") if isinstance(header, dict) else None
    return value if isinstance(value, int) else None


def reset_state() -> None:
    """Empty the persisted backends, as a fresh moto would be."""
    with backend_lock:
        for backends in _BACKENDS.values():
            for regions in backends.values():
                # S3's reset also closes the temporary files holding object bodies.
                regions.reset()
            backends.clear()
        s3_backends.bucket_accounts.clear()


def _unpickle(payload: bytes) -> Any:
    # The cyclic collector would run over and over while every item is rebuilt, finding nothing:
    # turning it off for the load halves the time a large store takes to restore.
    enabled = gc.isenabled()
    gc.disable()
    try:
        # Our own 0600 file in the developer's data dir, checksummed; never input from a request.
        return pickle.loads(payload)  # noqa: S301
    finally:
        if enabled:
            gc.enable()


def load_state(path: Path) -> StateCounts | None:
    """Make the persisted backends hold exactly what ``path`` holds; None when there is no such file.

    The file is checked (header, versions, checksum) before anything is cleared; what was in
    memory is then dropped, so the result holds nothing the file does not. Raises
    ``ConfigurationError`` for a file that cannot be restored (the backends are left empty if it
    failed past the checks).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refuse(path, exc.strerror or str(exc)) from None
    payload = _checked_payload(path, data)
    # Cleared before loading: S3's reset closes the body of every object moto ever created,
    # which would include the ones just unpickled.
    reset_state()
    try:
        state = _unpickle(payload)
        with backend_lock:
            for service, accounts in state["backends"].items():
                backends = _BACKENDS[service]
                for account, regions in accounts.items():
                    account_backends = backends[account]  # registers the account with moto
                    for region, backend in regions.items():
                        # dict.__setitem__: the backend was built already, no region check needed.
                        dict.__setitem__(account_backends, region, backend)
            s3_backends.bucket_accounts.update(state["s3_bucket_accounts"])
    except Exception as exc:
        reset_state()  # nothing half-loaded stays behind
        raise _refuse(path, f"it could not be loaded ({type(exc).__name__}: {exc})") from None
    return count_state()


def _region_backends(service: str) -> list[Any]:
    return [backend for regions in _BACKENDS[service].values() for backend in regions.values()]


def count_state() -> StateCounts:
    """Tables, items, buckets, current objects and KMS keys the persisted backends hold now."""
    tables = items = buckets = objects = keys = 0
    for dynamodb in _region_backends("dynamodb"):
        tables += len(dynamodb.tables)
        items += sum(len(table) for table in dynamodb.tables.values())
    for s3 in _region_backends("s3"):
        buckets += len(s3.buckets)
        # values() yields each key's latest version; a delete marker is not an object.
        objects += sum(1 for bucket in s3.buckets.values() for key in bucket.keys.values() if isinstance(key, FakeKey))
    for kms in _region_backends("kms"):
        keys += len(kms.keys)
    return StateCounts(tables=tables, items=items, buckets=buckets, objects=objects, keys=keys)


class Snapshotter(Protocol):
    """What ``PeriodicSnapshots`` needs of a server (``LockedMotoServer`` is one)."""

    def snapshot(self, path: Path, *, force: bool = False) -> SnapshotInfo: ...


class Durable(Protocol):
    """Whether the store can save now (``durability.Durability`` is one)."""

    @property
    def durable(self) -> bool: ...


class PeriodicSnapshots:
    """Snapshots the server every ``interval_seconds`` when something changed, and once more on stop.

    With ``durability``, while the store cannot save it tries every ``RETRY_SECONDS`` instead: the
    first snapshot that succeeds makes it durable again.
    """

    RETRY_SECONDS = 1.0

    def __init__(
        self,
        server: Snapshotter,
        path: Path,
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        durability: Durable | None = None,
    ) -> None:
        self._server = server
        self._path = path
        self._interval = interval_seconds
        self._durability = durability
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: SnapshotInfo | None = None
        self.final_error: str | None = None  # why the snapshot on stop failed

    def start(self) -> None:
        """Start the daemon thread; it sleeps first (a restore or a fresh provision just happened)."""
        self._thread = threading.Thread(target=self._loop, name="moto-snapshots", daemon=True)
        self._thread.start()

    def _failing(self) -> bool:
        return self._durability is not None and not self._durability.durable

    def _loop(self) -> None:
        # Woken every RETRY_SECONDS when the store can fail, so a failure is retried within a second.
        tick = min(self._interval, self.RETRY_SECONDS) if self._durability is not None else self._interval
        due = time.monotonic() + self._interval
        while not self._stop.wait(tick):
            failing = self._failing()
            if not failing and time.monotonic() < due:
                continue
            due = time.monotonic() + self._interval
            try:
                self.last = self._server.snapshot(self._path, force=failing)
            except Exception as exc:
                # A full disk must not stop the next attempt; the state is still in memory. While the
                # store is known not durable, that was logged once already: no line a second.
                if not failing:
                    logger.warning("could not save the embedded AWS state to %s: %s", self._path, exc)

    def stop(self) -> SnapshotInfo | None:
        """Stop the thread and take the final snapshot; None (and an error logged) if it failed.

        It does not raise, so shutting the rest of the server down still happens.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)  # lets a snapshot in progress finish
            self._thread = None
        try:
            info = self._server.snapshot(self._path, force=self._failing())
        except Exception as exc:
            self.final_error = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if isinstance(exc, OSError):  # a full disk, say: its reason is the whole story
                logger.error("could not save the embedded AWS state to %s on shutdown: %s", self._path, exc)
            else:
                logger.exception("could not save the embedded AWS state to %s on shutdown", self._path)
            return None
        self.last = info
        return info
