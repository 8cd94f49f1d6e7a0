"""Domain exceptions. Each carries a stable error code; ``api/errors.py`` maps type to status."""

from __future__ import annotations


class FlowledgerError(Exception):
    """Base of every error the domain raises on purpose."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigurationError(FlowledgerError):
    """The environment holds a value the application cannot start with."""

    code = "configuration_error"


class InvalidInput(FlowledgerError):
    """The request is well-formed JSON but breaks a domain rule."""

    code = "invalid_input"


class Unauthenticated(FlowledgerError):
    """No valid credentials came with the request."""

    code = "unauthorized"


class Forbidden(FlowledgerError):
    """The caller is known but may not do this."""

    code = "forbidden"


class NotFound(FlowledgerError):
    code = "not_found"


class Conflict(FlowledgerError):
    """The request conflicts with the current state of the resource."""

    code = "conflict"


class ConditionFailed(Conflict):
    """A condition on one of the caller's own items in an audited write did not hold."""

    code = "condition_failed"

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


class SubjectErased(FlowledgerError):
    """The subject's data was erased (``subjects/erasure.py``): what was asked for no longer exists, for good."""

    code = "erased"


class LegalHold(Conflict):
    """A legal hold on the subject stops erasure until it is lifted; the message gives the hold's reason."""

    code = "legal_hold"


class UndecodableItem(Conflict):
    """A stored item no longer reads as what it should be: the request cannot go on until it is repaired.

    The message names the item by its ids only; its values may hold PHI.
    """

    code = "undecodable_item"

    def __init__(self, message: str, item: str) -> None:
        super().__init__(message)
        self.item = item


class LedgerContention(FlowledgerError):
    """The chain position stayed contended after every allowed retry; nothing was written."""

    code = "ledger_contention"


class BacklogContention(FlowledgerError):
    """Concurrent enqueues kept taking the next ticket number; nothing was written."""

    code = "backlog_contention"


class UpstreamUnavailable(FlowledgerError):
    """A service the request depends on (an embedding model, say) did not answer; retry later."""

    code = "upstream_unavailable"


class Throttled(UpstreamUnavailable):
    """AWS refused the request for capacity after the SDK's own retries; retry after ``retry_after_seconds``.

    A refused write is all or nothing: DynamoDB transactions and single-item writes apply whole or not at all.
    """

    code = "throttled"

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class PayloadTooLarge(FlowledgerError):
    code = "payload_too_large"


class MalformedBody(FlowledgerError):
    """The body cannot be read as JSON at all: not UTF-8, not JSON, or nested too deep."""

    code = "malformed_body"


class UnsupportedMediaType(FlowledgerError):
    """The body is not sent as ``application/json``."""

    code = "unsupported_media_type"


class MethodNotAllowed(FlowledgerError):
    """The path exists but not with this method."""

    code = "method_not_allowed"

    def __init__(self, message: str, allowed: list[str]) -> None:
        super().__init__(message)
        self.allowed = allowed


class RateLimited(FlowledgerError):
    """Too many requests in the current window; retry after ``retry_after_seconds``."""

    code = "rate_limited"

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class UnknownJob(FlowledgerError):
    code = "unknown_job"
