"""SigV4 in the browser: the console's signer (aws4fetch, as the pages use it through api.js) makes the
signature botocore makes for the same request, and a signed call through the page is accepted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.browser.conftest import open_console

FIXED = datetime(2026, 11, 30, 12, 34, 56, tzinfo=UTC)

SIGN_IN_PAGE = """async ([path, method, query, body, datetime]) => {
  const api = await import("/console/js/api.js");
  const request = await api.signOperatorRequest(path, {method, query, body: body ?? undefined, datetime});
  return {url: request.url, headers: Object.fromEntries(request.headers.entries())};
}"""


def botocore_authorization(server: Any, method: str, url: str, headers: dict[str, str], body: bytes) -> str:
    """botocore's Authorization for the request the browser signed, with the headers the browser signed."""
    credentials = server.data_dir.admin_credentials()
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    auth = SigV4Auth(
        Credentials(credentials.access_key_id, credentials.secret_access_key), "execute-api", credentials.region
    )
    with mock.patch("botocore.auth.get_current_datetime", return_value=FIXED.replace(tzinfo=None)):
        auth.add_auth(request)
    return str(request.headers["Authorization"])


def signed_in_browser(page: Any, path: str, method: str, query: dict[str, str] | None, body: Any) -> dict[str, Any]:
    return dict(page.evaluate(SIGN_IN_PAGE, [path, method, query, body, FIXED.strftime("%Y%m%dT%H%M%SZ")]))


def test_a_get_with_a_query_is_signed_as_botocore_signs_it(page: Any, console_server: Any) -> None:
    open_console(page, console_server, "flows")
    signed = signed_in_browser(
        page, "/admin/v1/reasoning/flows", "GET", {"trace_id": "tr-1 with space", "limit": "5"}, None
    )
    authorization = signed["headers"]["authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=")
    assert signed["headers"]["x-amz-date"] == "20261130T123456Z"
    parts = urlsplit(signed["url"])
    signed_names = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    headers = {name: signed["headers"][name] for name in signed_names if name != "host"}
    expected = botocore_authorization(console_server, "GET", signed["url"], headers, b"")
    assert parts.netloc == urlsplit(console_server.base_url).netloc
    assert authorization == expected


def test_a_post_with_a_json_body_is_signed_as_botocore_signs_it(page: Any, console_server: Any) -> None:
    open_console(page, console_server, "flows")
    body = {"trigger_type": "user_question", "note": 'ünïcode and "quotes"'}
    signed = signed_in_browser(page, "/admin/v1/reasoning/pathways/compare", "POST", None, body)
    authorization = signed["headers"]["authorization"]
    signed_names = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    headers = {name: signed["headers"][name] for name in signed_names if name != "host"}
    # JSON.stringify's bytes: compact separators, non-ASCII as UTF-8.
    wire = __import__("json").dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    assert authorization == botocore_authorization(console_server, "POST", signed["url"], headers, wire)


def test_a_signed_call_from_the_page_is_accepted_and_a_tampered_one_refused(page: Any, console_server: Any) -> None:
    open_console(page, console_server, "flows")
    statuses = page.evaluate(
        """async () => {
          const api = await import("/console/js/api.js");
          const ok = await api.operatorFetch("/admin/v1/me");
          const signed = await api.signOperatorRequest("/admin/v1/me");
          const headers = new Headers(signed.headers);
          headers.set("x-amz-date", "20200101T000000Z");
          const stale = await fetch(signed.url, {headers});
          return {ok: ok.status, caller: ok.body, stale: stale.status};
        }"""
    )
    assert statuses["ok"] == 200, statuses
    credentials = console_server.data_dir.admin_credentials()
    assert credentials.principal_arn in str(statuses["caller"])
    assert statuses["stale"] == 403
