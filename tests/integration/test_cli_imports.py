"""`flowledger --help` builds the whole command tree from the standard library alone: each command
imports what it needs (boto3, httpx, the dev server) only when it runs."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("boto3", "botocore", "httpx", "pydantic", "moto", "uvicorn", "starlette", "cryptography", "tqdm")


def test_building_every_commands_parser_imports_no_library_of_any_command() -> None:
    code = (
        "import json, sys; from flowledger.cli import build_parser; build_parser();"
        " print(json.dumps(sorted(sys.modules)))"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert "flowledger.cli.chat" in loaded and "flowledger.cli.flows.otel" in loaded  # every group is in the tree
    assert [name for name in loaded if name.split(".")[0] in HEAVY] == []
    assert [name for name in loaded if name.startswith("flowledger.") and not name.startswith("flowledger.cli")] == [
        "flowledger.errors"
    ]
