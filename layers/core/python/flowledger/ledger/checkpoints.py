"""Checkpoints: every chain head folded into one Merkle root, stored where it cannot be rewritten.

Each checkpoint also carries the hash of the one before it, so the checkpoints form a chain of
their own. In AWS they live in an S3 bucket with Object Lock in compliance mode.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flowledger.ledger.chain import Position
from flowledger.ledger.events import GENESIS_HASH, HexHash, canonical, sha256_hex, timestamp
from flowledger.ledger.merkle import inclusion_path, merkle_root

PREFIX = "checkpoints/"
JSON, NOTE = ".json", ".note"  # a checkpoint, and the same checkpoint as a signed note
COSIGNATURES = ".cosignatures"  # the witnesses' cosignature lines of its note (ledger/witnessing.py)
RECENT_DAYS = 8  # how far back the checkpoint job looks a day at a time for the last checkpoint


class ChainHead(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    chain_id: str
    seq: int = Field(ge=1)
    hash: HexHash
    # The RFC 6962 root of the chain's event hashes 1..seq (ledger/tiles.py): what consistency proofs
    # and witnesses check. Absent from checkpoints taken before the chains had trees.
    tree_root: HexHash | None = None

    def leaf(self) -> bytes:
        """The Merkle leaf of this head: its canonical JSON (without ``tree_root`` when it has none)."""
        return canonical(self.model_dump(exclude_none=True))

    @property
    def position(self) -> Position:
        return Position(self.seq, self.hash)


class Checkpoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    checkpoint_id: str
    created_at: str
    heads: list[ChainHead]  # sorted by chain_id; chains with no event yet are absent
    root: HexHash
    prev_checkpoint_hash: HexHash
    hash: HexHash

    @model_validator(mode="after")
    def _one_head_a_chain_in_order(self) -> Checkpoint:
        # Two heads of one chain would let two readers (one taking the first, one the last) see two histories
        # under one signature: a checkpoint names each chain once, in chain id order, as build_checkpoint writes.
        ids = [head.chain_id for head in self.heads]
        if ids != sorted(set(ids)):
            raise ValueError("a checkpoint's heads name each chain once, in chain id order")
        return self

    @property
    def size(self) -> int:
        """Every event it covers: its heads' seqs summed (the size a checkpoint note and a witness speak of)."""
        return sum(head.seq for head in self.heads)

    def recomputed_hash(self) -> str:
        return sha256_hex(canonical(self.model_dump(exclude={"hash"}, exclude_none=True)))

    def to_bytes(self) -> bytes:
        """Its stored form: canonical JSON, a head without a tree root written as it always was."""
        return canonical(self.model_dump(exclude_none=True))

    def recomputed_root(self) -> str:
        return merkle_root([head.leaf() for head in self.heads]).hex()

    def head_of(self, chain_id: str) -> ChainHead | None:
        """The chain's head, found by bisection (the heads are in chain id order): O(log n), as a verifier asks
        it of every chain of every checkpoint."""
        index = bisect_left(self.heads, chain_id, key=lambda head: head.chain_id)
        found = self.heads[index] if index < len(self.heads) else None
        return found if found is not None and found.chain_id == chain_id else None

    def path_for(self, chain_id: str) -> tuple[int, list[str]]:
        """The leaf index of a chain's head and its Merkle path (hex)."""
        index = next(i for i, head in enumerate(self.heads) if head.chain_id == chain_id)
        return index, [node.hex() for node in inclusion_path(index, [head.leaf() for head in self.heads])]


def build_checkpoint(heads: Sequence[ChainHead], previous: Checkpoint | None, at: datetime) -> Checkpoint:
    """The next checkpoint over ``heads``, linked to ``previous``."""
    ordered = sorted(heads, key=lambda head: head.chain_id)
    created = timestamp(at)
    fields: dict[str, Any] = {
        "checkpoint_id": checkpoint_id_at(created),
        "created_at": created,
        "heads": [head.model_dump(exclude_none=True) for head in ordered],
        "root": merkle_root([head.leaf() for head in ordered]).hex(),
        "prev_checkpoint_hash": previous.hash if previous else GENESIS_HASH,
    }
    return Checkpoint(**fields, hash=sha256_hex(canonical(fields)))


def checkpoint_id_at(created: str) -> str:
    """The id of a checkpoint taken at ``created`` (a ``timestamp``): the same text, sortable as a key."""
    return created.replace("-", "").replace(":", "").replace(".", "")


class CheckpointStore:
    """Checkpoints as one JSON object each, keyed so that key order is time order, each with its signed note."""

    def __init__(self, s3: Any, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket
        self.missing: type[Exception] = s3.exceptions.NoSuchKey  # what ``get`` raises for an unknown id

    def put(self, checkpoint: Checkpoint) -> None:
        self._s3.put_object(
            Bucket=self._bucket,
            Key=f"{PREFIX}{checkpoint.checkpoint_id}{JSON}",
            Body=checkpoint.to_bytes(),
            ContentType="application/json",
        )

    def put_note(self, checkpoint_id: str, note: str) -> None:
        """The checkpoint's signed note (``checkpoint_notes``), beside it and as locked."""
        self._s3.put_object(
            Bucket=self._bucket,
            Key=f"{PREFIX}{checkpoint_id}{NOTE}",
            Body=note.encode(),
            ContentType="text/plain; charset=utf-8",
        )

    def put_cosignatures(self, checkpoint_id: str, lines: list[str]) -> None:
        """The witnesses' cosignature lines of the checkpoint's note (each verified), beside it.

        A later run that gathers more writes the whole set again: a new version, the older ones kept.
        """
        self._s3.put_object(
            Bucket=self._bucket,
            Key=f"{PREFIX}{checkpoint_id}{COSIGNATURES}",
            Body="".join(lines).encode(),
            ContentType="text/plain; charset=utf-8",
        )

    def cosignatures(self, checkpoint_id: str) -> list[str]:
        """The cosignature lines kept for the checkpoint, each ending with a newline; none before any.

        Read from every version of the object, oldest first: two checkpoint-job runs that overlap each write
        what they read plus what they gathered, so the newest version alone can miss the other's; the locked
        bucket keeps every version, and their union drops nobody's.
        """
        key = f"{PREFIX}{checkpoint_id}{COSIGNATURES}"
        versions = [
            version
            for page in self._s3.get_paginator("list_object_versions").paginate(Bucket=self._bucket, Prefix=key)
            for version in page.get("Versions", [])
            if version["Key"] == key
        ]
        lines: dict[str, None] = {}
        for version in reversed(versions):  # S3 lists a key's versions newest first
            body = self._s3.get_object(Bucket=self._bucket, Key=key, VersionId=version["VersionId"])["Body"].read()
            lines |= dict.fromkeys(line + "\n" for line in body.decode().splitlines() if line)
        return list(lines)

    def note(self, checkpoint_id: str) -> str | None:
        """The checkpoint's signed note, its witnesses' cosignatures appended; None before notes were signed."""
        body = self._read(f"{checkpoint_id}{NOTE}")
        if body is None:
            return None
        lines = [line for line in self.cosignatures(checkpoint_id) if line not in body]
        return body + "".join(lines) if lines and body.endswith("\n") else body

    def _read(self, name: str) -> str | None:
        try:
            body = self._s3.get_object(Bucket=self._bucket, Key=f"{PREFIX}{name}")["Body"].read()
        except self.missing:
            return None
        return str(body.decode())

    def ids(self, prefix: str = "", *, start_after: str = "") -> list[str]:
        """Every checkpoint id (that starts with ``prefix``, and sorts after ``start_after``), oldest first."""
        return sorted(self.iter_ids(prefix, start_after=start_after))

    def iter_ids(self, prefix: str = "", *, start_after: str = "") -> Iterator[str]:
        """``ids`` a listing page at a time (S3 lists keys in order): stop early and the rest is never listed."""
        listing: dict[str, str] = {"Bucket": self._bucket, "Prefix": PREFIX + prefix}
        if start_after:
            listing["StartAfter"] = PREFIX + start_after
        for page in self._s3.get_paginator("list_objects_v2").paginate(**listing):
            keys = [obj["Key"] for obj in page.get("Contents", [])]
            yield from (key[len(PREFIX) : -len(JSON)] for key in keys if key.endswith(JSON))

    def get(self, checkpoint_id: str) -> Checkpoint:
        body = self._s3.get_object(Bucket=self._bucket, Key=f"{PREFIX}{checkpoint_id}{JSON}")["Body"].read()
        return Checkpoint.model_validate(json.loads(body))

    def recent_ids(self, now: datetime, days: int = RECENT_DAYS) -> list[str]:
        """The ids of the newest day with any, looking back ``days`` days from ``now``; else every id.

        An id starts with its UTC date, so a day is one prefix: the checkpoint job reads a day's listing
        (at most 1,440 checkpoints at a 1-minute cadence) rather than every checkpoint ever taken.
        """
        # Anything dated after today first (a clock that ran ahead once): it sorts last, so it is the latest.
        tomorrow = (now + timedelta(days=1)).astimezone(UTC).strftime("%Y%m%d")
        ahead = self.ids(start_after=tomorrow)
        for back in range(days):
            found = self.ids((now - timedelta(days=back)).astimezone(UTC).strftime("%Y%m%d"))
            if found or ahead:
                return found + ahead
        return self.ids()

    def latest_id(self, now: datetime | None = None) -> str | None:
        """The newest checkpoint's id (from ``recent_ids``, not a listing of every checkpoint), None before any."""
        recent = self.recent_ids(now or datetime.now(UTC))
        return recent[-1] if recent else None

    def latest(self) -> Checkpoint | None:
        latest = self.latest_id()
        return self.get(latest) if latest else None
