"""The knowledge index on DynamoDB (chunks, document metadata), partitioned by scope, and S3 (bodies).

Items in the ``knowledge`` table, one partition per scope (see ``scopes.py`` for what a scope is):
  pk=scope#SCOPE  sk=chunk#ID#GEN#NNNN  document id, title, version, generation, chunk text (bounded)
  pk=scope#SCOPE  sk=doc#ID             source name, title, file name, source kind, version, chunk
                                        count, generation, SHA-256 of the body, S3 key
  pk=scope#SCOPE  sk=meta               the scope's version (bumped on every change) and its document
                                        and chunk counts (kept within the scope's bounds by the write)

A version of a document is switched in atomically: its chunks are written under a fresh generation,
then one transaction points the document item at that generation and bumps the scope's version;
chunks of any other generation never answer (a reader skips them) and are deleted afterwards.

A lookup names the scopes it may search. It reads their version markers in one BatchGetItem and
re-reads (one Query) only a scope whose version moved since this process cached it; the process keeps
a bounded LRU of scopes (``scope_cache.py``), so memory and requests are bounded by the lookup, never
by the size of the whole index. BM25 (and the optional embedding blend) ranks the union of the scopes.

Bodies are at ``documents/ID/vN/FILE_NAME`` (``global``) or ``scoped/SCOPE/ID/vN/FILE_NAME`` in the
documents bucket. A store written before scopes existed (``pk=corpus``) is moved into ``global`` on
first use (``legacy_corpus.py``). Adding and removing documents is not audited here: the ledger records
what agents and users did, and the workspaces and documents routes audit their own actions.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from botocore.exceptions import ClientError

from flowledger.errors import Conflict, FlowledgerError, InvalidInput, NotFound
from flowledger.knowledge.documents import PreparedDocument, prepare_document
from flowledger.knowledge.legacy_corpus import LEGACY_META_KEY, migrate_legacy_corpus
from flowledger.knowledge.ranking import SEMANTIC_ONLY_THRESHOLD, rank
from flowledger.knowledge.scope_cache import Chunk, ScopeCache, ScopeCorpus
from flowledger.knowledge.scopes import (
    GLOBAL,
    MAX_LOOKUP_CHUNKS,
    MAX_SCOPE_CHUNKS,
    MAX_SCOPE_DOCUMENTS,
    ScopeFull,
    body_prefix,
    check_document_key,
    check_lookup_scopes,
    check_scope,
    partition,
    partition_key,
)
from flowledger.llm.embeddings import EmbeddingModel, knowledge_embeddings_for
from flowledger.llm.ports import ModelError
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.cursors import decode_cursor, encode_cursor
from flowledger.store.object_versions import delete_every_version
from flowledger.store.paging import query_items

__all__ = [
    "SEMANTIC_ONLY_THRESHOLD",
    "AddedDocument",
    "DocumentHit",
    "DocumentPage",
    "KnowledgeIndex",
    "KnowledgeUnavailable",
    "LookupResult",
    "StoredDocument",
]

MAX_PAGE_SIZE = 100
# Attempts at switching a version in when another writer changed the same document meanwhile.
ADD_ATTEMPTS = 3
_BATCH_GET_KEYS = 100  # DynamoDB's limit per BatchGetItem


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
    scope: str = GLOBAL


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
    scope: str = GLOBAL


@dataclass(frozen=True)
class AddedDocument:
    document: StoredDocument
    new_version: bool  # False: these bytes were stored already and nothing was written


@dataclass(frozen=True)
class DocumentPage:
    """One page of a scope's documents, by document id; ``next_cursor`` is None on the last page."""

    documents: list[StoredDocument]
    next_cursor: str | None


@dataclass(frozen=True)
class _Marker:
    """A scope's version marker: its version and what it holds (all zero for a scope never written)."""

    version: int = 0
    documents: int = 0
    chunks: int = 0


class KnowledgeIndex:
    """Adds documents to scopes and answers lookups within the scopes a caller names.

    Scopes are cached per process (at most ``cache.max_scopes`` of them and ``cache.max_chunks``
    chunks) and each is re-read only when its version marker moved.
    """

    def __init__(
        self, services: Services, embeddings: EmbeddingModel | None = None, *, cache: ScopeCache | None = None
    ) -> None:
        self._s = services
        self._embeddings = embeddings or knowledge_embeddings_for(services.settings)
        self._table = services.aws.table_name("knowledge")
        self.cache = cache or ScopeCache()
        # Once this process has seen no single-corpus items, none can appear: nothing writes them any more.
        self._legacy_checked = False

    # ---- writing ---------------------------------------------------------------------------------

    def add_document(
        self,
        name: str,
        body: bytes,
        *,
        scope: str = GLOBAL,
        document_id: str | None = None,
        title: str | None = None,
    ) -> AddedDocument:
        """Check and store a text, Markdown or PDF document in ``scope``.

        ``document_id`` is the documents service's id of the revision family; without it the id is
        derived from ``name`` (its source name). The same bytes under the same id are stored once:
        adding them again writes nothing. New bytes make a new version, which replaces the old one's
        chunks: only the current version answers lookups. A scope over its bounds is a 409
        (:class:`ScopeFull`) with nothing written.
        """
        return self.add(prepare_document(name, body, title), scope=scope, document_id=document_id)

    def add(self, document: PreparedDocument, *, scope: str = GLOBAL, document_id: str | None = None) -> AddedDocument:
        """Store a checked document: body to S3, chunks, then one switch of the document and its scope's version."""
        scope = check_scope(scope)
        key = check_document_key(document_id) if document_id is not None else document.document_id
        self._migrate_legacy_if_any(scope)
        for _ in range(ADD_ATTEMPTS):
            added = self._try_add(document, scope, key)
            if added is not None:
                return added
        raise Conflict(f"{key} kept changing while it was being indexed in {scope}; add it again")

    def _try_add(self, document: PreparedDocument, scope: str, document_id: str) -> AddedDocument | None:
        """One attempt; None when another writer switched the same document in first (nothing of ours is left)."""
        previous_item = self._document_item(scope, document_id)
        previous = _stored(previous_item) if previous_item else None
        model = self._embeddings.name if self._embeddings else None
        # Another embedding model is a reason to index the same bytes again: their chunks need its vectors.
        if previous and (previous.sha256, previous.title, previous.embedding_model) == (
            document.sha256,
            document.title,
            model,
        ):
            return AddedDocument(previous, new_version=False)
        chunks = list(document.chunks)
        chunk_delta = len(chunks) - (previous.chunks if previous else 0)
        document_delta = 0 if previous else 1
        self._check_room(scope, self._marker(scope), document_delta, chunk_delta)
        vectors = self._embed(chunks)  # before any write: a failing model leaves nothing behind
        version = previous.version + 1 if previous else 1
        generation = secrets.token_hex(8)
        s3, bucket = self._s.aws.s3, self._s.aws.bucket_name("documents")
        body_key = f"{body_prefix(scope, document_id)}v{version}/{document.file_name}"
        put = s3.put_object(Bucket=bucket, Key=body_key, Body=document.body)
        chunk_items = self._chunk_items(scope, document_id, generation, version, document.title, chunks, vectors)
        self._write(chunk_items)
        stored = StoredDocument(
            document_id=document_id,
            title=document.title,
            version=version,
            chunks=len(chunks),
            source_name=document.source_name,
            source_kind=document.source_kind,
            sha256=document.sha256,
            embedding_model=model,
            scope=scope,
        )
        document_item = items.to_item(
            {
                "pk": partition(scope),
                "sk": f"doc#{document_id}",
                **asdict(stored),
                "generation": generation,
                "file_name": document.file_name,
                "s3_key": body_key,
            }
        )
        # Only a cancelled transaction surely wrote nothing; after any other failure the switch may have
        # happened, so the chunks stay (a later add of the document deletes whatever is not current).
        try:
            self._switch_in(scope, document_item, previous_item, document_delta, chunk_delta)
        except (_DocumentMoved, ScopeFull) as exc:
            self._delete([{"pk": item["pk"], "sk": item["sk"]} for item in chunk_items])
            # Only this add's object version goes: the bucket keeps every version, another writer's too.
            s3.delete_object(
                Bucket=bucket, Key=body_key, **({"VersionId": put["VersionId"]} if "VersionId" in put else {})
            )
            if isinstance(exc, _DocumentMoved):
                return None
            raise
        self._delete_chunks(scope, document_id, keep_generation=generation)
        return AddedDocument(stored, new_version=True)

    def _chunk_items(
        self,
        scope: str,
        document_id: str,
        generation: str,
        version: int,
        title: str,
        chunks: list[str],
        vectors: list[list[float]],
    ) -> list[dict[str, Any]]:
        model = self._embeddings.name if self._embeddings else None
        return [
            items.to_item(
                {
                    "pk": partition(scope),
                    "sk": f"chunk#{document_id}#{generation}#{n:04d}",
                    "document_id": document_id,
                    "title": title,
                    "version": version,
                    "generation": generation,
                    "text": chunk,
                    **({"embedding": vector, "embedding_model": model} if self._embeddings else {}),
                }
            )
            for n, (chunk, vector) in enumerate(zip(chunks, vectors, strict=True))
        ]

    def _switch_in(
        self,
        scope: str,
        document_item: dict[str, Any],
        previous_item: dict[str, Any] | None,
        document_delta: int,
        chunk_delta: int,
    ) -> None:
        """Point the document at its new generation and move the scope's version and counts, in one transaction.

        The document must still be the one this attempt read (else :class:`_DocumentMoved`) and the
        scope must have room (else :class:`ScopeFull`): both are conditions of the same write, so two
        concurrent adds can neither both replace one version nor together pass a bound.
        """
        if previous_item is None:
            document_condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(sk)"}
        else:
            document_condition = {
                "ConditionExpression": "generation = :g",
                "ExpressionAttributeValues": {":g": previous_item.get("generation", {"S": "-"})},
            }
        try:
            self._s.aws.dynamodb.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": self._table, "Item": document_item, **document_condition}},
                    {"Update": self._marker_update(scope, document_delta, chunk_delta, bounded=True)},
                ]
            )
        except ClientError as exc:
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException" or len(reasons) != 2:
                raise
            if reasons[0] == "ConditionalCheckFailed":
                raise _DocumentMoved from None
            if reasons[1] == "ConditionalCheckFailed":
                self._check_room(scope, self._marker(scope), document_delta, chunk_delta)
                raise ScopeFull(f"{scope} has no room for this document") from None
            raise

    def _marker_update(self, scope: str, document_delta: int, chunk_delta: int, *, bounded: bool) -> dict[str, Any]:
        update: dict[str, Any] = {
            "TableName": self._table,
            "Key": {"pk": partition_key(scope), "sk": {"S": "meta"}},
            "UpdateExpression": "ADD version :one, documents :d, chunks :c",
            "ExpressionAttributeValues": {
                ":one": {"N": "1"},
                ":d": {"N": str(document_delta)},
                ":c": {"N": str(chunk_delta)},
            },
        }
        if bounded:
            # "count + delta <= bound" as "count <= bound - delta": conditions compare, they do not add.
            update["ConditionExpression"] = (
                "(attribute_not_exists(documents) OR documents <= :dmax) "
                "AND (attribute_not_exists(chunks) OR chunks <= :cmax)"
            )
            update["ExpressionAttributeValues"] |= {
                ":dmax": {"N": str(MAX_SCOPE_DOCUMENTS - document_delta)},
                ":cmax": {"N": str(MAX_SCOPE_CHUNKS - chunk_delta)},
            }
        return update

    @staticmethod
    def _check_room(scope: str, marker: _Marker, document_delta: int, chunk_delta: int) -> None:
        if marker.documents + document_delta > MAX_SCOPE_DOCUMENTS:
            raise ScopeFull(f"{scope} holds {marker.documents} documents, the most a scope may hold; remove one first")
        if marker.chunks + chunk_delta > MAX_SCOPE_CHUNKS:
            raise ScopeFull(
                f"{scope} holds {marker.chunks} of at most {MAX_SCOPE_CHUNKS} chunks; this document needs "
                f"{chunk_delta} more: remove documents first"
            )

    def remove_document(self, document_id: str, *, scope: str = GLOBAL) -> StoredDocument:
        """Delete a document's chunks, every stored version of its body, then its metadata.

        The metadata goes last: a removal cut short still lists the document and can be run again.
        """
        scope = check_scope(scope)
        check_document_key(document_id)
        self._migrate_legacy_if_any(scope)
        item = self._document_item(scope, document_id)
        if item is None:
            raise NotFound(f"no document {document_id} in {scope}" if scope != GLOBAL else f"no document {document_id}")
        stored = _stored(item)
        self._delete_chunks(scope, document_id, keep_generation=None)
        self._s.aws.dynamodb.update_item(**self._marker_update(scope, 0, 0, bounded=False))  # caches drop it now
        self._delete_bodies(scope, document_id)
        try:
            self._s.aws.dynamodb.transact_write_items(
                TransactItems=[
                    {
                        "Delete": {
                            "TableName": self._table,
                            "Key": {"pk": partition_key(scope), "sk": {"S": f"doc#{document_id}"}},
                            "ConditionExpression": "generation = :g",
                            "ExpressionAttributeValues": {":g": item["generation"]},
                        }
                    },
                    {"Update": self._marker_update(scope, -1, -stored.chunks, bounded=False)},
                ]
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                raise
            raise Conflict(f"{document_id} was added again while it was being removed; remove it again") from None
        return stored

    def _delete_chunks(self, scope: str, document_id: str, *, keep_generation: str | None) -> None:
        """Delete the document's chunks of every generation but ``keep_generation`` (cut-short adds' too)."""
        request = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :p AND begins_with(sk, :c)",
            "ExpressionAttributeValues": {":p": partition_key(scope), ":c": {"S": f"chunk#{document_id}#"}},
            "ProjectionExpression": "pk, sk, generation",
            "ConsistentRead": True,
        }
        self._delete(
            [
                {"pk": item["pk"], "sk": item["sk"]}
                for item in query_items(self._s.aws.dynamodb, request)
                if item.get("generation", {}).get("S") != keep_generation
            ]
        )

    def _delete_bodies(self, scope: str, document_id: str) -> None:
        # The bucket is versioned: deleting only the current objects would keep every body readable.
        delete_every_version(self._s.aws.s3, self._s.aws.bucket_name("documents"), body_prefix(scope, document_id))

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

    # ---- reading documents -----------------------------------------------------------------------

    def document(self, document_id: str, *, scope: str = GLOBAL) -> StoredDocument | None:
        """The stored metadata of one document of ``scope``, or None."""
        scope = check_scope(scope)
        self._migrate_legacy_if_any(scope)
        item = self._document_item(scope, check_document_key(document_id))
        return _stored(item) if item else None

    def _document_item(self, scope: str, document_id: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self._s.aws.dynamodb.get_item(
            TableName=self._table,
            Key={"pk": partition_key(scope), "sk": {"S": f"doc#{document_id}"}},
            ConsistentRead=True,
        ).get("Item")
        return item

    def list_documents(
        self, scope: str = GLOBAL, *, limit: int = MAX_PAGE_SIZE, cursor: str | None = None
    ) -> DocumentPage:
        """One page of the documents of ``scope``, by document id, resuming after ``cursor``."""
        scope = check_scope(scope)
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise InvalidInput(f"limit must be 1 to {MAX_PAGE_SIZE}")
        self._migrate_legacy_if_any(scope)
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :p AND begins_with(sk, :d)",
            "ExpressionAttributeValues": {":p": partition_key(scope), ":d": {"S": "doc#"}},
            "ConsistentRead": True,
        }
        if cursor is not None:
            request["ExclusiveStartKey"] = {"pk": partition_key(scope), "sk": {"S": f"doc#{_after(cursor, scope)}"}}
        found: list[StoredDocument] = []
        # One more than a page is read so the last page says it is the last (no empty page after it).
        for item in query_items(self._s.aws.dynamodb, {**request, "Limit": limit + 1}):
            if len(found) == limit:
                return DocumentPage(found, encode_cursor({"scope": scope, "after": found[-1].document_id}))
            found.append(_stored(item))
        return DocumentPage(found, None)

    def all_documents(self, scope: str = GLOBAL) -> list[StoredDocument]:
        """Every document of ``scope`` (at most ``MAX_SCOPE_DOCUMENTS``), by source name."""
        documents: list[StoredDocument] = []
        cursor: str | None = None
        while True:
            page = self.list_documents(scope, cursor=cursor)
            documents.extend(page.documents)
            if page.next_cursor is None:
                return sorted(documents, key=_by_source)
            cursor = page.next_cursor

    # ---- lookups ---------------------------------------------------------------------------------

    def lookup(self, query: str, limit: int = 4, *, scopes: Sequence[str] = (GLOBAL,)) -> LookupResult:
        """The best documents for ``query`` within ``scopes`` only: one hit per document, its best chunk as excerpt.

        At most ``MAX_SCOPES_PER_LOOKUP`` scopes (422 beyond) holding at most ``MAX_LOOKUP_CHUNKS``
        chunks together (422 naming the count beyond, rather than a silently partial search). No
        scopes: no evidence, and nothing is read.
        """
        wanted = check_lookup_scopes(scopes)
        if not wanted:
            return LookupResult("READY", "NO_EVIDENCE", ())
        corpora = self._corpora(wanted)
        query_vector = self._embed([query])[0] if self._embeddings is not None and corpora else None
        best: dict[tuple[str, str], DocumentHit] = {}
        for ranked in rank(corpora, query, query_vector, self._embeddings.name if self._embeddings else None):
            chunk = ranked.chunk
            key = (ranked.scope, chunk.document_id)
            if key not in best:
                best[key] = DocumentHit(
                    chunk.document_id, chunk.title, chunk.version, chunk.text, round(ranked.score, 4), ranked.scope
                )
            if len(best) == limit:
                break
        hits = tuple(best.values())
        return LookupResult("READY", "FOUND" if hits else "NO_EVIDENCE", hits)

    def read_documents(self, query: str, documents: Sequence[tuple[str, str]]) -> LookupResult:
        """One excerpt of each named ``(scope, document_id)``: its best chunk for ``query``, else its first.

        For an explicit selection: every named document is read, whether or not it shares a word with
        the query (a search could leave a selected document out). Hits come in the order named; a
        document that is not (or no longer) in its scope's index is left out. Bounded like ``lookup``.
        """
        wanted = list(dict.fromkeys(documents))
        scopes = check_lookup_scopes(dict.fromkeys(scope for scope, _ in wanted))
        if not wanted:
            return LookupResult("READY", "NO_EVIDENCE", ())
        corpora = self._corpora(scopes)
        named = set(wanted)
        best: dict[tuple[str, str], DocumentHit] = {}
        for ranked in rank(corpora, query):  # BM25 alone: a selection needs no semantic recall
            key = (ranked.scope, ranked.chunk.document_id)
            if key in named and key not in best:
                best[key] = _hit(ranked.chunk, ranked.scope, round(ranked.score, 4))
        for corpus in corpora:
            for chunk in corpus.chunks:  # chunks in document order: the first one stands for the document
                key = (corpus.scope, chunk.document_id)
                if key in named and key not in best:
                    best[key] = _hit(chunk, corpus.scope, 0.0)
        hits = tuple(best[key] for key in wanted if key in best)
        return LookupResult("READY", "FOUND" if hits else "NO_EVIDENCE", hits)

    def _corpora(self, scopes: tuple[str, ...]) -> list[ScopeCorpus]:
        """The current corpus of each scope holding anything: cached ones as they are, moved ones re-read."""
        markers = self._markers(scopes)
        total = sum(marker.chunks for marker in markers.values())
        if total > MAX_LOOKUP_CHUNKS:
            raise InvalidInput(
                f"the {len(scopes)} scopes hold {total} chunks; a lookup ranks at most {MAX_LOOKUP_CHUNKS}: "
                "search fewer scopes"
            )
        corpora = []
        for scope in scopes:
            marker = markers.get(scope, _Marker())
            if marker.version == 0:
                continue  # never written: nothing to search, nothing to read
            corpus = self.cache.get(scope)
            if corpus is None or corpus.version != marker.version:
                corpus = self._load(scope, marker.version)
                self.cache.put(corpus)
            corpora.append(corpus)
        return corpora

    def _markers(self, scopes: tuple[str, ...]) -> dict[str, _Marker]:
        """The version markers of ``scopes`` in one BatchGetItem per 100 (consistent: a change is seen at once)."""
        keys = [{"pk": partition_key(scope), "sk": {"S": "meta"}} for scope in scopes]
        legacy = GLOBAL in scopes and not self._legacy_checked
        if legacy:
            keys.append(LEGACY_META_KEY)  # the single-corpus marker, read alongside for free until it is gone
        found = self._batch_get(keys)
        if legacy:
            if any(item["pk"] == LEGACY_META_KEY["pk"] for item in found):
                self._migrate_legacy_if_any(GLOBAL)
                return self._markers(scopes)
            self._legacy_checked = True
        markers = {}
        for item in found:
            if item["pk"] == LEGACY_META_KEY["pk"]:
                continue
            value = items.from_item(item)
            scope = value["pk"].removeprefix("scope#")
            markers[scope] = _Marker(int(value["version"]), int(value["documents"]), int(value["chunks"]))
        return markers

    def _batch_get(self, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        db = self._s.aws.dynamodb
        found: list[dict[str, Any]] = []
        for start in range(0, len(keys), _BATCH_GET_KEYS):
            pending: dict[str, Any] = {
                self._table: {"Keys": keys[start : start + _BATCH_GET_KEYS], "ConsistentRead": True}
            }
            while pending:
                response = db.batch_get_item(RequestItems=pending)
                found.extend(response.get("Responses", {}).get(self._table, []))
                pending = response.get("UnprocessedKeys") or {}
        return found

    def _marker(self, scope: str) -> _Marker:
        item = self._s.aws.dynamodb.get_item(
            TableName=self._table, Key={"pk": partition_key(scope), "sk": {"S": "meta"}}, ConsistentRead=True
        ).get("Item")
        if not item:
            return _Marker()
        value = items.from_item(item)
        return _Marker(int(value["version"]), int(value["documents"]), int(value["chunks"]))

    def _load(self, scope: str, version: int) -> ScopeCorpus:
        """Read one scope whole (one Query, paged) and keep each document's current generation only.

        Cached under the version read before the query: if the scope moved in between, the next
        lookup sees a newer version and reads it again, so a stale corpus is never kept as current.
        """
        request = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": partition_key(scope)},
            "ConsistentRead": True,
        }
        chunk_values: list[dict[str, Any]] = []
        current: dict[str, str] = {}
        for item in query_items(self._s.aws.dynamodb, request):
            sk = item["sk"]["S"]
            if sk.startswith("chunk#"):
                chunk_values.append(items.from_item(item))
            elif sk.startswith("doc#"):
                current[item["document_id"]["S"]] = item.get("generation", {}).get("S", "")
        chunks = [
            Chunk(
                value["document_id"],
                value["title"],
                int(value["version"]),
                value["text"],
                value.get("embedding"),
                value.get("embedding_model"),
            )
            for value in chunk_values
            # Another generation is an older version, or one whose add was cut short: it never answers.
            if current.get(value["document_id"]) == value.get("generation")
        ]
        return ScopeCorpus.build(scope, version, chunks)

    def _embed(self, texts: list[str]) -> list[list[float]]:
        if self._embeddings is None:
            return [[] for _ in texts]
        try:
            return self._embeddings.embed(texts)
        except ModelError as exc:
            raise KnowledgeUnavailable(f"the embedding model failed: {type(exc).__name__}") from None

    def _migrate_legacy_if_any(self, scope: str) -> None:
        """Move a single-corpus store into ``global`` the first time this process uses ``global``."""
        if scope != GLOBAL or self._legacy_checked:
            return
        db = self._s.aws.dynamodb
        if db.get_item(TableName=self._table, Key=LEGACY_META_KEY, ConsistentRead=True).get("Item"):
            migrate_legacy_corpus(db, self._table, self._batch)
        self._legacy_checked = True


class _DocumentMoved(Exception):
    """Another writer switched a version of the same document in since this attempt read it."""


def _hit(chunk: Chunk, scope: str, score: float) -> DocumentHit:
    return DocumentHit(chunk.document_id, chunk.title, chunk.version, chunk.text, score, scope)


def _after(cursor: str, scope: str) -> str:
    position = decode_cursor(cursor)
    if not isinstance(position, dict) or set(position) != {"scope", "after"} or position["scope"] != scope:
        raise InvalidInput("cursor is not one this API returned")
    return check_document_key(position["after"])


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
        scope=value["pk"].removeprefix("scope#"),
    )


def _by_source(document: StoredDocument) -> tuple[str, str]:
    return document.source_name, document.document_id
