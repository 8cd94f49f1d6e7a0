"""Moving a single-corpus knowledge index (``pk=corpus``) into the ``global`` scope, once.

Before scopes, every item lived in one partition: ``pk=corpus`` with ``doc#ID``, ``chunk#ID#NNNN``
and a ``meta`` item holding ``corpus_version``. A store saved then (a dev server data dir restored
from disk, or a deployed table) is migrated on first use of ``global`` by whichever process touches
it first: a lookup that includes ``global``, or an add, list or removal there.

The migration is idempotent and safe to run twice or concurrently: copies are written first (a
document item only where none, or only an earlier copy, exists, so a document re-added since is
never rolled back), then the scope's version marker (only if absent), then the old items are
deleted, the old ``meta`` last, so a migration cut short runs again on the next use. The bodies in
S3 stay where they are: ``global`` keeps the ``documents/ID/vN/FILE`` layout.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from flowledger.knowledge.scopes import GLOBAL, partition_key
from flowledger.store.paging import query_items

LEGACY_PK = {"S": "corpus"}
LEGACY_META_KEY = {"pk": LEGACY_PK, "sk": {"S": "meta"}}
# The chunk generation of a migrated document: its chunks were written before generations existed.
LEGACY_GENERATION = "legacy"


def migrate_legacy_corpus(db: Any, table: str, write_batch: Any) -> int:
    """Copy the ``pk=corpus`` documents into ``global`` and delete the old items; the number of documents copied.

    ``write_batch`` takes a list of BatchWriteItem requests and writes them all (retrying unprocessed ones).
    """
    documents: dict[str, dict[str, Any]] = {}
    chunks: dict[str, list[dict[str, Any]]] = {}
    old_keys: list[dict[str, Any]] = []
    request = {
        "TableName": table,
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": LEGACY_PK},
        "ConsistentRead": True,
    }
    for item in query_items(db, request):
        sk = item["sk"]["S"]
        if sk == "meta":
            continue
        old_keys.append({"pk": item["pk"], "sk": item["sk"]})
        if sk.startswith("doc#"):
            documents[sk.removeprefix("doc#")] = item
        elif sk.startswith("chunk#"):
            chunks.setdefault(item["document_id"]["S"], []).append(item)
    pk = partition_key(GLOBAL)
    copies: list[dict[str, Any]] = []
    total_chunks = 0
    for document_id, document in documents.items():
        count = int(document["chunks"]["N"])
        total_chunks += count
        for chunk in chunks.get(document_id, []):
            n = int(chunk["sk"]["S"].rsplit("#", 1)[1])
            if n < count:  # a chunk past the count was left by a shorter re-add cut short: not current
                copies.append(
                    {
                        **chunk,
                        "pk": pk,
                        "sk": {"S": f"chunk#{document_id}#{LEGACY_GENERATION}#{n:04d}"},
                        "generation": {"S": LEGACY_GENERATION},
                        "version": document["version"],
                    }
                )
    write_batch([{"PutRequest": {"Item": item}} for item in copies])
    for document in documents.values():
        _put_unless_newer(db, table, {**document, "pk": pk, "generation": {"S": LEGACY_GENERATION}})
    _put_marker(db, table, documents=len(documents), chunks=total_chunks)
    write_batch([{"DeleteRequest": {"Key": key}} for key in old_keys])
    db.delete_item(TableName=table, Key=LEGACY_META_KEY)
    return len(documents)


def _put_unless_newer(db: Any, table: str, item: dict[str, Any]) -> None:
    try:
        db.put_item(
            TableName=table,
            Item=item,
            ConditionExpression="attribute_not_exists(sk) OR generation = :legacy",
            ExpressionAttributeValues={":legacy": {"S": LEGACY_GENERATION}},
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise


def _put_marker(db: Any, table: str, *, documents: int, chunks: int) -> None:
    try:
        db.put_item(
            TableName=table,
            Item={
                "pk": partition_key(GLOBAL),
                "sk": {"S": "meta"},
                "version": {"N": "1"},
                "documents": {"N": str(documents)},
                "chunks": {"N": str(chunks)},
            },
            ConditionExpression="attribute_not_exists(sk)",
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise
