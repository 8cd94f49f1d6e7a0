#!/usr/bin/env python3
"""Smoke test of a deployed Flowledger API (or of `flowledger serve`): read-only, mints nothing.

    python scripts/smoke.py https://abc123.execute-api.eu-west-1.amazonaws.com/v1/

The URL is the stack output ``ApiUrl``. AWS credentials come from the standard chain (environment,
profile, SSO, instance role); the region from ``--region``, else the URL's ``execute-api`` host, else
the chain's default. Prints one line per check and exits 1 when any check fails.

Checks: ``GET /health`` answers ``{"status": "ok", ...}`` (the line shows its ``model``: ``server``, or
``offline`` for a trial on the offline model); ``GET /api/me`` without a token is refused with
401 (the token authorizer is in front); ``GET /admin/v1/me`` unsigned is refused with 403 (IAM auth);
``GET /admin/v1/me`` signed with SigV4 for ``execute-api`` answers 200 with the caller's IAM principal.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError
from botocore.session import Session

_EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def region_of(url: str, given: str | None, session: Session) -> str | None:
    """The signing region: the one given, else the API's own (from its host), else the chain's default."""
    if given:
        return given
    match = _EXECUTE_API_HOST.match(httpx.URL(url).host)
    return match.group(1) if match else session.get_config_variable("region")


def signed_headers(session: Session, region: str, url: str) -> dict[str, str]:
    """SigV4 headers of ``GET url`` for API Gateway (service ``execute-api``), from the standard chain."""
    credentials = session.get_credentials()
    if credentials is None:
        raise RuntimeError("no AWS credentials found (environment, profile or role)")
    request = AWSRequest(method="GET", url=url)
    SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region).add_auth(request)
    return dict(request.headers)


def run_checks(base_url: str, region: str | None, session: Session, timeout: float) -> list[Check]:
    """Every check, in order; a check that cannot be made (no credentials, no answer) is a failure."""
    base = base_url.rstrip("/")
    results: list[Check] = []
    with httpx.Client(timeout=timeout) as client:

        def check(name: str, make: Callable[[], tuple[bool, str]]) -> None:
            try:
                ok, detail = make()
            except (httpx.HTTPError, BotoCoreError, RuntimeError, ValueError) as exc:
                ok, detail = False, f"{type(exc).__name__}: {exc}"
            results.append(Check(name, ok, detail))

        def health() -> tuple[bool, str]:
            response = client.get(f"{base}/health")
            body = _json(response)
            if response.status_code == 200 and body.get("status") == "ok":
                return True, f"200, chat model: {body.get('model', 'not said')}"
            return False, _said(response)

        def refused(path: str, status: int) -> Callable[[], tuple[bool, str]]:
            def make() -> tuple[bool, str]:
                response = client.get(f"{base}{path}")
                return response.status_code == status, _said(response)

            return make

        def signed_admin() -> tuple[bool, str]:
            if region is None:
                raise RuntimeError("no region: pass --region")
            url = f"{base}/admin/v1/me"
            response = client.get(url, headers=signed_headers(session, region, url))
            principal = _json(response).get("principal")
            if response.status_code == 200 and principal:
                return True, f"200, principal {principal}"
            return False, _said(response)

        check("GET /health", health)
        check("GET /api/me without a token is refused (401)", refused("/api/me", 401))
        check("GET /admin/v1/me unsigned is refused (403)", refused("/admin/v1/me", 403))
        check("GET /admin/v1/me signed with SigV4", signed_admin)
    return results


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _said(response: httpx.Response) -> str:
    return f"{response.status_code} {response.text[:120].strip()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("api_url", help="the API's base URL: the stack output ApiUrl (or http://127.0.0.1:8000)")
    parser.add_argument("--region", help="the region to sign for (default: from the URL, else the AWS default)")
    parser.add_argument("--profile", help="an AWS profile to take credentials from (default: the standard chain)")
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds per request (default 15)")
    args = parser.parse_args(argv)
    session = Session(profile=args.profile)
    results = run_checks(args.api_url, region_of(args.api_url, args.region, session), session, args.timeout)
    for result in results:
        print(f"{'ok  ' if result.ok else 'FAIL'} {result.name}: {result.detail}")
    failed = sum(not r.ok for r in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
