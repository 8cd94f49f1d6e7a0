"""The knowledge index on DynamoDB (chunks, document metadata) and S3 (original bodies).

Items in the ``knowledge`` table:
  pk=doc#ID      sk=meta            title, file name, source kind, version, chunk count, S3 key
  pk=corpus      sk=chunk#ID#NNNN   document id, title, version, chunk text (bounded)
  pk=corpus      sk=meta            corpus version (bumped on every change; readers re-load on change)
"""

from __future__ import annotations

import hashlib
import io
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from flowledger.errors import FlowledgerError, InvalidInput
from flowledger.knowledge.bm25 import Bm25
from flowledger.llm.embeddings import EmbeddingModel, cosine, knowledge_embeddings_for
from flowledger.llm.ports import ModelError
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.paging import query_items

CHUNK_CHARS = 900
MAX_DOCUMENT_BYTES = 5 * 1024 * 1024
MAX_CHUNKS_PER_DOCUMENT = 400
SUPPORTED = {".txt": "text", ".md": "markdown", ".markdown": "markdown", ".pdf": "pdf"}
# Hybrid ranking: half BM25 (scaled to the best hit), half embedding cosine. A chunk sharing no word
# with the query counts as evidence only when its meaning is at least this close.
SEMANTIC_ONLY_THRESHOLD = 0.5


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
class _Chunk:
    document_id: str
    title: str
    version: int
    text: str
    embedding: list[float] | None = None
    embedding_model: str | None = None


def chunk_text(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """Paragraph-aligned chunks of about ``size`` characters (a long paragraph is cut)."""
    chunks: list[str] = []
    current = ""
    for paragraph in [p.strip() for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]:
        while len(paragraph) > size:
            if current:
                chunks.append(current)
                current = ""
            chunks.append(paragraph[:size])
            paragraph = paragraph[size:]
        if current and len(current) + len(paragraph) + 2 > size:
            chunks.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        chunks.append(current)
    return chunks


def document_id_for(name: str) -> str:
    """A stable id from the file name: adding the same file again makes a new version of it."""
    return "doc_" + hashlib.sha256(name.encode()).hexdigest()[:16]


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

    def add_document(self, name: str, body: bytes, title: str | None = None) -> dict[str, object]:
        """Store a text or Markdown document: body to S3, chunks to DynamoDB, a new version each time."""
        suffix = Path(name).suffix.lower()
        if suffix not in SUPPORTED:
            raise InvalidInput(f"{name}: only {', '.join(sorted(SUPPORTED))} files are supported")
        if len(body) > MAX_DOCUMENT_BYTES:
            raise InvalidInput(f"{name}: larger than {MAX_DOCUMENT_BYTES // (1024 * 1024)} MB")
        text = pdf_text(name, body) if suffix == ".pdf" else _utf8(name, body)
        chunks = chunk_text(text)
        if not chunks:
            raise InvalidInput(f"{name}: no text to index")
        if len(chunks) > MAX_CHUNKS_PER_DOCUMENT:
            raise InvalidInput(f"{name}: more than {MAX_CHUNKS_PER_DOCUMENT} chunks")
        document_id = document_id_for(Path(name).name)
        title = title or _title(text, name)
        db = self._s.aws.dynamodb
        previous = db.get_item(
            TableName=self._table, Key={"pk": {"S": f"doc#{document_id}"}, "sk": {"S": "meta"}}, ConsistentRead=True
        ).get("Item")
        version = int(previous["version"]["N"]) + 1 if previous else 1
        key = f"documents/{document_id}/v{version}/{Path(name).name}"
        self._s.aws.s3.put_object(Bucket=self._s.aws.bucket_name("documents"), Key=key, Body=body)
        old_count = int(previous["chunks"]["N"]) if previous else 0
        with_keys = [
            {
                "pk": "corpus",
                "sk": f"chunk#{document_id}#{n:04d}",
                "document_id": document_id,
                "title": title,
                "version": version,
                "text": chunk,
                **({"embedding": vector, "embedding_model": self._embeddings.name} if self._embeddings else {}),
            }
            for n, (chunk, vector) in enumerate(zip(chunks, self._embed(chunks), strict=True))
        ]
        self._write([items.to_item(item) for item in with_keys])
        stale = [
            {"pk": {"S": "corpus"}, "sk": {"S": f"chunk#{document_id}#{n:04d}"}} for n in range(len(chunks), old_count)
        ]
        for start in range(0, len(stale), 25):
            db.batch_write_item(
                RequestItems={self._table: [{"DeleteRequest": {"Key": k}} for k in stale[start : start + 25]]}
            )
        db.put_item(
            TableName=self._table,
            Item=items.to_item(
                {
                    "pk": f"doc#{document_id}",
                    "sk": "meta",
                    "title": title,
                    "file_name": Path(name).name,
                    "source_kind": SUPPORTED[suffix],
                    "version": version,
                    "chunks": len(chunks),
                    "s3_key": key,
                }
            ),
        )
        db.update_item(
            TableName=self._table,
            Key={"pk": {"S": "corpus"}, "sk": {"S": "meta"}},
            UpdateExpression="ADD corpus_version :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        return {"document_id": document_id, "title": title, "version": version, "chunks": len(chunks)}

    def _write(self, puts: list[dict[str, object]]) -> None:
        db = self._s.aws.dynamodb
        for start in range(0, len(puts), 25):
            pending = {self._table: [{"PutRequest": {"Item": item}} for item in puts[start : start + 25]]}
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


def _utf8(name: str, body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{name}: not UTF-8 text") from None


def pdf_text(name: str, body: bytes) -> str:
    """The text of a PDF's pages (pypdf); scanned pages without a text layer give nothing."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(body))
        return "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)
    except (PdfReadError, ValueError) as exc:
        raise InvalidInput(f"{name}: not a readable PDF ({type(exc).__name__})") from None


def _title(text: str, name: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip().lstrip("#").strip()[:120] or Path(name).stem
    return Path(name).stem
