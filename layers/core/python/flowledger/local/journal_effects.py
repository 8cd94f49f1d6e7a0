"""What a request to the embedded store changed, as a journal record, and how to apply it again.

Three ways, by request:

- DynamoDB item writes (``ITEM_WRITES``) are journaled as their *effect*: after moto answered, the
  item now stored under each key the request names (or none). Replay puts those items straight into
  moto's tables: no HTTP, no expression evaluation, about 20 µs a record, so a restart replays
  100,000 writes in seconds. moto derives indexes from the items on every read, so there is nothing
  else to update. Items are pickled by the snapshot's own pickler (exact binary and number values).
- Requests whose effect moto makes at random, so a second run would differ (``needs_snapshot``: a
  new KMS key's material, a multipart upload's id, a batch delete's markers, ...), are not journaled
  at all: the server takes a snapshot before answering them.
- Anything else (creating a table or bucket, S3 puts and deletes, log events) is journaled as the
  raw request and replayed through moto's WSGI app. S3 gives each new version a random id; the id the
  answer carried is recorded and put back on replay, since the application checks versions by id.
  Timestamps moto takes from the clock (a table's creation time, a log event's ingestion time) are
  the replay's own.
"""

from __future__ import annotations

import copy
import io
import json
import pickle
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import unquote

from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table
from moto.iam.models import get_account_id_from
from moto.s3.models import s3_backends

from flowledger.local.moto_state import pickle_moto_objects
from flowledger.local.moto_transactions import put_stored

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
ItemKey = tuple[str, DynamoType, DynamoType | None]  # table name, hash key, range key
_DYNAMODB = "DynamoDB_20120810."
ITEM_WRITES = frozenset(
    _DYNAMODB + call for call in ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")
)
# Calls whose result moto makes at random (ids, key material) or whose effect cannot be read back from
# the request (PartiQL statements): a snapshot records them instead.
_SNAPSHOT_TARGETS = frozenset(
    {
        *(f"TrentService.{call}" for call in ("CreateKey", "CreateGrant", "ReplicateKey", "ImportKeyMaterial")),
        *(
            _DYNAMODB + call
            for call in (
                "BatchExecuteStatement",
                "CreateBackup",
                "ExecuteStatement",
                "ExecuteTransaction",
                "RestoreTableFromBackup",
                "RestoreTableToPointInTime",
            )
        ),
        "Logs_20140328.CreateExportTask",
    }
)
# S3 POSTs with these query parameters: a new multipart upload id, or delete markers with random ids.
_SNAPSHOT_S3_QUERIES = ("uploads", "delete")
_VERSION_HEADER = "x-amz-version-id"


def needs_snapshot(environ: dict[str, Any]) -> bool:
    """Whether a write's effect cannot be replayed exactly, so it must be saved by a snapshot."""
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target is not None:
        return target in _SNAPSHOT_TARGETS
    if environ.get("REQUEST_METHOD") != "POST":
        return False
    names = {part.split("=", 1)[0] for part in environ.get("QUERY_STRING", "").split("&")}
    return any(name in names for name in _SNAPSHOT_S3_QUERIES)


@dataclass
class ItemWrite:
    """The items one DynamoDB item write names, and what they held before it (for a rollback)."""

    account: str
    region: str
    keys: list[ItemKey]
    before: list[Item | None] = field(default_factory=list)


def item_write(environ: dict[str, Any], body: bytes) -> ItemWrite | None:
    """The keys a DynamoDB item write names, their items read now (call it before moto runs it).

    None for any other request, or one moto will refuse before writing (a malformed body).
    """
    if environ.get("HTTP_X_AMZ_TARGET") not in ITEM_WRITES:
        return None
    try:
        request = json.loads(body)
    except ValueError:
        return None
    region, access_key = _credential_scope(environ.get("HTTP_AUTHORIZATION", ""))
    backend = dynamodb_backends[get_account_id_from(access_key)][region]
    write = ItemWrite(account=backend.account_id, region=region, keys=[])
    for table_name, key in _named_keys(request):
        table = backend.tables.get(table_name)
        parsed = _parse_key(table, key) if table is not None else None
        if parsed is not None and parsed not in write.keys:
            write.keys.append(parsed)
            write.before.append(copy.deepcopy(_stored(backend, parsed)))
    return write


def _credential_scope(authorization: str) -> tuple[str, str]:
    """(region, access key id) from a SigV4 ``Authorization`` header."""
    marker = "Credential="
    start = authorization.find(marker)
    if start < 0:
        return "us-east-1", ""
    parts = authorization[start + len(marker) :].split(",")[0].split("/")
    return (parts[2] if len(parts) > 2 else "us-east-1"), parts[0]


def _named_keys(request: dict[str, Any]) -> Iterable[tuple[str, dict[str, Any]]]:
    if "RequestItems" in request:  # BatchWriteItem
        for table_name, entries in request["RequestItems"].items():
            for entry in entries:
                for kind, operation in entry.items():
                    yield table_name, operation.get("Item" if kind == "PutRequest" else "Key") or {}
    elif "TransactItems" in request:
        for entry in request["TransactItems"]:
            for kind, operation in entry.items():
                if kind != "ConditionCheck":
                    yield operation.get("TableName", ""), operation.get("Item" if kind == "Put" else "Key") or {}
    else:  # PutItem, UpdateItem, DeleteItem
        yield request.get("TableName", ""), request.get("Item") or request.get("Key") or {}


def _parse_key(table: Table, key: dict[str, Any]) -> ItemKey | None:
    try:
        hash_value = DynamoType(key[table.hash_key_attr])
        range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    except (KeyError, TypeError, AttributeError):
        return None  # moto refuses the key itself
    return table.name, hash_value, range_value


def _stored(backend: Any, key: ItemKey) -> Item | None:
    table_name, hash_value, range_value = key
    table = backend.tables.get(table_name)
    if table is None:
        return None
    partition: Any = table.items.get(hash_value)
    if range_value is None or partition is None:
        return cast(Item | None, partition)
    return cast(Item | None, partition.get(range_value))


def _put(backend: Any, key: ItemKey, item: Item | None) -> None:
    table_name, hash_value, range_value = key
    put_stored(backend.tables[table_name], hash_value, range_value, item)


def rollback(write: ItemWrite) -> None:
    """Put back what the write's items held before it (its journal record could not be written)."""
    backend = dynamodb_backends[write.account][write.region]
    for key, item in reversed(list(zip(write.keys, write.before, strict=True))):
        _put(backend, key, item)


def item_record(write: ItemWrite) -> bytes:
    """The journal record of an item write moto applied: each named key and the item stored there now."""
    backend = dynamodb_backends[write.account][write.region]
    after = [(key, _stored(backend, key)) for key in write.keys]
    return pickle_moto_objects(("items", write.account, write.region, after))


def request_record(environ: dict[str, Any], body: bytes, headers: list[tuple[str, str]]) -> bytes:
    """The journal record of any other write moto applied: the request, and the S3 version id it made."""
    version = next((value for name, value in headers if name.lower() == _VERSION_HEADER), None)
    request = {name: value for name, value in environ.items() if isinstance(value, str)}
    return pickle_moto_objects(("request", request, body, version))


def apply(payload: bytes, app: WSGIApp, backends: dict[tuple[str, str], Any] | None = None) -> bool:
    """Apply one journal record to moto's backends; False if a replayed request was refused.

    ``backends`` caches each (account, region)'s DynamoDB backend across one replay: moto's own lookup
    costs more than putting the item back.
    """
    # Our own 0600 journal in the developer's data dir, checksummed; never input from a request.
    record = pickle.loads(payload)  # noqa: S301
    if record[0] == "items":
        _, account, region, after = record
        cache = {} if backends is None else backends
        backend = cache.get((account, region))
        if backend is None:
            backend = cache[account, region] = dynamodb_backends[account][region]
        for key, item in after:
            _put(backend, key, item)
        return True
    _, request, body, version = record
    status, headers = _replay_request(app, request, body)
    if version is not None:
        _restore_version_id(request, dict(headers).get(_VERSION_HEADER) or "", version)
    return status.startswith("2")


def _replay_request(app: WSGIApp, request: dict[str, str], body: bytes) -> tuple[str, list[tuple[str, str]]]:
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        answer.update(status=status, headers=[(name.lower(), value) for name, value in headers])

    environ: dict[str, Any] = {
        **request,
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.version": (1, 0),
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "wsgi.input_terminated": True,
    }
    for _ in app(environ, start_response):
        pass
    return answer.get("status", "500"), answer.get("headers", [])


def _restore_version_id(request: dict[str, str], replayed: str, recorded: str) -> None:
    """Give the version the replay made (id ``replayed``) the id the original answer carried."""
    bucket_name, _, key_name = unquote(request.get("PATH_INFO", "")).lstrip("/").partition("/")
    for regions in s3_backends.values():
        for backend in regions.values():
            bucket = backend.buckets.get(bucket_name)
            if bucket is None:
                continue
            for version in bucket.keys.getlist(key_name, []):
                if version.version_id == replayed:
                    version._version_id = recorded
                    return
