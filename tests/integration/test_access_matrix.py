"""Every route refused eight ways, end to end: the local gateway in front of the deployed handlers
and the chat app, on moto.

Each route's request is its first row in the audit table. With the right credentials it gets
through (the control test); refused, it answers 401, 403 or 404 with a body that holds only
``error``, ``message`` and ``request_id``, never any stored text, and nothing is written. A bad
token or signature never reaches a function: the gateway refuses it, as API Gateway's authorizer
and IAM auth do in AWS. ``GET /health`` is public and not in the matrix.

| case | client route (bearer token) | admin route (SigV4) |
|---|---|---|
| no_credentials | no Authorization: 401 | no Authorization: 403 |
| expired_token | the caller's token, expired an hour ago: 401 | signed 10 minutes ago: 403 |
| wrong_scope | every scope but the route's: 403 | a bearer token with every scope: 403 |
| another_owner | the caller's counterpart, on the caller's resource: 403/404 | (admins read all) |
| unsigned_admin_call | the admin's valid SigV4 signature, no token: 401 | no real signature: 403 |
| wrong_secret | HS256 keyed with the issuer's public key: 401 | the access key, another secret: 403 |
| foreign_signing_key | RS256 by another key under the issuer's kid: 401 | another access key: 403 |
| alg_none | an ``alg: none`` token: 401 | an ``alg: none`` bearer token: 403 |
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends
from starlette.types import ASGIApp, Receive, Scope, Send

from flowledger.api.access import Access
from flowledger.api.chat_app import create_app
from flowledger.api.registry import rest_routes
from flowledger.api.routes import RouteSpec
from flowledger.api.tokens import SCOPES, TokenVerifier, mint_token
from flowledger.local.datadir import LOCAL_AUDIENCE, LOCAL_ISSUER, AdminCredentials, DataDir
from flowledger.local.functions import LocalLambdaContext
from flowledger.local.gateway import LocalGateway
from flowledger.local.sigv4 import SigV4Verifier
from flowledger.store.tables import TABLES
from tests.integration.audit_table import (
    ANOTHER,
    MARKER,
    Client,
    Env,
    Route,
    Values,
    chat_routes,
    deployment,
    every_route,
    one_moto,
    request_of,
    route_requests,
)
from tests.jwks import jwks_served
from tests.signing import sigv4_headers

BASE = "http://gateway.test"
CASES = (
    "no_credentials",
    "expired_token",
    "wrong_scope",
    "another_owner",
    "unsigned_admin_call",
    "wrong_secret",
    "foreign_signing_key",
    "alg_none",
)
# Refusals that a function makes itself (the gateway let the caller in); every other one is the gateway's.
FUNCTION_REFUSALS = {"wrong_scope", "another_owner"}
SCHEMA_BREAKING = b'{"not_a_field": true}'
REQUESTS = route_requests()
GUARDED = [spec for spec in every_route() if spec.access is not Access.PUBLIC]


def applies(case: str, spec: RouteSpec, route: Route) -> bool:
    if case == "wrong_scope":
        return spec.access is Access.IAM or spec.scope is not None  # /api/me takes any valid token
    if case == "another_owner":
        return spec.access is Access.JWT and route.other is not None
    return True


def expected_status(case: str, spec: RouteSpec, route: Route) -> int | None:
    if spec.access is Access.IAM:
        return 403
    return {"wrong_scope": 403, "another_owner": route.other}.get(case, 401)


MATRIX = [
    pytest.param(spec, case, id=f"{spec.method} {spec.path} {case}")
    for spec in GUARDED
    if (spec.method, spec.path) in REQUESTS
    for case in CASES
    if applies(case, spec, REQUESTS[(spec.method, spec.path)])
]


class InProcessFunctions:
    """Invokes the deployed handlers in this process: one warm environment per function."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.invocations = 0

    async def invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any]:
        self.invocations += 1
        response: dict[str, Any] = self.env.handler(function)(event, LocalLambdaContext(function, "req"))
        return response


class CountedApp:
    """The chat app, counting the requests that reach it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.invocations = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.invocations += 1
        await self.app(scope, receive, send)


@dataclass
class Deployment:
    env: Env
    gateway: LocalGateway
    functions: InProcessFunctions
    chat: CountedApp
    admin: AdminCredentials
    signing_key: rsa.RSAPrivateKey  # the issuer's, loaded once (jwt would parse a PEM on every token)
    public_key: bytes  # its public half (PEM)
    kid: str
    foreign_key: rsa.RSAPrivateKey  # another RSA key
    prepared: dict[tuple[str, str], Values] = field(default_factory=dict)

    def values_for(self, route: Route) -> Values:
        """What the route's request names, made once for all its refusals (a refusal changes nothing)."""
        key = (route.method, route.path)
        if key not in self.prepared:
            self.prepared[key] = route.prepare(self.env)
        return self.prepared[key]

    @property
    def invocations(self) -> int:
        return self.functions.invocations + self.chat.invocations

    def stored(self) -> dict[str, int]:
        """Items per table; the rate-limit counters are left out (a narrative read counts before it is checked).

        Counted in moto's backend, which is in this process: a ``Scan`` of every table before and after each
        refusal was most of the module's time, and gave the same counts.
        """
        aws = self.env.base.aws
        backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][self.env.base.settings.aws_region]
        return {
            table.name: len(backend.get_table(aws.table_name(table.name)))
            for table in TABLES
            if table.name != "rate_limits"
        }

    def token(self, client: Client, now: float | None = None) -> str:
        return mint_token(
            private_key_pem=self.signing_key,
            kid=self.kid,
            issuer=LOCAL_ISSUER,
            audience=LOCAL_AUDIENCE,
            sub=client.sub,
            scopes=sorted(client.scopes),
            patient_id=client.patient_id,
            now=now,
        )

    def send(self, method: str, target: str, content: bytes, headers: dict[str, str]) -> httpx.Response:
        async def request() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.gateway)
            async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
                return await client.request(method, target, content=content, headers=headers)

        return asyncio.run(request())


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One deployment for the whole matrix: a few hundred cheap requests share its tables."""
    with one_moto() as clients, pytest.MonkeyPatch.context() as monkeypatch:
        env = Env(deployment(clients, "matrix"), monkeypatch)
        data_dir = DataDir(tmp_path_factory.mktemp("matrix") / "data")
        data_dir.ensure("us-east-1")
        # Loading an RSA key is slow: each key is read once for the module.
        signing_key = serialization.load_pem_private_key(data_dir.private_key_pem(), password=None)
        assert isinstance(signing_key, rsa.RSAPrivateKey)
        public_key = signing_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        foreign = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        with jwks_served(data_dir.jwks()) as jwks_url:
            functions = InProcessFunctions(env)
            chat = CountedApp(create_app(lambda: env.services))
            gateway = LocalGateway(
                routes=rest_routes(),
                functions=functions,
                tokens=TokenVerifier(jwks_url, LOCAL_ISSUER, LOCAL_AUDIENCE),
                sigv4=SigV4Verifier(data_dir.admin_credentials()),
            )
            gateway.mount("chat", chat, chat_routes())
            admin = data_dir.admin_credentials()
            yield Deployment(env, gateway, functions, chat, admin, signing_key, public_key, data_dir.key_id(), foreign)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(token: str, header: dict[str, str], sign: Any) -> str:
    """The token's claims under another header, with the signature ``sign`` makes of the signing input."""
    claims = jwt.decode(token, options={"verify_signature": False})
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{_b64(sign(signing_input.encode()))}"


def signed(
    credentials: AdminCredentials, method: str, target: str, content: bytes, at: datetime | None = None
) -> dict[str, str]:
    return sigv4_headers(credentials, method, f"{BASE}{target}", content, region="us-east-1", at=at)


def credentials_for(
    d: Deployment, case: str, spec: RouteSpec, route: Route, target: str, content: bytes
) -> dict[str, str]:
    """The Authorization (and date) headers of one case; the table in the module docstring says which."""
    admin, kid = d.admin, d.kid
    everything = Client("intruder", SCOPES)
    if case == "no_credentials":
        return {}
    if spec.access is Access.JWT:
        caller = route.caller
        assert isinstance(caller, Client)
        tokens = {
            "expired_token": lambda: d.token(caller, now=time.time() - 7200),
            "wrong_scope": lambda: d.token(replace(caller, scopes=SCOPES - {spec.scope})),
            "another_owner": lambda: d.token(ANOTHER[caller]),
            "wrong_secret": lambda: forged(
                d.token(caller),
                {"alg": "HS256", "typ": "JWT", "kid": kid},
                lambda data: hmac.new(d.public_key, data, hashlib.sha256).digest(),
            ),
            "foreign_signing_key": lambda: jwt.encode(
                jwt.decode(d.token(caller), options={"verify_signature": False}),
                d.foreign_key,
                algorithm="RS256",
                headers={"kid": kid},
            ),
            "alg_none": lambda: forged(d.token(caller), {"alg": "none", "typ": "JWT", "kid": kid}, lambda _: b""),
        }
        if case == "unsigned_admin_call":
            return signed(admin, spec.method, target, content)
        return {"Authorization": f"Bearer {tokens[case]()}"}
    if case == "expired_token":
        return signed(admin, spec.method, target, content, at=datetime.now(UTC) - timedelta(minutes=10))
    if case in ("wrong_scope", "alg_none"):
        token = d.token(everything)
        if case == "alg_none":
            token = forged(token, {"alg": "none", "typ": "JWT", "kid": kid}, lambda _: b"")
        return {"Authorization": f"Bearer {token}"}
    if case == "unsigned_admin_call":
        # The shape of a signature, with the right key and date, but no signature in it.
        now = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        scope = f"{admin.access_key_id}/{now[:8]}/{admin.region}/execute-api/aws4_request"
        unsigned = f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=host;x-amz-date, Signature={'0' * 64}"
        return {"X-Amz-Date": now, "Authorization": unsigned}
    if case == "wrong_secret":
        return signed(replace(admin, secret_access_key="not-" + admin.secret_access_key), spec.method, target, content)
    assert case == "foreign_signing_key"
    foreign = AdminCredentials("AKIAFOREIGNKEY000000", "foreign-secret", admin.region, "arn:aws:iam::1:user/eve")
    return signed(foreign, spec.method, target, content)


def request_parts(route: Route, values: Values) -> tuple[str, bytes, dict[str, str]]:
    """The request target (path and query), the body's bytes and its content headers."""
    _, path, body, query = request_of(route, values)
    target = path + (f"?{urlencode(query)}" if query else "")
    content = json.dumps(body).encode() if body is not None else b""
    headers = {"Accept": "application/json"} | ({"Content-Type": "application/json"} if body is not None else {})
    return target, content, headers


def test_every_guarded_route_has_a_request_in_the_table() -> None:
    assert [f"{s.method} {s.path}" for s in GUARDED if (s.method, s.path) not in REQUESTS] == []
    assert len(MATRIX) > 8 * 20  # routes x cases, less the cases that do not apply


@pytest.mark.parametrize(("spec", "case"), MATRIX)
def test_a_refused_request_answers_an_error_without_data_and_writes_nothing(
    deployed: Deployment, spec: RouteSpec, case: str
) -> None:
    route = REQUESTS[(spec.method, spec.path)]
    target, content, headers = request_parts(route, deployed.values_for(route))
    if case == "wrong_scope" and content:
        # The scope is checked before the body: a body the schema refuses must still be a 403, not a 422.
        content = SCHEMA_BREAKING
    headers |= credentials_for(deployed, case, spec, route, target, content)
    by_function = spec.access is Access.JWT and case in FUNCTION_REFUSALS
    before, invoked = deployed.stored() if by_function else {}, deployed.invocations
    response = deployed.send(spec.method, target, content, headers)
    assert response.status_code == expected_status(case, spec, route), response.text
    answer = response.json()
    assert set(answer) == {"error", "message", "request_id"}
    assert answer["request_id"] == response.headers["x-amzn-requestid"]
    assert MARKER not in response.text
    if by_function:
        assert deployed.invocations == invoked + 1  # refused by the route's own check, not before
        assert deployed.stored() == before
    else:
        assert deployed.invocations == invoked  # refused at the gateway: no function ran


@pytest.mark.parametrize(
    "spec", [s for s in GUARDED if (s.method, s.path) in REQUESTS], ids=lambda s: f"{s.method} {s.path}"
)
def test_the_right_credentials_get_the_same_request_through(deployed: Deployment, spec: RouteSpec) -> None:
    route = REQUESTS[(spec.method, spec.path)]
    target, content, headers = request_parts(route, route.prepare(deployed.env))
    if isinstance(route.caller, Client):
        headers["Authorization"] = f"Bearer {deployed.token(route.caller)}"
    else:
        headers |= signed(deployed.admin, spec.method, target, content)
    response = deployed.send(spec.method, target, content, headers)
    assert response.status_code == route.status, response.text
