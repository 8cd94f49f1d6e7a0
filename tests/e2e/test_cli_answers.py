"""`flowledger chat` against a real `flowledger serve`: a refusal names the field the API named, and the
command runs on HTTP alone (none of the dev server, moto or the chat app is imported)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.e2e.conftest import FLOWLEDGER, clean_env

pytestmark = pytest.mark.e2e

# What a command that only talks to a running server has no use for (together, seconds of imports).
SERVER_SIDE = (
    "moto",
    "uvicorn",
    "starlette",
    "aws_lambda_powertools",
    "boto3",
    "flowledger.local.devserver",
    "flowledger.api.chat_app",
    "flowledger.local.functions",
    "flowledger.local.gateway",
)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    assert result.stderr.startswith("flowledger: error: ") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr.strip()


def test_a_refused_session_id_is_shown_with_the_field_and_the_apis_message(server: Any) -> None:
    refused = server.cli("chat", "hello", "--session", "bogus", "--data-dir", str(server.data_dir.path))
    assert one_error_line(refused) == (
        "flowledger: error: the server answered 422: the request does not match the schema:"
        " session_id: String should match pattern '^ses_[0-9A-Z]{26}$'"
    )


def test_a_refused_document_id_is_named_by_its_place_in_the_list(server: Any) -> None:
    document = "dc_01JAAAAAAAAAAAAAAAAAAAAAAA"
    refused = server.cli(
        "chat", "sum it", "--select", document, "--select", "bogus", "--data-dir", str(server.data_dir.path)
    )
    line = one_error_line(refused)
    assert "document_ids[1]: String should match pattern" in line and "document_ids[0]" not in line


def test_chat_answers_on_http_alone_without_importing_the_server_side(server: Any) -> None:
    answered = subprocess.run(
        [
            *FLOWLEDGER[:1],
            "-X",
            "importtime",
            *FLOWLEDGER[1:],
            "chat",
            "hello",
            "--data-dir",
            str(server.data_dir.path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=clean_env(),
    )
    assert answered.returncode == 0, answered.stderr
    imported = {
        line.rsplit("|", 1)[1].strip() for line in answered.stderr.splitlines() if line.startswith("import time:")
    }
    assert "httpx" in imported and "flowledger.cli.chat" in imported  # the report is read as meant
    assert sorted(name for name in imported if name.startswith(SERVER_SIDE)) == []
    assert "  flow: fl_" in answered.stderr
