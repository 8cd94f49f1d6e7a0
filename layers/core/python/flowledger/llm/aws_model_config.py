"""The chat model's settings as a deployment keeps them: the API key in Secrets Manager, the base URL
and the model name in SSM Parameter Store (String parameters), named by the function's environment.

Values are read through powertools' parameters utility and cached by one reader per process for
``FLOWLEDGER_MODEL_CONFIG_MAX_AGE_SECONDS``: a warm function, or a second build of the chat use case,
makes no call, and a rotated key is picked up once the cached one is older than that. A value given
directly in the environment (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``FLOWLEDGER_CHAT_MODEL``) is
used as it is and never read from AWS.

A named value that cannot be read (missing, access denied, empty, not a URL) makes the chat model
unavailable: :class:`ModelUnavailable` (503, ``MODEL_UNAVAILABLE``) before any run is written, with one
log line naming what failed and why. The failure is remembered for :data:`FAILURE_MEMORY_SECONDS`, so a
burst of requests neither calls AWS again nor logs again, and a fixed secret is found without a restart.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from flowledger.config import Settings
from flowledger.errors import UpstreamUnavailable
from flowledger.llm.endpoint import ModelEndpoint

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider, SSMProvider

logger = logging.getLogger("flowledger.llm")
T = TypeVar("T")
# How long a failed read answers for itself before the next request tries AWS again.
FAILURE_MEMORY_SECONDS = 30.0
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")  # what an API key sent as a bearer token may hold
PUBLIC_MESSAGE = "the model is not available: its configuration could not be read; retry later"
_MAX_MODEL_NAME = 200


class ModelUnavailable(UpstreamUnavailable):
    """The model's configuration could not be read: no turn (or embedding) can run until it can."""

    code = "MODEL_UNAVAILABLE"


class _Unreadable(Exception):
    """One named value could not be used; the message says which and why (never the value)."""


class ModelConfigReader:
    """Reads the named values through two powertools providers; one per process (see :func:`reader_for`)."""

    def __init__(
        self, secrets: SecretsProvider, parameters: SSMProvider, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.secrets = secrets  # public: their clients are where a test counts the calls made
        self.parameters = parameters
        self._clock = clock
        # The last failure per set of names: (retry after, what failed).
        self._failures: dict[tuple[str | None, ...], float] = {}
        self._lock = threading.Lock()

    def endpoint(self, settings: Settings) -> ModelEndpoint:
        """The endpoint with every value the settings name read from AWS (or from the cache)."""
        names = (settings.openai_api_key_secret_arn, settings.openai_base_url_parameter, settings.chat_model_parameter)
        return self._remembering_failure(names, lambda: self._read(settings))

    def secret(self, arn: str, variable: str, max_age: int) -> str:
        """One secret's text (a key other than the chat model's), with the same cache and failure memory."""
        return self._remembering_failure(
            (arn,), lambda: self._value(lambda: self.secrets.get(arn, max_age=max_age), f"secret {arn} ({variable})")
        )

    def _remembering_failure(self, names: tuple[str | None, ...], read: Callable[[], T]) -> T:
        """``read()``, or :class:`ModelUnavailable` (logged once) while a failed read of ``names`` is remembered."""
        with self._lock:  # one reader per process; two first requests must not both call and both log
            retry_after = self._failures.get(names)
            if retry_after is not None and self._clock() < retry_after:
                raise ModelUnavailable(PUBLIC_MESSAGE)
            try:
                value = read()
            except _Unreadable as exc:
                self._failures[names] = self._clock() + FAILURE_MEMORY_SECONDS
                # One line, no traceback: the cause is a deployment's configuration, not a bug.
                logger.error("model unavailable: %s (next read in %.0f s)", exc, FAILURE_MEMORY_SECONDS)
                raise ModelUnavailable(PUBLIC_MESSAGE) from None
            self._failures.pop(names, None)
            return value

    def _read(self, settings: Settings) -> ModelEndpoint:
        max_age = settings.model_config_max_age_seconds
        api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        if api_key is None and settings.openai_api_key_secret_arn:
            api_key = self._value(
                lambda: self.secrets.get(settings.openai_api_key_secret_arn or "", max_age=max_age),
                f"secret {settings.openai_api_key_secret_arn} (FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN)",
            )
        base_url = settings.openai_base_url
        if base_url is None and settings.openai_base_url_parameter:
            base_url = self._value(
                lambda: self.parameters.get(settings.openai_base_url_parameter or "", max_age=max_age),
                f"parameter {settings.openai_base_url_parameter} (FLOWLEDGER_OPENAI_BASE_URL_PARAMETER)",
            )
            parts = urlsplit(base_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise _Unreadable(
                    f"parameter {settings.openai_base_url_parameter} (FLOWLEDGER_OPENAI_BASE_URL_PARAMETER) "
                    "does not hold an http(s) URL"
                )
        model = settings.chat_model
        if "chat_model" not in settings.model_fields_set and settings.chat_model_parameter:
            model = self._value(
                lambda: self.parameters.get(settings.chat_model_parameter or "", max_age=max_age),
                f"parameter {settings.chat_model_parameter} (FLOWLEDGER_CHAT_MODEL_PARAMETER)",
            )
            if len(model) > _MAX_MODEL_NAME or any(c.isspace() for c in model):
                raise _Unreadable(
                    f"parameter {settings.chat_model_parameter} (FLOWLEDGER_CHAT_MODEL_PARAMETER) "
                    "does not hold a model name"
                )
        return ModelEndpoint(api_key, base_url, model)

    @staticmethod
    def _value(read: Callable[[], object], what: str) -> str:
        from aws_lambda_powertools.utilities.parameters import GetParameterError

        try:
            value = read()
        except GetParameterError as exc:  # powertools wraps every SDK error (its text names the AWS error code)
            raise _Unreadable(f"{what} could not be read: {exc}") from None
        if isinstance(value, bytes):  # a binary secret: the key is its UTF-8 text
            try:
                value = value.decode()
            except UnicodeDecodeError:
                raise _Unreadable(f"{what} is binary, not text") from None
        text = str(value).strip() if value is not None else ""
        if not text:
            raise _Unreadable(f"{what} is empty")
        return text


@cache
def reader_for(region: str, endpoint_url: str | None) -> ModelConfigReader:
    """The process's reader for one region (and endpoint): its cache outlives every use-case build."""
    import boto3
    from aws_lambda_powertools.utilities.parameters import SecretsProvider, SSMProvider
    from botocore.config import Config

    session = boto3.session.Session()
    # Few, short attempts: a chat request waits on this read.
    config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=3, read_timeout=5)

    def client(service: str) -> Any:
        return session.client(service, region_name=region, endpoint_url=endpoint_url, config=config)

    return ModelConfigReader(
        SecretsProvider(boto3_client=client("secretsmanager")), SSMProvider(boto3_client=client("ssm"))
    )


def endpoint_from_aws(settings: Settings) -> ModelEndpoint:
    """The chat model's endpoint with the named values read from AWS; :class:`ModelUnavailable` if one cannot be."""
    return reader_for(settings.aws_region, settings.aws_endpoint_url).endpoint(settings)


def voyage_key_from_aws(settings: Settings) -> str:
    """The Voyage key in the secret FLOWLEDGER_VOYAGE_API_KEY_SECRET_ARN names; ``ModelUnavailable`` if unreadable."""
    arn = settings.voyage_api_key_secret_arn or ""
    reader = reader_for(settings.aws_region, settings.aws_endpoint_url)
    key = reader.secret(arn, "FLOWLEDGER_VOYAGE_API_KEY_SECRET_ARN", settings.model_config_max_age_seconds)
    if not _HEADER_SAFE.fullmatch(key):
        # It goes into an HTTP header as it is (a pasted smart quote would fail there, as a 500); never shown.
        logger.error("model unavailable: secret %s holds a key that is not printable ASCII", arn)
        raise ModelUnavailable(PUBLIC_MESSAGE)
    return key
