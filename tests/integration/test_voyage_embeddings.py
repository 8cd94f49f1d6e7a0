"""Voyage embeddings for pathways: the real adapter against a Voyage-compatible server on loopback
that records what it is sent and answers with deterministic 256-dim vectors, out of order."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import socket
import threading
import traceback
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from flowledger.config import PathwayEmbeddingModel, load_settings
from flowledger.errors import UpstreamUnavailable
from flowledger.jobs import run_job
from flowledger.llm.embeddings import DEGRADED_MODELS, VoyageEmbedding, pathway_embeddings_for
from flowledger.llm.ports import ModelTimeout, ModelTransportError
from flowledger.pathways.extraction import PathwayExtractor
from flowledger.pathways.library import PathwayLibrary
from flowledger.reasoning.models import FlowView
from flowledger.services import Services

KEY = "pa-voyage-secret-key"
STEPS = [{"step_kind": "retrieval", "confidence": 0.95}]


def served_vector(text: str) -> list[float]:
    """What the scripted server answers for ``text``: 256 numbers, unit length as Voyage's are."""
    digest = b"".join(hashlib.sha512(f"{part}:{text}".encode()).digest() for part in range(4))
    raw = [(b - 127.5) / 127.5 for b in digest]
    norm = math.sqrt(sum(x * x for x in raw))
    return [x / norm for x in raw]


def expected_head(text: str) -> list[float]:
    """The first 128 of ``served_vector(text)``, re-normalised: what the adapter must return."""
    head = served_vector(text)[:128]
    norm = math.sqrt(sum(x * x for x in head))
    return [x / norm for x in head]


class ScriptedVoyage:
    """A Voyage-compatible ``POST /v1/embeddings`` on loopback that records each request's path,
    Authorization header and body, and answers every input with ``served_vector`` in reversed order
    (the index says which is which). A script entry overrides one answer: ``{"status": 401}``,
    ``{"raw": "text"}``, ``{"json": obj}`` or ``{"hold": True}`` (answer only once released)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.script: list[dict[str, Any]] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner._lock:
                    owner.requests.append((self.path, self.headers.get("Authorization", ""), body))
                    entry = owner.script.pop(0) if owner.script else {}
                if entry.get("hold"):
                    owner.release.wait(10)
                if "status" in entry:
                    self._send(entry["status"], json.dumps({"detail": f"refused {body['input'][0]}"}))
                elif "raw" in entry:
                    self._send(200, entry["raw"])
                elif "json" in entry:
                    self._send(200, json.dumps(entry["json"]))
                else:
                    data = [
                        {"object": "embedding", "embedding": served_vector(text), "index": i}
                        for i, text in enumerate(body["input"])
                    ]
                    answer = {
                        "object": "list",
                        "data": data[::-1],
                        "model": body["model"],
                        "usage": {"total_tokens": 7},
                    }
                    self._send(200, json.dumps(answer))

            def _send(self, status: int, text: str) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                # The client may have given up already (the timeout test): nothing to answer then.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True).start()

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [body for _, _, body in self.requests]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def voyage(clean_environment: None) -> Iterator[ScriptedVoyage]:
    server = ScriptedVoyage()
    yield server
    server.close()


@pytest.fixture
def voyage_model(voyage: ScriptedVoyage) -> Callable[..., VoyageEmbedding]:
    """The adapter as PATHWAY_EMBEDDING_MODEL=voyage_3_5_lite selects it, pointed at the scripted server."""

    def make(**overrides: Any) -> VoyageEmbedding:
        chosen = {
            "pathway_embedding_model": "voyage_3_5_lite",
            "voyage_api_key": KEY,
            "voyage_base_url": voyage.base_url,
        }
        settings = load_settings(**(chosen | overrides))
        model = pathway_embeddings_for(settings)
        assert isinstance(model, VoyageEmbedding)
        return model

    return make


def test_voyage_is_selected_by_name_and_marked_degraded(voyage_model: Callable[..., VoyageEmbedding]) -> None:
    model = voyage_model()
    # Snapshots and stored vectors are keyed by the model's name: it must be the setting's value.
    assert model.name == PathwayEmbeddingModel.VOYAGE_3_5_LITE.value
    assert model.name in DEGRADED_MODELS
    assert KEY not in repr(model)


def test_request_asks_for_256_document_dims_with_the_bearer_key(
    voyage: ScriptedVoyage, voyage_model: Callable[..., VoyageEmbedding]
) -> None:
    voyage_model().embed(["user_question: chest pain", "user_question: late tax return"])
    assert voyage.requests == [
        (
            "/v1/embeddings",
            f"Bearer {KEY}",
            {
                "input": ["user_question: chest pain", "user_question: late tax return"],
                "model": "voyage-3.5-lite",
                "output_dimension": 256,
                "input_type": "document",
            },
        )
    ]


def test_vectors_are_the_unit_head_128_of_what_voyage_sent_in_input_order(
    voyage_model: Callable[..., VoyageEmbedding],
) -> None:
    texts = ["alpha", "beta", "gamma", "delta"]
    vectors = voyage_model().embed(texts)  # the server answers in reverse order
    assert len(vectors) == len(texts)
    for text, vector in zip(texts, vectors, strict=True):
        assert len(vector) == 128
        assert math.isclose(sum(x * x for x in vector), 1.0, rel_tol=1e-9)
        assert vector == pytest.approx(expected_head(text), rel=1e-9, abs=1e-12)
    # The head alone, not the whole 256 cut short: re-normalising changed it.
    assert vectors[0] != pytest.approx(served_vector("alpha")[:128], rel=1e-6)


def test_a_base_url_with_a_trailing_slash_reaches_the_same_endpoint(
    voyage: ScriptedVoyage, voyage_model: Callable[..., VoyageEmbedding]
) -> None:
    voyage_model(voyage_base_url=voyage.base_url + "/").embed(["alpha"])
    assert [path for path, _, _ in voyage.requests] == ["/v1/embeddings"]


def test_more_texts_than_one_request_takes_go_in_batches_in_order(
    voyage: ScriptedVoyage, voyage_model: Callable[..., VoyageEmbedding]
) -> None:
    texts = [f"user_question: ref {n}" for n in range(1001)]  # Voyage takes at most 1,000 per request
    vectors = voyage_model().embed(texts)
    assert [len(body["input"]) for body in voyage.bodies] == [1000, 1]
    assert [text for body in voyage.bodies for text in body["input"]] == texts
    assert vectors[0] == pytest.approx(expected_head(texts[0]), rel=1e-9, abs=1e-12)
    assert vectors[999] == pytest.approx(expected_head(texts[999]), rel=1e-9, abs=1e-12)
    assert vectors[1000] == pytest.approx(expected_head(texts[1000]), rel=1e-9, abs=1e-12)


def test_nothing_to_embed_sends_nothing(voyage: ScriptedVoyage, voyage_model: Callable[..., VoyageEmbedding]) -> None:
    assert voyage_model().embed([]) == []
    assert voyage.requests == []


@pytest.mark.parametrize("status", [401, 429, 500, 503])
def test_an_http_error_is_a_transport_error_naming_neither_key_nor_text(
    voyage: ScriptedVoyage, voyage_model: Callable[..., VoyageEmbedding], status: int
) -> None:
    voyage.script = [{"status": status}]
    with pytest.raises(ModelTransportError) as caught:
        voyage_model().embed(["user_question: a private symptom"])
    message = str(caught.value)
    assert f"HTTP {status}" in message
    assert KEY not in message and "private symptom" not in message
    assert caught.value.__cause__ is None  # no chained httpx error carrying the request along
    assert len(voyage.requests) == 1  # no retry here: the caller's policy decides


def test_401_says_to_check_the_key(voyage: ScriptedVoyage, voyage_model: Callable[..., VoyageEmbedding]) -> None:
    voyage.script = [{"status": 401}]
    with pytest.raises(ModelTransportError, match="check VOYAGE_API_KEY"):
        voyage_model().embed(["alpha"])


def _answer(vectors: list[Any], indexes: list[Any] | None = None) -> dict[str, Any]:
    indexes = list(range(len(vectors))) if indexes is None else indexes
    return {"data": [{"embedding": v, "index": i} for v, i in zip(vectors, indexes, strict=True)]}


GOOD = served_vector("alpha")


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param({"raw": "not json"}, id="not-json"),
        pytest.param({"json": {"embeddings": [GOOD, GOOD]}}, id="no-data"),
        pytest.param({"json": _answer([GOOD])}, id="too-few"),
        pytest.param({"json": _answer([GOOD, GOOD, GOOD])}, id="too-many"),
        pytest.param({"json": _answer([GOOD, GOOD], [0, 0])}, id="duplicate-index"),
        pytest.param({"json": _answer([GOOD, GOOD], [0, 2])}, id="index-out-of-range"),
        pytest.param({"json": _answer([GOOD, GOOD], [0, "1"])}, id="index-not-int"),
        pytest.param({"json": _answer([GOOD, GOOD[:128]])}, id="128-not-256"),
        pytest.param({"json": _answer([GOOD, [*GOOD, 0.5]])}, id="257-numbers"),
        pytest.param({"json": _answer([GOOD, ["0.1", *GOOD[1:]]])}, id="a-string"),
        pytest.param({"json": _answer([GOOD, [True, *GOOD[1:]]])}, id="a-boolean"),
        pytest.param({"json": _answer([GOOD, [0.0] * 128 + GOOD[128:]])}, id="zero-head"),
        pytest.param({"raw": json.dumps(_answer([GOOD, [math.nan, *GOOD[1:]]]))}, id="nan"),
    ],
)
def test_a_malformed_answer_is_a_transport_error(
    voyage: ScriptedVoyage, voyage_model: Callable[..., VoyageEmbedding], entry: dict[str, Any]
) -> None:
    voyage.script = [entry]
    with pytest.raises(ModelTransportError, match="malformed") as caught:
        voyage_model().embed(["user_question: a private symptom", "beta"])
    assert KEY not in str(caught.value) and "private symptom" not in str(caught.value)


def test_a_server_slower_than_the_timeout_is_a_model_timeout(
    voyage: ScriptedVoyage, voyage_model: Callable[..., VoyageEmbedding]
) -> None:
    voyage.script = [{"hold": True}]  # answers only when the test ends
    with pytest.raises(ModelTimeout) as caught:
        voyage_model(model_timeout_seconds=0.2).embed(["alpha"])
    assert KEY not in str(caught.value)


def test_an_unreachable_server_is_a_transport_error(clean_environment: None) -> None:
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = load_settings(
        pathway_embedding_model="voyage_3_5_lite", voyage_api_key=KEY, voyage_base_url=f"http://127.0.0.1:{port}/v1"
    )
    with pytest.raises(ModelTransportError, match="could not reach") as caught:
        pathway_embeddings_for(settings).embed(["alpha"])
    assert KEY not in str(caught.value)


def test_a_key_pasted_with_a_trailing_newline_is_sent_without_it(
    voyage: ScriptedVoyage, voyage_model: Callable[..., VoyageEmbedding]
) -> None:
    voyage_model(voyage_api_key=f"{KEY}\n").embed(["alpha"])
    assert [authorization for _, authorization, _ in voyage.requests] == [f"Bearer {KEY}"]


def test_a_key_httpx_refuses_never_shows_in_the_error_or_its_traceback(voyage: ScriptedVoyage) -> None:
    # Settings refuse such a key at start; the adapter still keeps httpx's message (which quotes it) out.
    model = VoyageEmbedding("pa-sec\nret", voyage.base_url, 5.0)
    with pytest.raises(ModelTransportError) as caught:
        model.embed(["alpha"])
    shown = "".join(traceback.format_exception(caught.value))
    assert "pa-sec" not in shown and voyage.requests == []


# Through the pathway library: backfill with Voyage, then match.


def _seed(services: Services, make: Callable[[str, str], FlowView], refs: list[str]) -> None:
    for n, ref in enumerate(refs):
        assert PathwayExtractor(services).extract(make(f"fl_01JVOYAGE{n:016d}", ref), STEPS, "agent").created


def _with_voyage(services: Services, voyage: ScriptedVoyage) -> Services:
    settings = load_settings(
        pathway_embedding_model="voyage_3_5_lite", voyage_api_key=KEY, voyage_base_url=voyage.base_url
    )
    return Services(settings=settings, aws=services.aws, clock=services.clock)


def test_pathways_backfill_and_match_with_voyage(
    services: Services, voyage: ScriptedVoyage, qualifying_flow: Callable[[str, str], FlowView]
) -> None:
    _seed(services, qualifying_flow, ["chat/one", "chat/two", "chat/three"])
    with_voyage = _with_voyage(services, voyage)
    assert run_job("pathway_embedding_backfill", with_voyage)["embedded"] == 3
    assert run_job("pathway_embedding_backfill", with_voyage)["embedded"] == 0  # nothing left to re-embed
    assert {body["output_dimension"] for body in voyage.bodies} == {256}
    stats = PathwayLibrary(with_voyage).stats()
    assert stats.by_model == {"voyage_3_5_lite": 3} and stats.embedded == 3
    result = PathwayLibrary(with_voyage).match("user:op", "user_question", "chat/one", 3)
    assert result.query_model == "voyage_3_5_lite"
    assert result.candidates[0].pathway.trigger_ref == "chat/one"
    assert result.candidates[0].reason == "exact_ref+semantic"
    assert voyage.bodies[-1]["input"] == ["user_question: chat/one"]


def test_a_failing_voyage_makes_the_match_upstream_unavailable(
    services: Services, voyage: ScriptedVoyage, qualifying_flow: Callable[[str, str], FlowView]
) -> None:
    _seed(services, qualifying_flow, ["chat/one"])
    with_voyage = _with_voyage(services, voyage)
    assert run_job("pathway_embedding_backfill", with_voyage)["embedded"] == 1
    voyage.script = [{"status": 500}]
    with pytest.raises(UpstreamUnavailable, match="voyage_3_5_lite") as caught:
        PathwayLibrary(with_voyage).match("user:op", "user_question", "chat/one", 3)
    assert KEY not in str(caught.value)


def test_a_deployment_reads_the_key_from_its_secret_and_picks_up_a_rotation(
    voyage: ScriptedVoyage, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3
    from moto import mock_aws

    from flowledger.llm.aws_model_config import reader_for

    monkeypatch.setenv("AWS_REGION", "us-east-1")
    reader_for.cache_clear()
    with mock_aws():
        secrets = boto3.client("secretsmanager", region_name="us-east-1")
        arn = secrets.create_secret(Name="voyage-key", SecretString="pa-from-the-secret")["ARN"]
        settings = load_settings(
            pathway_embedding_model="voyage_3_5_lite", voyage_api_key_secret_arn=arn, voyage_base_url=voyage.base_url
        )
        model = pathway_embeddings_for(settings)
        model.embed(["one"])
        secrets.put_secret_value(SecretId=arn, SecretString="pa-rotated")
        model.embed(["cached"])
        reader_for(settings.aws_region, settings.aws_endpoint_url).secrets.clear_cache()  # as when max age passes
        model.embed(["two"])
    reader_for.cache_clear()
    assert [auth for _, auth, _ in voyage.requests] == ["Bearer pa-from-the-secret"] * 2 + ["Bearer pa-rotated"]


def test_an_unreadable_key_secret_makes_the_match_unavailable(
    clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto import mock_aws

    from flowledger.llm.aws_model_config import ModelUnavailable, reader_for

    monkeypatch.setenv("AWS_REGION", "us-east-1")
    reader_for.cache_clear()
    missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:nothing-AbCdEf"
    with mock_aws():
        settings = load_settings(pathway_embedding_model="voyage_3_5_lite", voyage_api_key_secret_arn=missing)
        with pytest.raises(ModelUnavailable):
            pathway_embeddings_for(settings).embed(["one"])
    reader_for.cache_clear()


def test_a_key_secret_that_cannot_go_in_a_header_makes_the_match_unavailable(
    clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3
    from moto import mock_aws

    from flowledger.llm.aws_model_config import ModelUnavailable, reader_for

    monkeypatch.setenv("AWS_REGION", "us-east-1")
    reader_for.cache_clear()
    with mock_aws():
        secrets = boto3.client("secretsmanager", region_name="us-east-1")
        arn = secrets.create_secret(Name="voyage-key", SecretString="pa-“smart”")["ARN"]
        settings = load_settings(pathway_embedding_model="voyage_3_5_lite", voyage_api_key_secret_arn=arn)
        with pytest.raises(ModelUnavailable):  # a 503, not the UnicodeEncodeError a header would raise
            pathway_embeddings_for(settings).embed(["one"])
    reader_for.cache_clear()
