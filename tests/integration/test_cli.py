"""The console script, run in-process against a data directory and the locked moto server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowledger.api.tokens import TokenVerifier
from flowledger.cli import main
from flowledger.config import load_settings
from flowledger.local.datadir import DataDir, LocalEndpoints
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.services import build_services
from flowledger.store.provision import provision_all


def test_token_command_mints_a_token_the_issuer_verifies(
    data_dir: DataDir, jwks_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "token",
            "--sub",
            "carol",
            "--scopes",
            "chat,documents",
            "--patient-id",
            "p-7",
            "--data-dir",
            str(data_dir.path),
        ]
    )
    assert code == 0
    verified = TokenVerifier(jwks_url, "flowledger-local", "flowledger").verify(capsys.readouterr().out.strip())
    assert (verified.sub, verified.scopes, verified.patient_id) == ("carol", {"chat", "documents"}, "p-7")


def test_token_command_rejects_an_unknown_scope_in_one_line(
    data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["token", "--sub", "carol", "--scopes", "chat,superuser", "--data-dir", str(data_dir.path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flowledger: error: unknown scope(s) superuser") and "\n" not in err


def test_token_command_without_a_data_dir_says_to_start_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["token", "--sub", "x", "--data-dir", str(tmp_path / "missing")]) == 2
    assert "flowledger serve" in capsys.readouterr().err


def test_jobs_list_shows_each_job_with_its_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "list"]) == 0
    assert "heartbeat" in capsys.readouterr().out


@pytest.mark.usefixtures("clean_environment")
def test_jobs_run_against_a_local_server_through_its_data_dir(
    data_dir: DataDir, locked_moto: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir.write_endpoints(
        LocalEndpoints(
            base_url="http://127.0.0.1:1",
            aws_endpoint_url=locked_moto,
            region="us-east-1",
            resource_prefix="clitest",
            bucket_suffix="local",
            tables={},
            buckets={},
        )
    )
    local = build_services(load_settings(aws_endpoint_url=locked_moto, resource_prefix="clitest"), EMBEDDED_CREDENTIALS)
    provision_all(local.aws, "us-east-1", local.settings.data_key_id)
    # The checkpoint job reads every chain and writes to the bucket: it only succeeds on that store.
    assert main(["jobs", "run", "ledger_checkpoint", "--data-dir", str(data_dir.path)]) == 0
    checkpoint_id = json.loads(capsys.readouterr().out)["checkpoint_id"]
    keys = local.aws.s3.list_objects_v2(Bucket=local.aws.bucket_name("checkpoints"))["Contents"]
    assert [k["Key"] for k in keys] == [f"checkpoints/{checkpoint_id}.json"]


def test_jobs_run_of_an_unknown_job_fails_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "run", "nope"]) == 2
    assert "no job named 'nope'" in capsys.readouterr().err


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["serve", "--help"], ["token", "--help"], ["jobs", "--help"], ["jobs", "run", "--help"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 0
    assert "--data-dir" in capsys.readouterr().out
