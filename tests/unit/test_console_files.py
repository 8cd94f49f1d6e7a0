"""The console's files from memory: an edited file is sent as edited, nothing outside the folder is sent,
and a page address with no file gets the shell."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import httpx
import pytest
from starlette.types import ASGIApp

from flowledger.local.console_files import ConsoleFiles

HEADERS = {"x-content-type-options": "nosniff"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    site = tmp_path / "console"
    (site / "js").mkdir(parents=True)
    (site / "index.html").write_text("<!doctype html><title>shell</title>")
    (site / "js" / "app.js").write_text("export const a = 1;\n" * 100)
    (tmp_path / "secret.txt").write_text("not for the browser")
    return site


async def fetch(app: ASGIApp, path: str, **headers: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.get(path, headers=headers)


@pytest.mark.anyio
async def test_an_edited_file_is_sent_as_edited_compressed_or_not(root: Path) -> None:
    files = ConsoleFiles(root, HEADERS)
    first = await fetch(files, "/js/app.js", **{"accept-encoding": "gzip"})
    assert first.text.count("export") == 100 and first.headers["content-encoding"] == "gzip"
    script = root / "js" / "app.js"
    script.write_text("export const b = 2;\n")
    os.utime(script, ns=(script.stat().st_atime_ns, script.stat().st_mtime_ns + 1_000_000))  # a later edit
    plain = await fetch(files, "/js/app.js", **{"accept-encoding": "identity"})
    assert plain.text == "export const b = 2;\n" and "content-encoding" not in plain.headers  # too small to zip
    assert plain.headers["etag"] != first.headers["etag"]
    assert plain.headers["content-type"].startswith("text/javascript") and plain.headers["x-content-type-options"]


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/../secret.txt", "/js/../../secret.txt", "/js/missing.js"])
async def test_nothing_outside_the_folder_or_missing_is_sent(root: Path, path: str) -> None:
    answer = await fetch(ConsoleFiles(root, HEADERS), path)
    assert answer.status_code == 404 and "not for the browser" not in answer.text


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/", "/flows/fl_01", "/patient/flows"])
async def test_a_page_address_gets_the_shell(root: Path, path: str) -> None:
    answer = await fetch(ConsoleFiles(root, HEADERS), path, **{"accept-encoding": "gzip"})
    assert answer.status_code == 200 and "<title>shell</title>" in answer.text
    assert answer.headers["content-type"].startswith("text/html")


def test_a_file_is_compressed_once(root: Path) -> None:
    files = ConsoleFiles(root, HEADERS)
    scope = {"type": "http", "method": "GET", "path": "/js/app.js", "headers": [(b"accept-encoding", b"gzip")]}
    first, second = files.response(scope), files.response(scope)
    assert first.body is second.body  # the same bytes object: compressed when read, not per request
    assert gzip.decompress(first.body) == (root / "js" / "app.js").read_bytes()
