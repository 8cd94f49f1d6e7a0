"""Checks AWS SigV4 signatures on admin calls to the dev server, as API Gateway's IAM auth does.

The signature is recomputed with botocore's own signer over exactly the headers the client
signed, then compared in constant time: no crypto is written here.

The URL given is the one on the wire (the raw path, still percent-encoded): as execute-api does, the
canonical path is that path URI-encoded once more, so ``é`` (sent as ``%C3%A9``) signs as
``%25C3%25A9``, which is what botocore's clients sign. A client that signs the unencoded path is
refused, as AWS refuses it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import UTC, datetime, timedelta

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from flowledger.errors import Forbidden
from flowledger.local.datadir import AdminCredentials

SERVICE = "execute-api"
MAX_CLOCK_SKEW = timedelta(minutes=5)
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<credential>[^,\s]+),\s*"
    r"SignedHeaders=(?P<signed>[^,\s]+),\s*Signature=(?P<signature>[0-9a-f]{64})$"
)


class SigV4Verifier:
    """Verifies requests signed with one set of local admin credentials."""

    def __init__(self, credentials: AdminCredentials) -> None:
        self._credentials = credentials

    def verify(self, method: str, url: str, headers: dict[str, str], body: bytes, now: datetime | None = None) -> str:
        """The principal ARN of a correctly signed request; :class:`Forbidden` otherwise."""
        match = _AUTH.match(headers.get("authorization", "").strip())
        if not match:
            raise Forbidden("missing or malformed SigV4 Authorization header")
        access_key, _, scope = match["credential"].partition("/")
        date, region, service, terminator = [*scope.split("/"), "", "", ""][:4]
        if access_key != self._credentials.access_key_id:
            raise Forbidden("unknown access key")
        if (region, service, terminator) != (self._credentials.region, SERVICE, "aws4_request"):
            raise Forbidden(f"credential scope must be <date>/{self._credentials.region}/{SERVICE}/aws4_request")
        amz_date = headers.get("x-amz-date", "")
        try:
            signed_at = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise Forbidden("missing or malformed X-Amz-Date header") from None
        if not amz_date.startswith(date) or abs((now or datetime.now(UTC)) - signed_at) > MAX_CLOCK_SKEW:
            raise Forbidden("signature date is outside the allowed clock skew")
        signed_names = match["signed"].split(";")
        if "host" not in signed_names or any(name not in headers for name in signed_names):
            raise Forbidden("a signed header is missing from the request")
        declared_hash = headers.get("x-amz-content-sha256")
        # botocore trusts a declared payload hash, so it must be checked against the body here.
        if declared_hash is not None and declared_hash != hashlib.sha256(body).hexdigest():
            raise Forbidden("x-amz-content-sha256 does not match the body")
        expected = _signature(self._credentials, method, url, {n: headers[n] for n in signed_names}, body, amz_date)
        if not hmac.compare_digest(expected, match["signature"]):
            raise Forbidden("signature does not match")
        return self._credentials.principal_arn


def _signature(
    credentials: AdminCredentials, method: str, url: str, headers: dict[str, str], body: bytes, amz_date: str
) -> str:
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    request.context["timestamp"] = amz_date
    signer = SigV4Auth(
        Credentials(credentials.access_key_id, credentials.secret_access_key), SERVICE, credentials.region
    )
    canonical = signer.canonical_request(request)
    return str(signer.signature(signer.string_to_sign(request, canonical), request))
