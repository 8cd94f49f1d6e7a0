"""Whether the embedded store can currently save what it is asked to, and the 503 it answers when not.

When the journal or a snapshot cannot be written (a full disk, a read-only one, a quota), the store
is *not durable*: mutating requests are refused with 503 and ``Retry-After`` (botocore retries a
503 and then raises it; the API answers its caller 503 in turn), reads go on, ``/health`` says
so, and one line is logged naming the cause. The snapshot thread retries every second; the first
snapshot that succeeds makes the store durable again (nothing then depends on the failed write).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any
from xml.sax.saxutils import escape

logger = logging.getLogger("flowledger.local")
RETRY_AFTER_SECONDS = 1


class Durability:
    """The store's durability and what the server refused or could not save while it was lost."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cause: str | None = None
        self.failures = 0  # how many times saving failed, ever (a snapshot begun before one proves nothing after)
        self.refused = 0  # mutating requests answered 503 without being run
        self.unsaved = 0  # changes applied in memory that no journal record holds (answered 503)

    @property
    def durable(self) -> bool:
        return self.cause is None

    def fail(self, what: str, exc: BaseException) -> None:
        """Record that ``what`` could not be written; logs one line when the store stops being durable."""
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        with self._lock:
            self.failures += 1
            first = self.cause is None
            if first:  # the first cause is the one to fix; retries failing after it say nothing new
                self.cause = f"{what}: {reason}"
        if first:
            logger.error("the embedded store is not durable (%s); writes get 503 until it can save again", self.cause)

    def recover(self, failures_seen: int) -> bool:
        """Durable again, if nothing failed since ``failures_seen`` was read; True when it changed."""
        with self._lock:
            if self.cause is None or self.failures != failures_seen:
                return False
            cause, self.cause = self.cause, None
        logger.warning("the embedded store is durable again (it had failed: %s)", cause)
        return True

    def health(self) -> dict[str, Any]:
        """What ``/health`` reports as ``store``."""
        return {"durable": True} if self.cause is None else {"durable": False, "cause": self.cause}


def refuse(environ: dict[str, Any], cause: str, start_response: Callable[..., Any]) -> list[bytes]:
    """A 503 shaped as the service would send it, so botocore reads ``ServiceUnavailable`` and retries."""
    message = f"the embedded store cannot save writes now ({cause}); retry later"
    if environ.get("HTTP_X_AMZ_TARGET"):  # the JSON protocols: DynamoDB, KMS, Logs
        body = json.dumps({"__type": "ServiceUnavailable", "message": message}).encode()
        content_type = "application/x-amz-json-1.0"
    else:  # S3's XML
        body = f"<Error><Code>ServiceUnavailable</Code><Message>{escape(message)}</Message></Error>".encode()
        content_type = "application/xml"
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Retry-After", str(RETRY_AFTER_SECONDS)),
    ]
    start_response("503 Service Unavailable", headers)
    return [body]
