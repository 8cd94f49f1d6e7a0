"""The deploy smoke test (`scripts/smoke.py`) run as a user runs it, against `flowledger serve`: the same
checks it makes against the deployed API, with the local admin SigV4 credentials in the environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import RunningServer, clean_env

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "smoke.py"


def smoke(
    *args: str, secret: str | None = None, server: RunningServer | None = None
) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    # Only the credentials given here: no profile or credentials file of the machine is consulted.
    env |= {"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
    if server is not None:
        credentials = server.data_dir.admin_credentials()
        env |= {
            "AWS_ACCESS_KEY_ID": credentials.access_key_id,
            "AWS_SECRET_ACCESS_KEY": secret or credentials.secret_access_key,
            "AWS_DEFAULT_REGION": credentials.region,
        }
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


def test_every_check_passes_against_the_local_server(server: RunningServer) -> None:
    result = smoke(server.base_url, server=server)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [
        "ok   GET /health",
        "ok   GET /api/me without a token is refused (401)",
        "ok   GET /admin/v1/me unsigned is refused (403)",
        "ok   GET /admin/v1/me signed with SigV4",
    ]
    assert lines[0].endswith("chat model: offline")  # the local server has no model server configured
    assert server.data_dir.admin_credentials().principal_arn in lines[3]
    assert lines[-1] == "4 passed, 0 failed"


def test_a_wrong_secret_fails_the_signed_check_and_the_exit_code(server: RunningServer) -> None:
    result = smoke(server.base_url, server=server, secret="not-the-secret")
    assert result.returncode == 1
    assert "FAIL GET /admin/v1/me signed with SigV4: 403" in result.stdout
    assert result.stdout.splitlines()[-1] == "3 passed, 1 failed"


def test_no_credentials_is_a_failed_check_not_a_traceback(server: RunningServer) -> None:
    result = smoke(server.base_url, "--region", "us-east-1")
    assert result.returncode == 1
    assert "FAIL GET /admin/v1/me signed with SigV4: RuntimeError: no AWS credentials found" in result.stdout
    assert "Traceback" not in result.stderr


def test_an_api_that_does_not_answer_fails_every_check() -> None:
    result = smoke("http://127.0.0.1:9", "--region", "us-east-1", "--timeout", "2")
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "0 passed, 4 failed"


def test_help_names_the_url_argument() -> None:
    result = smoke("--help")
    assert result.returncode == 0
    assert "ApiUrl" in result.stdout
