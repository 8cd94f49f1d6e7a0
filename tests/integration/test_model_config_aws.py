"""The chat model configured as a deployment keeps it: the key in Secrets Manager, the base URL and the
model name in SSM, read by the real powertools parameter code against moto, with the real OpenAI adapter
calling a loopback server that records what it was sent."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import httpx
import pytest
from moto import mock_aws

from flowledger.api.chat_app import REQUEST_CONTEXT_HEADER, create_app
from flowledger.config import Settings, load_settings
from flowledger.llm import aws_model_config
from flowledger.llm.aws_model_config import FAILURE_MEMORY_SECONDS, ModelConfigReader, ModelUnavailable, reader_for
from flowledger.llm.embeddings import knowledge_embeddings_for, pathway_embeddings_for
from flowledger.llm.factory import chat_model_for
from flowledger.llm.ports import Message
from flowledger.services import Services

REGION = "us-east-1"
KEY_SECRET = "flowledger/openai-api-key"
BASE_URL_PARAMETER = "/flowledger/model/base-url"
MODEL_PARAMETER = "/flowledger/model/name"
MISSING_SECRET = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:nothing-here-AbCdEf"
USER = {"sub": "alice", "scope": "chat", "patient_id": ""}


class RecordingModelServer:
    """An OpenAI-compatible chat completions and embeddings endpoint on loopback that records each
    request's Authorization header and body, and answers every call with the same text (or vector)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.seen.append((self.headers.get("Authorization", ""), body))
                if self.path.endswith("/embeddings"):
                    self._answer(
                        {
                            "object": "list",
                            "model": body["model"],
                            "data": [
                                {
                                    "object": "embedding",
                                    "index": i,
                                    "embedding": [1.0] + [0.0] * (body["dimensions"] - 1),
                                }
                                for i, _ in enumerate(body["input"])
                            ],
                            "usage": {"prompt_tokens": 1, "total_tokens": 1},
                        }
                    )
                    return
                self._answer(
                    {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                )

            def _answer(self, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True).start()


@pytest.fixture
def model_server() -> Iterator[RecordingModelServer]:
    running = RecordingModelServer()
    yield running
    running.server.shutdown()
    running.server.server_close()


@pytest.fixture(autouse=True)
def fresh_readers() -> Iterator[None]:
    """Each test starts a new process as far as the readers go (their cache and moto's state go together)."""
    reader_for.cache_clear()
    yield
    reader_for.cache_clear()


@pytest.fixture
def aws(clean_environment: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """moto in-process with a key secret and the two parameters (the base URL filled in by the test)."""
    monkeypatch.setenv("AWS_REGION", REGION)
    with mock_aws():
        secrets = boto3.client("secretsmanager", region_name=REGION)
        ssm = boto3.client("ssm", region_name=REGION)
        secret_arn = secrets.create_secret(Name=KEY_SECRET, SecretString="sk-from-the-secret")["ARN"]
        ssm.put_parameter(Name=MODEL_PARAMETER, Value="model-from-ssm", Type="String")
        yield {"secrets": secrets, "ssm": ssm, "secret_arn": secret_arn}


def named(mp: pytest.MonkeyPatch, secret_arn: str | None = None, base_url: bool = True, model: bool = True) -> None:
    """Set the environment a deployed chat function gets from the CDK construct."""
    if secret_arn:
        mp.setenv("FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN", secret_arn)
    if base_url:
        mp.setenv("FLOWLEDGER_OPENAI_BASE_URL_PARAMETER", BASE_URL_PARAMETER)
    if model:
        mp.setenv("FLOWLEDGER_CHAT_MODEL_PARAMETER", MODEL_PARAMETER)


def count_calls(settings: Settings) -> dict[str, int]:
    """Calls made through the process's reader, counted with botocore's event hooks on its two clients."""
    calls: dict[str, int] = {}
    reader = reader_for(settings.aws_region, settings.aws_endpoint_url)

    def seen(model: Any, **_: Any) -> None:
        calls[model.name] = calls.get(model.name, 0) + 1

    reader.secrets.client.meta.events.register("before-call.secrets-manager.GetSecretValue", seen)
    reader.parameters.client.meta.events.register("before-call.ssm.GetParameter", seen)
    return calls


def ask(settings: Settings) -> None:
    chat_model_for(settings).complete([Message("user", "hello")], timeout_seconds=5)


def test_the_key_comes_from_the_secret_and_base_url_and_model_from_parameters(
    aws: dict[str, Any], model_server: RecordingModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws["ssm"].put_parameter(Name=BASE_URL_PARAMETER, Value=model_server.base_url, Type="String")
    named(monkeypatch, aws["secret_arn"])
    settings = load_settings()
    model = chat_model_for(settings)
    assert (model.name, model.offline) == ("model-from-ssm", False)
    model.complete([Message("user", "hello")], timeout_seconds=5)
    ((authorization, body),) = model_server.seen
    assert authorization == "Bearer sk-from-the-secret"
    assert body["model"] == "model-from-ssm"


def test_a_second_build_in_the_same_process_reads_nothing_again(
    aws: dict[str, Any], model_server: RecordingModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws["ssm"].put_parameter(Name=BASE_URL_PARAMETER, Value=model_server.base_url, Type="String")
    named(monkeypatch, aws["secret_arn"])
    settings = load_settings()
    calls = count_calls(settings)
    ask(settings)
    assert calls == {"GetSecretValue": 1, "GetParameter": 2}
    ask(settings)  # a second build (a new use case, as after a failed cold start): all from the cache
    assert calls == {"GetSecretValue": 1, "GetParameter": 2}
    assert [auth for auth, _ in model_server.seen] == ["Bearer sk-from-the-secret"] * 2


def test_values_given_directly_win_and_nothing_is_read(
    aws: dict[str, Any], model_server: RecordingModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    named(monkeypatch, MISSING_SECRET)  # all three named, none of them exists: only a read would fail
    monkeypatch.setenv("OPENAI_API_KEY", "sk-direct")
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.base_url)
    monkeypatch.setenv("FLOWLEDGER_CHAT_MODEL", "direct-model")
    settings = load_settings()
    calls = count_calls(settings)
    ask(settings)
    assert calls == {}
    assert [(auth, body["model"]) for auth, body in model_server.seen] == [("Bearer sk-direct", "direct-model")]


def test_a_direct_key_is_used_with_the_named_parameters(
    aws: dict[str, Any], model_server: RecordingModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws["ssm"].put_parameter(Name=BASE_URL_PARAMETER, Value=model_server.base_url, Type="String")
    named(monkeypatch, aws["secret_arn"])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-direct")
    settings = load_settings()
    calls = count_calls(settings)
    ask(settings)
    assert calls == {"GetParameter": 2}
    assert [(auth, body["model"]) for auth, body in model_server.seen] == [("Bearer sk-direct", "model-from-ssm")]


@pytest.mark.anyio
async def test_a_missing_secret_fails_each_turn_with_model_unavailable_and_logs_once(
    services: Services, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = services.settings.model_copy(update={"openai_api_key_secret_arn": MISSING_SECRET})
    configured = Services(settings=settings, aws=services.aws)
    calls = count_calls(settings)
    app = create_app(services=lambda: configured)
    headers = {"accept": "application/json", REQUEST_CONTEXT_HEADER: json.dumps({"authorizer": USER})}
    caplog.set_level(logging.INFO)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://chat.test") as client:
        answers = [await client.post("/api/chat", json={"query": "hello"}, headers=headers) for _ in range(3)]
    assert [a.status_code for a in answers] == [503] * 3
    assert {a.json()["error"] for a in answers} == {"MODEL_UNAVAILABLE"}
    assert "could not be read" in answers[0].json()["message"]
    assert MISSING_SECRET not in answers[0].text  # the operator's log names the secret, the client does not
    assert calls == {"GetSecretValue": 1}  # the failure is remembered: the next requests fail fast
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert MISSING_SECRET in errors[0].getMessage()
    assert "ResourceNotFoundException" in errors[0].getMessage()
    assert errors[0].exc_info is None  # one line, no traceback
    runs = services.aws.dynamodb.scan(TableName=services.aws.table_name("runs"))
    assert runs["Count"] == 0  # refused before any run was written


def test_a_fixed_secret_is_read_once_the_failure_memory_has_passed(
    aws: dict[str, Any], model_server: RecordingModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider, SSMProvider

    now = [1000.0]
    reader = ModelConfigReader(
        SecretsProvider(boto3_client=aws["secrets"]), SSMProvider(boto3_client=aws["ssm"]), clock=lambda: now[0]
    )
    named(monkeypatch, "late-secret", base_url=False, model=False)
    settings = load_settings()
    with pytest.raises(ModelUnavailable):
        reader.endpoint(settings)
    aws["secrets"].create_secret(Name="late-secret", SecretString="sk-late")
    with pytest.raises(ModelUnavailable):  # still within the failure memory: not read again yet
        reader.endpoint(settings)
    now[0] += FAILURE_MEMORY_SECONDS + 1
    assert reader.endpoint(settings).api_key == "sk-late"


@pytest.mark.parametrize(
    ("value", "problem"), [("not a url", "does not hold an http(s) URL"), ("ftp://x/v1", "does not hold an http(s)")]
)
def test_a_base_url_parameter_that_is_not_a_url_makes_the_model_unavailable(
    aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str, problem: str
) -> None:
    aws["ssm"].put_parameter(Name=BASE_URL_PARAMETER, Value=value, Type="String")
    named(monkeypatch, aws["secret_arn"])
    settings = load_settings()
    with pytest.raises(ModelUnavailable):
        chat_model_for(settings)
    (line,) = [r.getMessage() for r in caplog.records if r.name == aws_model_config.logger.name]
    assert BASE_URL_PARAMETER in line
    assert problem in line


def test_an_empty_secret_makes_the_model_unavailable(
    aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    arn = aws["secrets"].create_secret(Name="blank", SecretString="  ")["ARN"]
    named(monkeypatch, arn, base_url=False, model=False)
    settings = load_settings()
    with pytest.raises(ModelUnavailable):
        chat_model_for(settings)
    assert any("is empty" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("variable", "embeddings_for"),
    [
        ("PATHWAY_EMBEDDING_MODEL", pathway_embeddings_for),
        ("FLOWLEDGER_KNOWLEDGE_EMBEDDING_MODEL", knowledge_embeddings_for),
    ],
)
def test_embeddings_use_the_key_and_base_url_kept_in_aws(
    aws: dict[str, Any],
    model_server: RecordingModelServer,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    embeddings_for: Any,
) -> None:
    """A deployment that keeps the key in Secrets Manager embeds with it (pathways in the reasoning
    function and the jobs, knowledge in chat and documents): the settings accept the named key, and
    the embedding calls carry the secret's value to the server the parameter names."""
    aws["ssm"].put_parameter(Name=BASE_URL_PARAMETER, Value=model_server.base_url, Type="String")
    named(monkeypatch, aws["secret_arn"], model=False)
    monkeypatch.setenv(variable, "openai_text_3_small")
    settings = load_settings()
    calls = count_calls(settings)
    model = embeddings_for(settings)
    assert [len(v) for v in model.embed(["one", "two"])] == [128, 128]
    model.embed(["three"])
    assert [(auth, body["model"]) for auth, body in model_server.seen] == [
        ("Bearer sk-from-the-secret", "text-embedding-3-small")
    ] * 2
    assert calls == {"GetSecretValue": 1, "GetParameter": 1}  # the second call is served from the cache


def test_embeddings_pick_up_a_rotated_key_once_the_cache_has_aged(
    aws: dict[str, Any], model_server: RecordingModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws["ssm"].put_parameter(Name=BASE_URL_PARAMETER, Value=model_server.base_url, Type="String")
    named(monkeypatch, aws["secret_arn"], model=False)
    monkeypatch.setenv("PATHWAY_EMBEDDING_MODEL", "openai_text_3_small")
    settings = load_settings()
    model = pathway_embeddings_for(settings)
    model.embed(["before"])
    aws["secrets"].put_secret_value(SecretId=aws["secret_arn"], SecretString="sk-rotated")
    model.embed(["cached"])
    reader_for(settings.aws_region, settings.aws_endpoint_url).secrets.clear_cache()  # as when max age passes
    model.embed(["after"])
    assert [auth for auth, _ in model_server.seen] == ["Bearer sk-from-the-secret"] * 2 + ["Bearer sk-rotated"]
