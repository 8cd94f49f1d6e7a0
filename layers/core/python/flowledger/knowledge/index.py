"""The knowledge index on DynamoDB (chunks, document metadata) and S3 (original bodies).

Items in the ``knowledge`` table, all in one partition so that one query lists them:
  pk=corpus      sk=doc#ID            source name, title, file name, source kind, version, chunk count,
                                      SHA-256 of the body, S3 key
  pk=corpus      sk=chunk#ID#NNNN     document id, title, version, chunk text (bounded)
  pk=corpus      sk=meta              corpus version (bumped on every change; readers re-load on change)

Bodies are at ``documents/ID/vN/FILE_NAME`` in the documents bucket. Adding and removing documents
is not audited: the ledger records what agents and users did, and the corpus is reference material.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any, Literal

from flowledger.errors import FlowledgerError, NotFound, UpstreamUnavailable
from flowledger.knowledge.bm25 import Bm25
from flowledger.knowledge.documents import PreparedDocument, check_document_id, prepare_document
from flowledger.llm.embeddings import EmbeddingModel, cosine, knowledge_embeddings_for
from flowledger.llm.ports import ModelError
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.paging import query_items

# Hybrid ranking: half BM25 (scaled to the best hit), half embedding cosine. A chunk sharing no word
# with the query counts as evidence only when its meaning is at least this close.
SEMANTIC_ONLY_THRESHOLD = 0.5
_CORPUS = {"S": "corpus"}


class KnowledgeUnavailable(FlowledgerError):
    """The index could not be searched (its embedding model failed)."""

    code = "knowledge_unavailable"


@dataclass(frozen=True)
class DocumentHit:
    document_id: str
    title: str
    version: int
    excerpt: str
    score: float


@dataclass(frozen=True)
class LookupResult:
    status: Literal["READY"]
    evidence: Literal["FOUND", "NO_EVIDENCE"]
    documents: tuple[DocumentHit, ...]


@dataclass(frozen=True)
class StoredDocument:
    """One document as its metadata item records it."""

    document_id: str
    title: str
    version: int
    chunks: int
    source_name: str
    source_kind: str
    sha256: str
    embedding_model: str | None  # the model its chunks were embedded with, None for BM25 alone


@dataclass(frozen=True)
class AddedDocument:
    document: StoredDocument
    new_version: bool  # False: these bytes were stored already and nothing was written


@dataclass(frozen=True)
class _Chunk:
    document_id: str
    title: str
    version: int
    text: str
    embedding: list[float] | None = None
    embedding_model: str | None = None


class KnowledgeIndex:
    """Adds documents and answers lookups; the corpus is cached per process and re-read on change."""

    def __init__(self, services: Services, embeddings: EmbeddingModel | None = None) -> None:
        self._s = services
        self._embeddings = embeddings or knowledge_embeddings_for(services.settings)
        self._table = services.aws.table_name("knowledge")
        self._lock = threading.Lock()
        self._loaded_version: int | None = None
        self._chunks: list[_Chunk] = []
        self._bm25 = Bm25([])

    def add_document(self, name: str, body: bytes, title: str | None = None) -> AddedDocument:
        """Check and store a text, Markdown or PDF document keyed by ``name`` (its source name).

        The same bytes under the same name are stored once: adding them again writes nothing.
        """
        return self.add(prepare_document(name, body, title))

    def add(self, document: PreparedDocument) -> AddedDocument:
        """Store a checked document: body to S3, chunks, then metadata; a new version if it changed."""
        previous = self.document(document.document_id)
        model = self._embeddings.name if self._embeddings else None
        # Another embedding model is a reason to index the same bytes again: their chunks need its vectors.
        if previous and (previous.sha256, previous.title, previous.embedding_model) == (
            document.sha256,
            document.title,
            model,
        ):
            return AddedDocument(previous, new_version=False)
        document_id = document.document_id
        version = previous.version + 1 if previous else 1
        key = f"documents/{document_id}/v{version}/{document.file_name}"
        self._s.aws.s3.put_object(Bucket=self._s.aws.bucket_name("documents"), Key=key, Body=document.body)
        chunks = list(document.chunks)
        self._write(
            [
                items.to_item(
                    {
                        "pk": "corpus",
                        "sk": f"chunk#{document_id}#{n:04d}",
                        "document_id": document_id,
                        "title": document.title,
                        "version": version,
                        "text": chunk,
                        **({"embedding": vector, "embedding_model": model} if self._embeddings else {}),
                    }
                )
                for n, (chunk, vector) in enumerate(zip(chunks, self._embed(chunks), strict=True))
            ]
        )
        old_count = previous.chunks if previous else 0
        self._delete([_chunk_key(document_id, n) for n in range(len(chunks), old_count)])
        stored = StoredDocument(
            document_id=document_id,
            title=document.title,
            version=version,
            chunks=len(chunks),
            source_name=document.source_name,
            source_kind=document.source_kind,
            sha256=document.sha256,
            embedding_model=model,
        )
        self._s.aws.dynamodb.put_item(
            TableName=self._table,
            Item=items.to_item(
                {
                    "pk": "corpus",
                    "sk": f"doc#{document_id}",
                    **asdict(stored),
                    "file_name": document.file_name,
                    "s3_key": key,
                }
            ),
        )
        self._bump_corpus()
        return AddedDocument(stored, new_version=True)

    def document(self, document_id: str) -> StoredDocument | None:
        """The stored metadata of one document, or None."""
        item = self._s.aws.dynamodb.get_item(
            TableName=self._table, Key={"pk": _CORPUS, "sk": {"S": f"doc#{document_id}"}}, ConsistentRead=True
        ).get("Item")
        return _stored(item) if item else None

    def list_documents(self) -> list[StoredDocument]:
        """Every document, by source name."""
        request = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :p AND begins_with(sk, :d)",
            "ExpressionAttributeValues": {":p": _CORPUS, ":d": {"S": "doc#"}},
            "ConsistentRead": True,
        }
        return sorted((_stored(item) for item in query_items(self._s.aws.dynamodb, request)), key=_by_source)

    def remove_document(self, document_id: str) -> StoredDocument:
        """Delete a document's chunks, every stored version of its body, then its metadata.

        The metadata goes last: a removal cut short still lists the document and can be run again.
        """
        stored = self.document(check_document_id(document_id))
        if stored is None:
            raise NotFound(f"no document {document_id}")
        chunks = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :p AND begins_with(sk, :c)",
            "ExpressionAttributeValues": {":p": _CORPUS, ":c": {"S": f"chunk#{document_id}#"}},
            "ProjectionExpression": "pk, sk",
        }
        self._delete(list(query_items(self._s.aws.dynamodb, chunks)))
        self._bump_corpus()
        self._delete_bodies(document_id)
        self._s.aws.dynamodb.delete_item(TableName=self._table, Key={"pk": _CORPUS, "sk": {"S": f"doc#{document_id}"}})
        return stored

    def _delete_bodies(self, document_id: str) -> None:
        # The bucket is versioned: deleting only the current objects would keep every body readable.
        s3, bucket = self._s.aws.s3, self._s.aws.bucket_name("documents")
        versions: list[dict[str, str]] = []
        for page in s3.get_paginator("list_object_versions").paginate(
            Bucket=bucket, Prefix=f"documents/{document_id}/"
        ):
            for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
                versions.append({"Key": entry["Key"], "VersionId": entry["VersionId"]})
        for start in range(0, len(versions), 1000):
            errors = s3.delete_objects(
                Bucket=bucket, Delete={"Objects": versions[start : start + 1000], "Quiet": True}
            ).get("Errors")
            if errors:
                raise UpstreamUnavailable(
                    f"S3 kept {len(errors)} object(s) of {document_id} ({errors[0].get('Code')}); run the removal again"
                )

    def _bump_corpus(self) -> None:
        self._s.aws.dynamodb.update_item(
            TableName=self._table,
            Key={"pk": _CORPUS, "sk": {"S": "meta"}},
            UpdateExpression="ADD corpus_version :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )

    def _delete(self, keys: list[dict[str, Any]]) -> None:
        self._batch([{"DeleteRequest": {"Key": key}} for key in keys])

    def _write(self, puts: list[dict[str, Any]]) -> None:
        self._batch([{"PutRequest": {"Item": item}} for item in puts])

    def _batch(self, requests: list[dict[str, Any]]) -> None:
        db = self._s.aws.dynamodb
        for start in range(0, len(requests), 25):
            pending: dict[str, Any] = {self._table: requests[start : start + 25]}
            while pending:
                pending = db.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}

    def lookup(self, query: str, limit: int = 4) -> LookupResult:
        """The best documents for ``query`` (one hit per document, its best chunk as the excerpt)."""
        self._refresh()
        best: dict[str, DocumentHit] = {}
        for index, score in self._ranked(query):
            chunk = self._chunks[index]
            if chunk.document_id not in best:
                best[chunk.document_id] = DocumentHit(
                    chunk.document_id, chunk.title, chunk.version, chunk.text, round(score, 4)
                )
            if len(best) == limit:
                break
        hits = tuple(best.values())
        return LookupResult("READY", "FOUND" if hits else "NO_EVIDENCE", hits)

    def _ranked(self, query: str) -> list[tuple[int, float]]:
        """Chunk indexes with their scores, best first: BM25 alone, or blended with embeddings."""
        lexical = {s.index: s.score for s in self._bm25.score(query)}
        if self._embeddings is None:
            return list(lexical.items())
        top = max(lexical.values(), default=0.0) or 1.0
        query_vector = self._embed([query])[0]
        ranked = []
        for index, chunk in enumerate(self._chunks):
            semantic = (
                max(0.0, cosine(query_vector, chunk.embedding))
                if chunk.embedding and chunk.embedding_model == self._embeddings.name
                else 0.0
            )
            if index in lexical or semantic >= SEMANTIC_ONLY_THRESHOLD:
                ranked.append((index, 0.5 * lexical.get(index, 0.0) / top + 0.5 * semantic))
        return sorted(ranked, key=lambda pair: (-pair[1], pair[0]))

    def _embed(self, texts: list[str]) -> list[list[float]]:
        if self._embeddings is None:
            return [[] for _ in texts]
        try:
            return self._embeddings.embed(texts)
        except ModelError as exc:
            raise KnowledgeUnavailable(f"the embedding model failed: {type(exc).__name__}") from None

    def _refresh(self) -> None:
        db = self._s.aws.dynamodb
        meta = db.get_item(TableName=self._table, Key={"pk": {"S": "corpus"}, "sk": {"S": "meta"}}).get("Item")
        version = int(meta["corpus_version"]["N"]) if meta else 0
        with self._lock:
            if version == self._loaded_version:
                return
        chunks: list[_Chunk] = []
        request: dict[str, object] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :p AND begins_with(sk, :c)",
            "ExpressionAttributeValues": {":p": {"S": "corpus"}, ":c": {"S": "chunk#"}},
        }
        for item in query_items(db, request):
            value = items.from_item(item)
            chunks.append(
                _Chunk(
                    value["document_id"],
                    value["title"],
                    value["version"],
                    value["text"],
                    value.get("embedding"),
                    value.get("embedding_model"),
                )
            )
        with self._lock:
            self._chunks, self._bm25, self._loaded_version = chunks, Bm25([c.text for c in chunks]), version


def _chunk_key(document_id: str, n: int) -> dict[str, Any]:
    return {"pk": _CORPUS, "sk": {"S": f"chunk#{document_id}#{n:04d}"}}


def _stored(item: dict[str, Any]) -> StoredDocument:
    value = items.from_item(item)
    return StoredDocument(
        document_id=value["document_id"],
        title=value["title"],
        version=int(value["version"]),
        chunks=int(value["chunks"]),
        source_name=value["source_name"],
        source_kind=value["source_kind"],
        sha256=value["sha256"],
        embedding_model=value.get("embedding_model"),
    )


def _by_source(document: StoredDocument) -> tuple[str, str]:
    return document.source_name, document.document_id
