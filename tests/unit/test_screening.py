"""Request screening counts nesting outside strings and bounds it exactly; a reset data dir forgets its secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowledger.api.screening import MAX_JSON_DEPTH, json_depth, screen_body
from flowledger.errors import MalformedBody
from flowledger.local.datadir import DataDir


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("{}", 1),
        (json.dumps({"a": "[[[[{{{{"}), 1),
        (json.dumps({"a": 'say \\"[[[\\" ok', "b": [[1]]}), 3),
        (json.dumps([{"a": ["]]]}}}"]}]), 3),
    ],
)
def test_json_depth_ignores_brackets_inside_strings(text: str, depth: int) -> None:
    assert json_depth(text) == depth


def test_the_depth_bound_is_exact() -> None:
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    screen_body(at_limit.encode(), "application/json", 1 << 20)  # accepted
    with pytest.raises(MalformedBody):
        screen_body(("[" + at_limit + "]").encode(), "application/json", 1 << 20)


def test_reset_forgets_the_signing_key_and_the_admin_credentials(tmp_path: Path) -> None:
    directory = DataDir(tmp_path / "data")
    directory.ensure("us-east-1")
    key, credentials = directory.private_key_pem(), directory.admin_credentials()
    directory.state_file.write_bytes(b"old state")
    directory.reset()
    directory.ensure("us-east-1")
    assert directory.private_key_pem() != key
    assert directory.admin_credentials().access_key_id != credentials.access_key_id
    assert directory.admin_credentials().secret_access_key != credentials.secret_access_key
    assert not directory.state_file.exists()
