"""The console's Cognito sign-in (console/js/cognito.js) against moto's Cognito on loopback.

The page gets a cognito-mode config.json whose Cognito endpoints are paths of the console's own origin
(the dev server's CSP allows only 'self'); playwright forwards those calls to a moto server, which
issues real user-pool tokens and identity-pool credentials. The dev server refuses the moto-issued key
(it knows only its own admin key), so the proof is the signed request the page sends.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from tests.browser.conftest import READY, screenshot, serious_violations
from tests.e2e.conftest import RunningServer

REGION = "us-east-1"  # moto's server answers unsigned Cognito calls from its us-east-1 backend
USER, PASSWORD = "olive.operator", "Correct-Horse-42!"
ADMIN_CALL = """() => {
  window.adminCall = import("/console/js/api.js")
    .then((api) => api.operatorFetch("/admin/v1/me"))
    .then((r) => ({ status: r.status }), (e) => ({ status: e.status, message: e.message }));
}"""


@dataclass
class FakeCognito:
    """moto's Cognito with one operator, and a record of the calls the page made to it."""

    url: str
    config: dict[str, Any]
    calls: list[dict[str, Any]] = field(default_factory=list)

    def forward(self, route: Any) -> None:
        request = route.request
        target = request.headers.get("x-amz-target", "")
        self.calls.append({"target": target.split(".")[-1], "body": json.loads(request.post_data or "{}")})
        answer = httpx.post(
            self.url,
            content=request.post_data or "",
            headers={"content-type": request.headers.get("content-type", ""), "x-amz-target": target},
        )
        route.fulfill(status=answer.status_code, body=answer.content, content_type="application/x-amz-json-1.1")

    def targets(self) -> list[str]:
        return [call["target"] for call in self.calls]


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def cognito_config(moto_url: str) -> dict[str, Any]:
    """A user pool, a browser client, an operator with a permanent password, and an identity pool."""
    aws = {"region_name": REGION, "endpoint_url": moto_url, "aws_access_key_id": "x", "aws_secret_access_key": "x"}
    idp = boto3.client("cognito-idp", **aws)
    pool = idp.create_user_pool(PoolName="console")["UserPool"]["Id"]
    client = idp.create_user_pool_client(
        UserPoolId=pool,
        ClientName="console",
        ExplicitAuthFlows=["ALLOW_USER_PASSWORD_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"],
    )["UserPoolClient"]["ClientId"]
    idp.admin_create_user(UserPoolId=pool, Username=USER)
    idp.admin_set_user_password(UserPoolId=pool, Username=USER, Password=PASSWORD, Permanent=True)
    idp.create_group(UserPoolId=pool, GroupName="operators")
    idp.admin_add_user_to_group(UserPoolId=pool, Username=USER, GroupName="operators")
    identities = boto3.client("cognito-identity", **aws).create_identity_pool(
        IdentityPoolName="console",
        AllowUnauthenticatedIdentities=False,
        CognitoIdentityProviders=[{"ProviderName": f"cognito-idp.{REGION}.amazonaws.com/{pool}", "ClientId": client}],
    )["IdentityPoolId"]
    return {"user_pool_id": pool, "client_id": client, "identity_pool_id": identities}


@pytest.fixture
def cognito(page: Any, console_server: RunningServer, moto_url: str, cognito_config: dict[str, Any]) -> FakeCognito:
    """The page sees a console in cognito mode, its Cognito endpoints forwarded to moto."""
    base = console_server.base_url
    config = {
        "mode": "cognito",
        "api_base": "",
        "region": REGION,
        "cognito": {
            **cognito_config,
            "idp_endpoint": f"{base}/fake-cognito/idp/",
            "identity_endpoint": f"{base}/fake-cognito/identity/",
        },
    }
    fake = FakeCognito(moto_url, config)
    page.route(f"{base}/console/config.json", lambda route: route.fulfill(json=config))
    page.route(re.compile(r".*/fake-cognito/(idp|identity)/$"), fake.forward)
    return fake


def claims(jwt: str) -> dict[str, Any]:
    payload = jwt.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def start_admin_call(page: Any, server: RunningServer) -> None:
    """Open a console address with no page of its own, then make an operator call as a page would."""
    page.goto(f"{server.base_url}/console/cognito-signin-check")
    page.wait_for_selector(READY)
    page.evaluate(ADMIN_CALL)
    page.wait_for_selector("#signin-username")


def test_an_operator_signs_in_by_keyboard_and_the_admin_call_is_signed_with_pool_credentials(
    page: Any, console_server: RunningServer, cognito: FakeCognito, moto_url: str
) -> None:
    start_admin_call(page, console_server)
    assert page.title() == "Sign in · Flowledger" and page.locator("h1").all_inner_texts() == ["Sign in"]
    assert serious_violations(page) == []
    screenshot(page, "cognito-signin")

    page.keyboard.type(USER)  # the user name field has the focus
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    with page.expect_request(lambda r: "/admin/v1/" in r.url) as signed:
        page.keyboard.press("Enter")
    headers = signed.value.headers
    assert page.evaluate("window.adminCall")["status"] == 403  # the dev server knows only its own admin key

    # What moto's identity pool issued for the id token the page sent, as the page should have received it.
    (get_id,) = [c["body"] for c in cognito.calls if c["target"] == "GetId"]
    logins = get_id["Logins"]
    pool = cognito.config["cognito"]["user_pool_id"]
    assert list(logins) == [f"cognito-idp.{REGION}.amazonaws.com/{pool}"]
    assert claims(next(iter(logins.values())))["aud"] == cognito.config["cognito"]["client_id"]
    issued = boto3.client(
        "cognito-identity", region_name=REGION, endpoint_url=moto_url, aws_access_key_id="x", aws_secret_access_key="x"
    ).get_credentials_for_identity(IdentityId="us-east-1:any", Logins=logins)["Credentials"]
    assert (
        headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={issued['AccessKeyId']}/")
        and f"/{REGION}/execute-api/aws4_request" in headers["authorization"]
    )
    assert headers["x-amz-security-token"] == issued["SessionToken"]
    assert cognito.targets() == ["InitiateAuth", "GetId", "GetCredentialsForIdentity"]

    # The form is gone and the page is back; on the next page load (every console page is one) the
    # call and the patient token reuse this tab's session: no second sign-in, no new credentials.
    assert page.locator("h1").all_inner_texts() == ["Page not found"]
    page.reload()
    page.wait_for_selector(READY)
    page.evaluate(ADMIN_CALL)
    assert page.evaluate("window.adminCall")["status"] == 403
    token = page.evaluate("import('/console/js/api.js').then((api) => api.patientToken())")
    assert claims(token)["cognito:username"] == USER
    assert cognito.targets() == ["InitiateAuth", "GetId", "GetCredentialsForIdentity"]


def test_a_wrong_password_says_so_and_sends_no_admin_call(
    page: Any, console_server: RunningServer, cognito: FakeCognito
) -> None:
    admin_calls: list[str] = []
    page.on("request", lambda r: admin_calls.append(r.url) if "/admin/v1/" in r.url else None)
    start_admin_call(page, console_server)
    page.fill("#signin-username", USER)
    page.fill("#signin-password", "not-the-password")
    page.click("button[type=submit]")
    alert = page.locator("#signin-error")
    alert.filter(has_text="Incorrect username or password").wait_for()
    assert alert.inner_text() == "Sign-in failed: Incorrect username or password."
    assert page.locator("#signin-username").is_visible() and admin_calls == []
    assert cognito.targets() == ["InitiateAuth"]
    screenshot(page, "cognito-signin-wrong-password")
