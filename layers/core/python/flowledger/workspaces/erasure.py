"""Erasing a patient's uploads for good: the documents a subject created, and everything each one left.

A revision family created by a patient carries their ``subject_id`` (``documents.py``), workspace
documents and conversation uploads alike, so the sparse ``by_subject`` index of the documents table lists
a subject's documents, deleted ones included (:func:`subject_documents`). The index is eventually
consistent: a caller lists and erases until a listing comes back empty.

:func:`erase_document` removes one document for good, where deletion (``DocumentService.delete``) keeps
its versions and bodies as the record of what was uploaded. In order:

1. the family stops being live (no listing shows it, no write to it commits: every write is conditional
   on ``live_scope``) and its scope's live-document count goes down, in one transaction, as a deletion does;
2. the knowledge index forgets it (chunks of every generation, its metadata, its scoped bodies);
3. every object version and delete marker under its prefixes in the versioned documents bucket goes
   (unfinished multipart uploads under them are aborted first): deleting only the current objects would
   leave every body readable;
4. its version items, then the family item last: the family names the scope the index and the bodies
   are kept under, so a run cut short anywhere is finished by running it again, and a run after that
   finds nothing and counts nothing.

Nothing here is audited: the caller (``subjects/erasure.py``) records the erasure with these counts.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from flowledger.errors import Conflict, NotFound
from flowledger.knowledge.scopes import body_prefix, partition_key
from flowledger.ledger.events import timestamp
from flowledger.services import Services
from flowledger.store.object_versions import delete_every_version, delete_object_versions, object_versions
from flowledger.store.paging import batch_delete, query_items
from flowledger.workspaces.store import FAMILY, count_update, document_key

if TYPE_CHECKING:
    from flowledger.knowledge.index import KnowledgeIndex

# A family goes from live to deleted once and never back, so two attempts settle it; the rest absorb
# transaction conflicts with a concurrent write.
_FENCE_ATTEMPTS = 4


@dataclass(frozen=True)
class DocumentErasure:
    """What erasing one document removed; all zero when nothing of it was left."""

    items: int = 0  # documents-table items: the family and its versions
    objects: int = 0  # object versions and delete markers in the documents bucket
    chunks: int = 0  # chunk items of the knowledge index


def subject_documents(services: Services, subject_id: str) -> list[str]:
    """The ids of the documents a subject created (live or deleted), oldest first.

    Read from the eventually consistent ``by_subject`` index: a family created a moment ago may be missing,
    so an erasure lists again after erasing until the listing is empty.
    """
    request = {
        "TableName": services.aws.table_name("documents"),
        "IndexName": "by_subject",
        "KeyConditionExpression": "subject_id = :s",
        "ExpressionAttributeValues": {":s": {"S": subject_id}},
        "ProjectionExpression": "document_id",
    }
    found = (str(item["document_id"]["S"]) for item in query_items(services.aws.dynamodb, request))
    return list(dict.fromkeys(found))


def erase_document(services: Services, document_id: str, *, index: KnowledgeIndex | None = None) -> DocumentErasure:
    """Remove a document for good: its index entries, every stored version of its bodies, every item of it.

    Idempotent and resumable: run again after a failure, it finishes what is left; run on an erased (or
    unknown) document, it returns zero counts. ``index``: the knowledge index to remove it from (one is
    made when none is given). Writes no audit event; the caller records the erasure.
    """
    chunks = objects = 0
    scope = _fence(services, document_id)
    files = f"files/{document_id}/"
    for prefix in (files, *([body_prefix(scope, document_id)] if scope is not None else [])):
        _abort_uploads(services, prefix)
    if scope is not None:
        chunks, objects = _erase_indexed(services, index, scope, document_id)
    objects += _delete_versions(services, files)
    # No version commits once the family is not live, so this sweep finds them all.
    items = _delete_versions_items(services, document_id)
    items += _delete_family(services, document_id)
    return DocumentErasure(items=items, objects=objects, chunks=chunks)


# ---- the family ----------------------------------------------------------------------------------


def _fence(services: Services, document_id: str) -> str | None:
    """Make the family not live (and count it out of its scope) if it is; its scope, or None when it is gone."""
    db, table = services.aws.dynamodb, services.aws.table_name("documents")
    for _ in range(_FENCE_ATTEMPTS):
        item = db.get_item(TableName=table, ConsistentRead=True, Key=document_key(document_id)).get("Item")
        if item is None:
            return None
        scope = str(item["scope"]["S"])
        if "live_scope" not in item:
            return scope
        now = timestamp(services.clock())
        fence = {
            "Update": {
                "TableName": table,
                "Key": document_key(document_id),
                "UpdateExpression": "SET deleted_at = :now, updated_at = :now REMOVE live_scope",
                "ConditionExpression": "attribute_exists(live_scope)",
                "ExpressionAttributeValues": {":now": {"S": now}},
            }
        }
        try:
            db.transact_write_items(TransactItems=[fence, count_update(services, scope, -1)])
            return scope
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                raise
            # Deleted (or changed) meanwhile: read it again.
    raise Conflict(f"document {document_id} kept changing while it was being erased; erase it again")


def _delete_family(services: Services, document_id: str) -> int:
    """Delete the family item (not live by now); 1 if it was there."""
    try:
        services.aws.dynamodb.delete_item(
            TableName=services.aws.table_name("documents"),
            Key=document_key(document_id),
            ConditionExpression="attribute_exists(document_id) AND attribute_not_exists(live_scope)",
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise
        return 0  # gone already (another run of this erasure): nothing to count
    return 1


def _delete_versions_items(services: Services, document_id: str) -> int:
    """Delete every item of the document's partition but the family; how many there were."""
    db, table = services.aws.dynamodb, services.aws.table_name("documents")
    request = {
        "TableName": table,
        "KeyConditionExpression": "document_id = :d",
        "ExpressionAttributeValues": {":d": {"S": document_id}},
        "ProjectionExpression": "document_id, sk",
        "ConsistentRead": True,
    }
    keys = [
        {"document_id": item["document_id"], "sk": item["sk"]}
        for item in query_items(db, request)
        if item["sk"]["S"] != FAMILY
    ]
    return batch_delete(db, table, keys)


# ---- the knowledge index -------------------------------------------------------------------------


def _erase_indexed(services: Services, index: KnowledgeIndex | None, scope: str, document_id: str) -> tuple[int, int]:
    """Remove the document from the knowledge index; the chunk items and body object versions that went.

    What the index holds is counted before its removal (which does not count), and whatever a removal
    leaves (chunks of an add cut short, or all of it when the metadata item is gone) is swept after.
    """
    chunks = {item["sk"]["S"] for item in _chunk_items(services, scope, document_id)}
    prefix = body_prefix(scope, document_id)
    bodies = {(v["Key"], v["VersionId"]) for v in _object_versions(services, prefix)}
    if index is None:
        from flowledger.knowledge.index import KnowledgeIndex  # embeddings load only when a document is indexed

        index = KnowledgeIndex(services)
    with contextlib.suppress(NotFound):  # never indexed (a table, an upload not completed), or removed already
        index.remove_document(document_id, scope=scope)
    left = list(_chunk_items(services, scope, document_id))
    batch_delete(
        services.aws.dynamodb,
        services.aws.table_name("knowledge"),
        [{"pk": item["pk"], "sk": item["sk"]} for item in left],
    )
    chunks |= {item["sk"]["S"] for item in left}
    left_bodies = _object_versions(services, prefix)
    _delete_objects(services, document_id, left_bodies)
    bodies |= {(v["Key"], v["VersionId"]) for v in left_bodies}
    return len(chunks), len(bodies)


def _chunk_items(services: Services, scope: str, document_id: str) -> list[dict[str, Any]]:
    request = {
        "TableName": services.aws.table_name("knowledge"),
        "KeyConditionExpression": "pk = :p AND begins_with(sk, :c)",
        "ExpressionAttributeValues": {":p": partition_key(scope), ":c": {"S": f"chunk#{document_id}#"}},
        "ProjectionExpression": "pk, sk",
        "ConsistentRead": True,
    }
    return list(query_items(services.aws.dynamodb, request))


# ---- the bucket ----------------------------------------------------------------------------------


def _object_versions(services: Services, prefix: str) -> list[dict[str, str]]:
    return object_versions(services.aws.s3, services.aws.bucket_name("documents"), prefix)


def _delete_versions(services: Services, prefix: str) -> int:
    return delete_every_version(services.aws.s3, services.aws.bucket_name("documents"), prefix)


def _delete_objects(services: Services, what: str, versions: list[dict[str, str]]) -> None:
    delete_object_versions(services.aws.s3, services.aws.bucket_name("documents"), what, versions)


def _abort_uploads(services: Services, prefix: str) -> None:
    """Abort the unfinished multipart uploads under ``prefix``: a completed one would store a body again."""
    s3, bucket = services.aws.s3, services.aws.bucket_name("documents")
    for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix):
        for upload in page.get("Uploads", []):
            with contextlib.suppress(s3.exceptions.NoSuchUpload):  # finished or aborted meanwhile
                s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
