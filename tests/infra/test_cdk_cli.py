"""The documented deploy through the real CDK CLI (package.json's aws-cdk, as `npx cdk deploy` runs it).

`cdk deploy` asks STS who the caller is and gives the app that account and the region as
CDK_DEFAULT_ACCOUNT / CDK_DEFAULT_REGION; the synth then runs cdk-nag and CDK's template rules. No AWS
account is reachable here, so the CLI's STS is a moto server (account 123456789012) and the CLI
synthesizes (`cdk synth`, the first half of `cdk deploy`) exactly as it would before deploying.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer

from tests.infra.synth import TEST_MODEL

ROOT = Path(__file__).resolve().parents[2]
CDK = ROOT / "node_modules" / ".bin" / "cdk"
ACCOUNT = "123456789012"  # moto's STS answers GetCallerIdentity with this account
REGION = "eu-west-2"


@pytest.fixture(scope="module")
def sts() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def cdk_synth(sts: str, outdir: Path, *context: str) -> subprocess.CompletedProcess[str]:
    """``cdk synth`` as ``cdk deploy`` runs it, with the caller's credentials answered by ``sts``."""
    assert CDK.exists(), "no node_modules/.bin/cdk: `make install` installs the pinned CDK CLI"
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "CDK_"))} | {
        "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",  # cdk.json's `python infra/app.py`
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": sts,
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CDK_DISABLE_VERSION_CHECK": "1",
    }
    arguments = [
        "synth",
        "--quiet",
        "--no-notices",
        "-o",
        str(outdir),
        "-c",
        "flowledger:skipDependenciesLayerBuild=true",
    ]
    for value in context:
        arguments += ["-c", value]
    return subprocess.run(
        [str(CDK), *arguments], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600, check=False
    )


def test_the_documented_deploy_gets_past_synth_for_the_callers_account_and_region(sts: str, tmp_path: Path) -> None:
    result = cdk_synth(sts, tmp_path, f"flowledger:model={json.dumps(TEST_MODEL)}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    # The stack was synthesized for the caller's account and region, so every cdk-nag acknowledgement had to
    # match concrete values (they were written for placeholders once, and this synth stopped).
    assert manifest["artifacts"]["Flowledger"]["environment"] == f"aws://{ACCOUNT}/{REGION}"
    assert "ValidationFailed" not in result.stderr


def test_a_production_stage_without_a_model_stops_the_synth_naming_the_setting(sts: str, tmp_path: Path) -> None:
    result = cdk_synth(sts, tmp_path)
    assert result.returncode != 0
    assert "flowledger:stage=prod needs flowledger:model" in result.stderr
