"""Signed checkpoints through `flowledger serve`: the public ledger key, the CLI's copy of it, and the latest
checkpoint's signed note, which that key (and nothing of the operator's) verifies."""

from __future__ import annotations

import base64
import subprocess
import sys
from typing import Any

import httpx
import pytest

from flowledger.ledger.checkpoint_notes import read_checkpoint_text
from flowledger.ledger.signed_note import parse_note, parse_vkey, verify
from tests.bundle_verifier import TOOL
from tests.signing import sigv4_headers

pytestmark = pytest.mark.e2e
KEY_PATH = "/.well-known/flowledger/ledger-key"


def test_the_ledger_key_is_public_and_the_cli_prints_the_same(server: Any) -> None:
    answer = httpx.get(f"{server.base_url}{KEY_PATH}", timeout=30)  # no credentials at all
    assert answer.status_code == 200, answer.text
    key = answer.json()
    parsed = parse_vkey(key["vkey"])
    assert parsed.name == key["origin"] and parsed.key_id.hex() == key["key_id"]
    assert base64.b64decode(key["public_key"]) == parsed.public_key
    printed = server.cli("audit", "key", "--data-dir", str(server.data_dir.path))
    assert printed.returncode == 0, printed.stderr
    assert f"verifier key:  {key['vkey']}" in printed.stdout and key["public_key_pem"] in printed.stdout


def test_the_latest_checkpoint_is_a_note_the_public_key_verifies(server: Any) -> None:
    taken = server.cli("jobs", "run", "ledger_checkpoint", "--data-dir", str(server.data_dir.path))
    assert taken.returncode == 0, taken.stderr
    url = f"{server.base_url}/admin/v1/audit/checkpoints/latest/note"
    unsigned = httpx.get(url, timeout=30)
    assert unsigned.status_code == 403  # the note itself is an admin read
    answer = httpx.get(url, headers=sigv4_headers(server.data_dir.admin_credentials(), "GET", url), timeout=30)
    assert answer.status_code == 200, answer.text
    key = parse_vkey(httpx.get(f"{server.base_url}{KEY_PATH}", timeout=30).json()["vkey"])
    note = parse_note(answer.json()["note"])
    assert verify(note, key) is None
    lines = read_checkpoint_text(note.text)
    latest_url = f"{server.base_url}/admin/v1/audit/checkpoints/latest"
    latest = httpx.get(latest_url, headers=sigv4_headers(server.data_dir.admin_credentials(), "GET", latest_url))
    assert (lines.checkpoint_id, lines.root) == (latest.json()["checkpoint_id"], latest.json()["root"])
    assert lines.size == sum(head["seq"] for head in latest.json()["heads"]) > 0
    forged = note.text.replace(f"\n{lines.size}\n", f"\n{lines.size + 1}\n")
    with pytest.raises(ValueError):  # a size changed after signing no longer verifies
        verify(parse_note(answer.json()["note"].replace(note.text, forged)), key)


def test_an_evidence_bundle_from_the_admin_route_passes_the_standalone_verifier(server: Any, tmp_path: Any) -> None:
    admin = server.data_dir.admin_credentials()
    events_url = f"{server.base_url}/admin/v1/audit/events?limit=1"
    subject = httpx.get(events_url, headers=sigv4_headers(admin, "GET", events_url), timeout=30).json()["events"][0][
        "subject"
    ]
    taken = server.cli("jobs", "run", "ledger_checkpoint", "--data-dir", str(server.data_dir.path))
    assert taken.returncode == 0, taken.stderr
    url = f"{server.base_url}/admin/v1/audit/bundles?subject={subject}"
    assert httpx.get(url, timeout=30).status_code == 403  # unsigned: refused before the subject is read
    answer = httpx.get(url, headers=sigv4_headers(admin, "GET", url), timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    bundle = tmp_path / "bundle.json"
    bundle.write_bytes(answer.content)
    vkey = httpx.get(f"{server.base_url}{KEY_PATH}", timeout=30).json()["vkey"]
    ran = subprocess.run([sys.executable, str(TOOL), str(bundle), "--log-key", vkey], capture_output=True, text=True)
    assert ran.returncode == 0 and f"bundle OK: {subject}" in ran.stdout, ran.stdout + ran.stderr
    bad = f"{server.base_url}/admin/v1/audit/bundles?subject=not%20a%20subject"
    refused = httpx.get(bad, headers=sigv4_headers(admin, "GET", bad), timeout=30)
    assert refused.status_code == 422 and "subject" in refused.text
