"""A large upload from the chat page in Chromium against `flowledger serve`: declared, PUT to the presigned URL
on the embedded AWS endpoint (another origin, which the console's CSP and the documents bucket's CORS allow),
then completed, and then read by the tabular engine.

The module runs a server of its own: the dev user's workspaces and documents are state no other test should
see. What the upload stored is checked over the API with the dev user's token, not on the page.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from flowledger.local.datadir import DEV_USER
from tests.browser.conftest import Api, open_console, screenshot
from tests.e2e.conftest import RunningServer, launch_server

INLINE_LIMIT = 180 * 1024  # chat_upload.js sends files up to this size inline
MONTHS = [f"2026-{m:02d}" for m in range(1, 13)]
REGIONS = ("north", "south", "east", "west")
# 12 months x 1,000 rows of amount 2: every month totals 2000, and the file is ~300 KiB.
BIG_CSV = b"month,region,store,amount\n" + b"".join(
    f"{month},{REGIONS[i % 4]},store-{i % 97:03d},2\n".encode() for month in MONTHS for i in range(1000)
)
DONE = ".turn:last-child:not([data-state='streaming'])"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = launch_server(tmp_path_factory.mktemp("chat-large-upload") / "data")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def seed(server: RunningServer) -> Api:
    return Api(server)


@pytest.fixture(scope="module")
def user(seed: Api) -> str:
    return seed.token(DEV_USER, ["chat", "documents"])


def record_progress(page: Any) -> None:
    """Keep each value the upload bar takes, with the status line as it read at that moment."""
    page.evaluate(
        """() => {
          window.__progress = [];
          const bar = document.querySelector('#upload-progress');
          new MutationObserver(() => window.__progress.push({
            value: Number(bar.value), max: Number(bar.max),
            status: document.querySelector('.upload-status').textContent,
          })).observe(bar, {attributes: true, attributeFilter: ['value']});
        }"""
    )


def network(page: Any) -> list[Any]:
    """Every request the page makes, in the order it makes them."""
    requests: list[Any] = []
    page.on("request", lambda request: requests.append(request))
    return requests


def test_a_large_csv_goes_through_the_presigned_put_and_is_analysed(
    page: Any, server: RunningServer, seed: Api, user: str
) -> None:
    assert 280 * 1024 < len(BIG_CSV) < 320 * 1024 and len(BIG_CSV) > INLINE_LIMIT
    endpoints = server.data_dir.endpoints()
    open_console(page, server, "chat")
    page.click(".panel-toggle")
    page.wait_for_selector("#chat-panel .workspace")
    page.click("text=Create my personal workspace")
    page.wait_for_selector("#upload-workspace option", state="attached")
    record_progress(page)
    requests = network(page)
    page.set_input_files("#upload-file", files=[{"name": "big-sales.csv", "mimeType": "text/csv", "buffer": BIG_CSV}])
    page.click(".upload button[type=submit]")
    page.wait_for_selector(".upload-status:has-text('Uploaded big-sales.csv')", timeout=60_000)

    # Declared (size and SHA-256, no inline body), PUT to the presigned URL, then completed: in that order.
    declare = next(r for r in requests if r.method == "POST" and r.url.endswith("/api/documents"))
    declared = json.loads(declare.post_data_buffer)
    assert "content_base64" not in declared
    assert declared["size_bytes"] == len(BIG_CSV)
    assert declared["sha256"] == hashlib.sha256(BIG_CSV).hexdigest()
    answer = declare.response().json()
    document_id = answer["document"]["document_id"]
    (put,) = [r for r in requests if r.method == "PUT"]
    assert put.url == answer["upload"]["url"]
    target = urlsplit(put.url)
    assert f"{target.scheme}://{target.netloc}" == endpoints.aws_endpoint_url  # the embedded AWS endpoint
    assert target.path == f"/{endpoints.buckets['documents']}/files/{document_id}/v1/original"
    assert put.post_data_buffer == BIG_CSV
    assert put.response().status == 200
    assert put.response().header_value("access-control-allow-origin") == server.base_url
    complete = [r for r in requests if r.method == "POST" and r.url.endswith(answer["upload"]["complete_path"])]
    assert len(complete) == 1 and requests.index(complete[0]) > requests.index(put)

    # The bar reached its max while the PUT was still the step under way, driven by its upload progress.
    progress = page.evaluate("window.__progress")
    assert any(p["value"] == p["max"] and p["status"].startswith("Uploading big-sales.csv") for p in progress)
    assert page.get_attribute("#upload-progress", "value") == page.get_attribute("#upload-progress", "max")

    # The store has it, complete: the same bytes as the page read, current, converted.
    document = seed.bearer("GET", f"/api/documents/{document_id}", user, expect=200).json()
    assert (document["file_name"], document["kind"], document["current_version"]) == ("big-sales.csv", "csv", 1)
    (version,) = seed.bearer("GET", f"/api/documents/{document_id}/versions", user, expect=200).json()["versions"]
    assert version["status"] == "ready" and version["size_bytes"] == len(BIG_CSV)
    assert version["sha256"] == hashlib.sha256(BIG_CSV).hexdigest()
    assert page.is_checked(f"#doc-{document_id}")  # and the page selected it for the next message

    page.fill("#chat-input", "total amount by month")
    page.click("button.send")
    page.wait_for_selector(DONE, timeout=60_000)
    turn = page.locator(".turn").last
    assert turn.get_attribute("data-state") == "done"
    indicator = turn.locator(".source-context")
    assert indicator.get_attribute("data-engines") == "tabular"
    assert "big-sales.csv v1 (selected, tabular, read)" in indicator.inner_text()
    assert turn.locator(".answer-text").inner_text().count("total_amount 2000") == len(MONTHS)
    screenshot(page, "chat-large-upload")


def test_the_documents_bucket_answers_a_preflight_from_the_console_only_and_for_put_only(
    server: RunningServer, seed: Api, user: str
) -> None:
    probe = {"kind": "group", "name": "Preflight probe"}
    workspace = seed.bearer("POST", "/api/workspaces", user, probe, expect=201).json()
    body = b"a,b\n" + b"1,2\n" * 50_000
    declared = {
        "workspace_id": workspace["workspace_id"],
        "file_name": "probe.csv",
        "kind": "csv",
        "size_bytes": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    url = seed.bearer("POST", "/api/documents", user, declared, expect=201).json()["upload"]["url"]

    def preflight(origin: str) -> httpx.Response:
        return httpx.options(url, headers={"origin": origin, "access-control-request-method": "PUT"}, timeout=30)

    allowed = preflight(server.base_url)
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == server.base_url
    assert allowed.headers["access-control-allow-methods"] == "PUT"
    assert "etag" in allowed.headers["access-control-expose-headers"].lower()
    assert preflight(f"http://localhost:{server.port}").status_code == 200  # the dev server's other name
    assert preflight("http://attacker.example").status_code == 403
