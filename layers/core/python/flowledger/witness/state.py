"""Where a witness keeps the last checkpoint it cosigned per log: a JSON file per origin, or a DynamoDB item.

Both change a log's checkpoint only by a compare-and-swap on the one the witness read, so two submissions
racing from the same checkpoint cannot both advance it: the loser is told the witness moved (409).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any, Protocol

from flowledger.ledger.checkpoints import Checkpoint


class WitnessState(Protocol):
    def read(self, origin: str) -> Checkpoint | None:
        """The last checkpoint cosigned for ``origin``, None before any."""
        ...

    def swap(self, origin: str, expected: Checkpoint | None, new: Checkpoint) -> bool:
        """Store ``new`` for ``origin`` if ``expected`` is still what is stored; False when it is not."""
        ...


def _same(stored: Checkpoint | None, expected: Checkpoint | None) -> bool:
    return (stored.hash if stored else None) == (expected.hash if expected else None)


class FileState:
    """One ``<origin, percent-encoded>.json`` per log in a folder; a lock file per log serialises the swaps
    of every thread and process, and ``os.replace`` makes each write whole."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, origin: str, suffix: str) -> Path:
        return self._folder / (urllib.parse.quote(origin, safe="") + suffix)

    def read(self, origin: str) -> Checkpoint | None:
        try:
            raw = self._path(origin, ".json").read_bytes()
        except FileNotFoundError:
            return None
        return Checkpoint.model_validate(json.loads(raw))

    def swap(self, origin: str, expected: Checkpoint | None, new: Checkpoint) -> bool:
        with open(self._path(origin, ".lock"), "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes
            if not _same(self.read(origin), expected):
                return False
            fd, temporary = tempfile.mkstemp(dir=self._folder, prefix=".witness-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(new.to_bytes())
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(temporary, self._path(origin, ".json"))
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        return True


class DynamoState:
    """One item per log (key ``origin``) holding the checkpoint; a conditional put on its hash is the swap."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._dynamodb = dynamodb
        self._table = table

    def read(self, origin: str) -> Checkpoint | None:
        item = self._dynamodb.get_item(TableName=self._table, Key={"origin": {"S": origin}}, ConsistentRead=True)
        if "Item" not in item:
            return None
        return Checkpoint.model_validate(json.loads(item["Item"]["checkpoint"]["S"]))

    def swap(self, origin: str, expected: Checkpoint | None, new: Checkpoint) -> bool:
        item = {
            "origin": {"S": origin},
            "checkpoint_hash": {"S": new.hash},
            "checkpoint": {"S": new.to_bytes().decode()},
        }
        if expected is None:
            condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(origin)"}
        else:
            condition = {
                "ConditionExpression": "checkpoint_hash = :expected",
                "ExpressionAttributeValues": {":expected": {"S": expected.hash}},
            }
        try:
            self._dynamodb.put_item(TableName=self._table, Item=item, **condition)
        except self._dynamodb.exceptions.ConditionalCheckFailedException:
            return False
        return True
