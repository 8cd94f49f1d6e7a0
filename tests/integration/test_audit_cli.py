"""`flowledger audit verify | proof | check-proof` against a store reached through a data dir."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from flowledger.cli import main
from flowledger.config import load_settings
from flowledger.ledger.audit import checkpoints_of, take_checkpoint
from flowledger.ledger.events import AuditEntry, AuditEvent
from flowledger.local.datadir import DataDir, LocalEndpoints
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.services import Services, build_services
from flowledger.store.provision import provision_all

pytestmark = pytest.mark.usefixtures("clean_environment")


@pytest.fixture
def store(data_dir: DataDir, locked_moto: str, tmp_path: Path) -> tuple[Services, list[AuditEvent]]:
    prefix = f"cli{uuid.uuid4().hex[:10]}"  # a fresh set of tables per test on the shared server
    services = build_services(load_settings(aws_endpoint_url=locked_moto, resource_prefix=prefix), EMBEDDED_CREDENTIALS)
    provision_all(services.aws, "us-east-1", services.settings.data_key_id)
    data_dir.write_endpoints(
        LocalEndpoints(
            base_url="http://127.0.0.1:1",
            aws_endpoint_url=locked_moto,
            region="us-east-1",
            resource_prefix=prefix,
            bucket_suffix="local",
            tables={},
            buckets={},
        )
    )
    ledger = services.ledger
    events = [
        ledger.append(AuditEntry(action="reasoning.flow.started", actor="user:a", subject=f"flow:{n}"))
        for n in range(12)
    ]
    take_checkpoint(ledger, checkpoints_of(services), services)
    return services, events


def test_verify_passes_on_an_intact_ledger(
    store: object, data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "verify", "--data-dir", str(data_dir.path)]) == 0
    out = capsys.readouterr().out
    assert "checkpoints: 1 checked" in out and "ledger verified" in out


def test_verify_names_the_first_bad_link_and_exits_1(
    store: tuple[Services, list[AuditEvent]], data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    services, events = store
    victim = events[5]
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("ledger"),
        Key={"chain_id": {"S": victim.chain_id}, "seq": {"N": str(victim.seq)}},
        UpdateExpression="SET payload = :p",
        ExpressionAttributeValues={":p": {"M": {"n": {"N": "9"}}}},
    )
    assert main(["audit", "verify", "--data-dir", str(data_dir.path)]) == 1
    out = capsys.readouterr().out
    assert f"FIRST BAD LINK: chain {victim.chain_id} breaks at seq {victim.seq}" in out
    assert "expected" in out and "found" in out


def test_proof_round_trip_and_a_tampered_file(
    store: tuple[Services, list[AuditEvent]], data_dir: DataDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, events = store
    out = tmp_path / "proof.json"
    assert main(["audit", "proof", events[3].event_id, "--out", str(out), "--data-dir", str(data_dir.path)]) == 0
    assert main(["audit", "check-proof", str(out)]) == 0
    assert f"proof OK: {events[3].event_id}" in capsys.readouterr().out
    out.write_bytes(out.read_bytes().replace(b'"actor":"user:a"', b'"actor":"user:b"', 1))
    assert main(["audit", "check-proof", str(out)]) == 1
    assert "proof INVALID" in capsys.readouterr().out


def test_proof_of_an_unknown_event_is_a_clear_error(
    store: object, data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "proof", "chain-000.999", "--data-dir", str(data_dir.path)]) == 2
    assert "no event chain-000.999" in capsys.readouterr().err
