"""Versioned matrix snapshots of a trigger family's active pathways, published to S3.

One object per version: a magic line, a 4-byte header length, a JSON header (ids, refs, hit
counts, family aggregates) and the float32 matrix, row-major, little-endian, unit-length rows
(zeros for a pathway without a vector of the snapshot's model). A small ``latest.json`` beside the
versions names the current one, so a matcher checks one tiny object to learn whether to reload.
Each process caches pointers for ``POINTER_TTL_SECONDS``; a publish refreshes its own entry.
"""

from __future__ import annotations

import json
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowledger.pathways.radar import HIGH_HITS
from flowledger.pathways.store import pack_vector, unit, unpack_vector
from flowledger.services import Services
from flowledger.store.object_versions import delete_every_version

if TYPE_CHECKING:  # numpy loads with the first snapshot, not with the function
    import numpy as np

MAGIC = b"FLPS1\n"
POINTER_TTL_SECONDS = 30.0
_POINTERS: dict[tuple[str, str, str], tuple[dict[str, Any] | None, float]] = {}  # (bucket, model, family)
_POINTERS_LOCK = threading.Lock()
PREFIX = "pathways/snapshots"


@dataclass
class SnapshotRows:
    """What a snapshot holds, before encoding (plain Python: the backfill job builds it)."""

    model: str
    trigger_type: str
    ids: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    hit_counts: list[int] = field(default_factory=list)
    last_activity: list[str] = field(default_factory=list)  # for the pointer's family aggregates
    vectors: list[bytes | None] = field(default_factory=list)  # packed float32, or None

    @property
    def dims(self) -> int:
        """The model's width, read off the first vector (0 when the family has none)."""
        return next((len(vector) // 4 for vector in self.vectors if vector is not None), 0)


def snapshot_key(model: str, trigger_type: str, version: str) -> str:
    return f"{PREFIX}/{model}/{trigger_type}/{version}.bin"


def pointer_key(model: str, trigger_type: str) -> str:
    return f"{PREFIX}/{model}/{trigger_type}/latest.json"


def encode(rows: SnapshotRows, version: str, created_at: str) -> bytes:
    """The snapshot object's bytes."""
    header = {
        "version": version,
        "created_at": created_at,
        "model": rows.model,
        "trigger_type": rows.trigger_type,
        "dims": rows.dims,
        "ids": rows.ids,
        "refs": rows.refs,
        "hit_counts": rows.hit_counts,
        "embedded": [vector is not None for vector in rows.vectors],
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    # Pad the header so the matrix starts on a 64-byte boundary: numpy's fast product needs aligned rows.
    head += b" " * (-(len(MAGIC) + 4 + len(head)) % 64)
    zeros = bytes(4 * rows.dims)
    body = b"".join(_unit(vector) if vector is not None else zeros for vector in rows.vectors)
    return MAGIC + struct.pack("<I", len(head)) + head + body


def _unit(packed: bytes) -> bytes:
    return pack_vector(unit(unpack_vector(packed)))


def decode(blob: bytes) -> tuple[dict[str, Any], np.ndarray[Any, Any]]:
    """The header and the matrix (a read-only view over ``blob``, no copy)."""
    import numpy as np

    if not blob.startswith(MAGIC):
        raise ValueError("not a pathway snapshot")
    (length,) = struct.unpack_from("<I", blob, len(MAGIC))
    start = len(MAGIC) + 4
    header = json.loads(blob[start : start + length])
    count, dims = len(header["ids"]), header["dims"]
    matrix = np.frombuffer(blob, dtype="<f4", count=count * dims, offset=start + length).reshape(count, dims)
    return header, matrix


class SnapshotStore:
    """Snapshots in the artifacts bucket."""

    def __init__(self, s3: Any, bucket: str) -> None:
        self._s3 = s3
        self.bucket = bucket

    @classmethod
    def of(cls, services: Services) -> SnapshotStore:
        """The deployment's artifacts bucket."""
        return cls(services.aws.s3, services.aws.bucket_name("artifacts"))

    def publish(self, rows: SnapshotRows, version: str, created_at: str) -> str:
        """Write a version, then point ``latest.json`` at it (with the family's aggregates for the radar)."""
        key = snapshot_key(rows.model, rows.trigger_type, version)
        self._s3.put_object(Bucket=self.bucket, Key=key, Body=encode(rows, version, created_at))
        pointer = {
            "version": version,
            "key": key,
            "created_at": created_at,
            "count": len(rows.ids),  # every pathway in a snapshot is active
            "high_hits": sum(1 for hits in rows.hit_counts if hits >= HIGH_HITS),
            "latest_activity": max(rows.last_activity, default=None),
        }
        self._s3.put_object(
            Bucket=self.bucket,
            Key=pointer_key(rows.model, rows.trigger_type),
            Body=json.dumps(pointer).encode(),
            ContentType="application/json",
        )
        self._remember(rows.model, rows.trigger_type, pointer)
        return key

    def pointer(self, model: str, trigger_type: str) -> dict[str, Any] | None:
        """The family's current pointer (None before its first snapshot), read at most every TTL."""
        with _POINTERS_LOCK:
            cached = _POINTERS.get((self.bucket, model, trigger_type))
        if cached is not None and time.monotonic() - cached[1] < POINTER_TTL_SECONDS:
            return cached[0]
        try:
            body = self._s3.get_object(Bucket=self.bucket, Key=pointer_key(model, trigger_type))["Body"].read()
        except self._s3.exceptions.NoSuchKey:
            return self._remember(model, trigger_type, None)
        return self._remember(model, trigger_type, json.loads(body))

    def _remember(self, model: str, trigger_type: str, pointer: dict[str, Any] | None) -> dict[str, Any] | None:
        with _POINTERS_LOCK:
            _POINTERS[(self.bucket, model, trigger_type)] = (pointer, time.monotonic())
        return pointer

    def purge_family(self, trigger_type: str) -> int:
        """Delete every version of every snapshot and pointer of a family, for every model: how many went.

        Erasure calls it when it drops a pathway of the family, so no snapshot keeps the pathway's reference;
        the family has no snapshot until the backfill job publishes the next (within the hour).
        """
        paginator = self._s3.get_paginator("list_object_versions")
        models = [
            common["Prefix"]
            for page in paginator.paginate(Bucket=self.bucket, Prefix=f"{PREFIX}/", Delimiter="/")
            for common in page.get("CommonPrefixes", [])
        ]
        purged = sum(delete_every_version(self._s3, self.bucket, f"{model}{trigger_type}/") for model in models)
        with _POINTERS_LOCK:
            for model in models:
                _POINTERS.pop((self.bucket, model.removeprefix(f"{PREFIX}/").rstrip("/"), trigger_type), None)
        return purged

    def read(self, key: str) -> bytes:
        body: bytes = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return body
