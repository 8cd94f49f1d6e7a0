"""Every third-party file the console serves is the one its manifest pins: version, hash and licence."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = json.loads((ROOT / "console" / "vendor" / "VENDORED.json").read_text())


def test_each_vendored_file_has_the_pinned_hash_and_its_licence_beside_it() -> None:
    assert {entry["name"] for entry in MANIFEST["files"]} >= {"@dagrejs/dagre", "aws4fetch", "axe-core"}
    for entry in MANIFEST["files"]:
        path = ROOT / entry["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], entry["file"]
        assert entry["version"] in path.parent.name, "the folder names the version it holds"
        assert (path.parent / "LICENSE").read_text().strip(), f"{entry['name']} has no licence beside it"


def test_the_console_loads_nothing_from_another_origin() -> None:
    for path in (ROOT / "console").rglob("*"):
        if path.suffix in {".html", ".js", ".css"} and "vendor" not in path.parts:
            text = path.read_text()
            assert "https://" not in text.replace("https://opensource.org", ""), path
            assert "http://" not in text.replace("http://www.w3.org/2000/svg", ""), path
