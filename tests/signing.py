"""SigV4-signed admin calls, signed as any SigV4 client signs them (botocore), for the tests' HTTP calls."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from unittest import mock

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def sigv4_headers(
    credentials: Any,
    method: str,
    url: str,
    body: bytes = b"",
    *,
    secret: str | None = None,
    region: str | None = None,
    at: datetime | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, str]:
    """The headers of ``method url`` signed for ``execute-api`` with the local admin ``credentials``.

    ``secret`` replaces the secret key (a wrong-secret case), ``region`` the credentials' region, and
    ``at`` the signing time (an expired-signature case); ``headers`` are signed along.
    """
    request = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    auth = SigV4Auth(
        Credentials(credentials.access_key_id, secret or credentials.secret_access_key),
        "execute-api",
        region or credentials.region,
    )
    if at is None:
        auth.add_auth(request)
    else:
        with mock.patch("botocore.auth.get_current_datetime", return_value=at):
            auth.add_auth(request)
    return dict(request.headers)
