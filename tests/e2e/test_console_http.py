"""The console as `flowledger serve` serves it: the shell for every page address, its files compressed,
strict headers, and a config that hands the admin credentials to a loopback page only."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import jwt
import pytest

from flowledger.local.console import (
    PAGE_TOKEN_TTL_SECONDS,
    REMINT_AFTER_SECONDS,
    ConsoleConfigs,
    is_loopback_request,
    local_console_config,
)
from flowledger.local.datadir import DataDir

pytestmark = pytest.mark.e2e


def get(server: Any, path: str, **headers: str) -> httpx.Response:
    return httpx.get(f"{server.base_url}{path}", headers=headers, timeout=30, follow_redirects=False)


@pytest.mark.parametrize(
    "path", ["/console/", "/console/flows", "/console/flows/fl_01JABCDEFGHJKMNPQRSTVWXYZ0", "/console/patient"]
)
def test_every_page_address_gets_the_shell_with_strict_headers(server: Any, path: str) -> None:
    response = get(server, path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/console/js/app.js">' in response.text
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "'unsafe-inline'" not in policy
    # The API is this origin; a large upload's presigned PUT goes to the embedded AWS endpoint, and nowhere else.
    connect = next(d.strip() for d in policy.split(";") if d.strip().startswith("connect-src "))
    assert connect == f"connect-src 'self' {server.data_dir.endpoints().aws_endpoint_url}"
    assert response.headers["x-content-type-options"] == "nosniff"


def test_the_banner_says_where_the_console_is(server: Any) -> None:
    assert f"console          {server.base_url}/console/" in server.output()


def test_the_bare_prefix_redirects_and_a_missing_file_is_a_404(server: Any) -> None:
    moved = get(server, "/console")
    assert moved.status_code == 308 and moved.headers["location"] == "/console/"
    assert get(server, "/console/js/pages/nothing-here.js").status_code == 404
    # A path that climbs out of the console folder (uvicorn decodes %2e) finds nothing.
    climbed = get(server, "/console/%2e%2e/%2e%2e/pyproject.toml")
    assert climbed.status_code == 404 and b"flowledger" not in climbed.content


def test_files_are_sent_compressed_to_a_browser_that_asks(server: Any) -> None:
    vendored = "/console/vendor/aws4fetch-1.0.20/aws4fetch.esm.js"
    plain = get(server, vendored)
    assert plain.status_code == 200 and plain.headers["content-type"].startswith("text/javascript")
    with httpx.stream("GET", f"{server.base_url}{vendored}", headers={"accept-encoding": "gzip"}) as zipped:
        assert zipped.headers["content-encoding"] == "gzip"
        wire = b"".join(zipped.iter_raw())
    assert len(wire) < len(plain.content) / 2


def test_a_revisit_that_has_the_file_gets_a_304_and_no_body(server: Any) -> None:
    first = get(server, "/console/js/app.js", **{"accept-encoding": "gzip"})
    tag = first.headers["etag"]
    again = get(server, "/console/js/app.js", **{"if-none-match": f'W/"other", {tag}'})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag
    assert "script-src 'self'" in again.headers["content-security-policy"]
    assert get(server, "/console/js/app.js", **{"if-none-match": '"stale"'}).status_code == 200
    head = httpx.head(f"{server.base_url}/console/js/app.js", headers={"accept-encoding": "identity"}, timeout=30)
    assert head.status_code == 200 and head.content == b"" and int(head.headers["content-length"]) == len(first.content)


def test_a_loopback_page_gets_the_admin_credentials_and_a_demo_patient_token(server: Any) -> None:
    config = get(server, "/console/config.json").json()
    credentials = server.data_dir.admin_credentials()
    assert config["mode"] == "local" and config["region"] == credentials.region
    assert config["operator"] == {
        "access_key_id": credentials.access_key_id,
        "secret_access_key": credentials.secret_access_key,
    }
    claims = jwt.decode(config["patient_token"], options={"verify_signature": False})
    assert claims["patient_id"] == claims["sub"] == "patient-demo" and claims["scope"] == "reasoning.read"
    # The token is this server's own: the patient route accepts it (403: the demo patient has no such flow).
    narrative = httpx.get(
        f"{server.base_url}/api/reasoning/flows/fl_01JABCDEFGHJKMNPQRSTVWXYZ0",
        headers={"authorization": f"Bearer {config['patient_token']}"},
        timeout=30,
    )
    assert narrative.status_code in (403, 404), narrative.text
    user = jwt.decode(config["user_token"], options={"verify_signature": False})
    assert user["sub"] == "dev-user" and user["scope"] == "chat documents" and "patient_id" not in user
    sessions = httpx.get(
        f"{server.base_url}/api/workspaces", headers={"authorization": f"Bearer {config['user_token']}"}, timeout=30
    )
    assert sessions.status_code == 200, sessions.text


def test_a_page_of_another_name_gets_no_credentials(server: Any) -> None:
    # A site that rebinds its DNS name to 127.0.0.1 asks with its own Host header.
    config = get(server, "/console/config.json", host=f"rebound.example:{server.port}").json()
    assert config == {"mode": "local", "api_base": "", "region": server.data_dir.admin_credentials().region}
    assert "user_token" not in config and "patient_token" not in config
    assert get(server, "/console/config.json", host=f"localhost:{server.port}").json().get("operator")


@pytest.mark.parametrize(
    ("client", "host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1:8000", True),
        ("::1", "[::1]:8000", True),
        ("127.0.0.1", "localhost", True),
        ("192.168.1.20", "127.0.0.1:8000", False),  # served on 0.0.0.0 and opened from another machine
        ("127.0.0.1", "192.168.1.5:8000", False),
        ("127.0.0.1", "localhost.evil.example:8000", False),
        ("not-an-ip", "localhost:8000", False),
    ],
)
def test_loopback_means_from_this_machine_and_by_a_loopback_name(client: str, host: str, expected: bool) -> None:
    scope = {"client": (client, 50000), "headers": [(b"host", host.encode())]}
    assert is_loopback_request(scope) is expected


def test_a_page_config_is_kept_until_half_its_tokens_life_then_minted_again(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = DataDir(tmp_path / "data")
    directory.ensure("us-east-1")
    minted: list[bool] = []

    def mint(directory: DataDir, *, loopback: bool) -> dict[str, Any]:
        minted.append(loopback)
        return local_console_config(directory, loopback=loopback)

    monkeypatch.setattr("flowledger.local.console.local_console_config", mint)
    now = [1000.0]
    configs = ConsoleConfigs(directory, clock=lambda: now[0])
    first = json.loads(configs.body(loopback=True))
    assert "operator" not in json.loads(configs.body(loopback=False))  # each kind of page its own config
    now[0] += REMINT_AFTER_SECONDS - 1
    assert json.loads(configs.body(loopback=True)) == first  # the same tokens: no signing on a page load
    assert minted == [True, False]
    now[0] += 2
    again = json.loads(configs.body(loopback=True))
    assert minted == [True, False, True] and again["operator"] == first["operator"]
    issued = jwt.decode(again["patient_token"], options={"verify_signature": False})
    assert issued["exp"] - time.time() > PAGE_TOKEN_TTL_SECONDS - 60
