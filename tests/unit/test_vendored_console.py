"""Every third-party file the console serves is the one its manifest pins: version, hash and licence."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = json.loads((ROOT / "console" / "vendor" / "VENDORED.json").read_text())


def test_each_vendored_file_has_the_pinned_hash_and_its_licence_beside_it() -> None:
    assert {entry["name"] for entry in MANIFEST["files"]} >= {"aws4fetch", "axe-core"}
    for entry in MANIFEST["files"]:
        path = ROOT / entry["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], entry["file"]
        assert entry["version"] in path.parent.name, "the folder names the version it holds"
        assert (path.parent / "LICENSE").read_text().strip(), f"{entry['name']} has no licence beside it"


# What makes a browser fetch a file: an ES import (static or dynamic), an HTML src/href, a CSS url().
LOADS = {
    ".js": re.compile(r"""\bimport\s*(?:[\w{}*,\s]+\bfrom\s*|\(\s*)["'`]([^"'`]+)["'`]"""),
    ".html": re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)["']"""),
    ".css": re.compile(r"""url\(\s*["']?([^"')]+)["']?\s*\)|@import\s+["']([^"']+)["']"""),
}


def test_the_console_loads_nothing_from_another_origin() -> None:
    """Every module, script, stylesheet and image the console loads is its own (an absolute /console/ path)."""
    loaded: list[str] = []
    for path in (ROOT / "console").rglob("*"):
        if path.suffix in LOADS and "vendor" not in path.parts:
            for match in LOADS[path.suffix].finditer(path.read_text()):
                address = next(group for group in match.groups() if group)
                if address.startswith(("#", "data:")):  # in-page links and inline data
                    continue
                loaded.append(address)
                assert address.startswith("/console/"), f"{path.name} loads {address}"
    expected = {"/console/vendor/aws4fetch-1.0.20/aws4fetch.esm.js", "/console/js/app.js", "/console/js/cognito.js"}
    assert expected <= set(loaded)
