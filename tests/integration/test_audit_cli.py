"""`flowledger audit verify | proof | check-proof` against a store reached through a data dir."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flowledger.cli import main
from flowledger.config import load_settings
from flowledger.ledger.audit import checkpoints_of, take_checkpoint
from flowledger.ledger.events import GENESIS_HASH, AuditEntry, AuditEvent, seal
from flowledger.ledger.store import to_item
from flowledger.local.datadir import DataDir, LocalEndpoints
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.services import Services, build_services
from flowledger.store.provision import provision_all

pytestmark = pytest.mark.usefixtures("clean_environment")
T = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(data_dir: DataDir, locked_moto: str) -> tuple[Services, list[AuditEvent]]:
    return open_store(data_dir, locked_moto)


def module_store(tmp_path_factory: pytest.TempPathFactory, locked_moto: str, name: str) -> tuple[Services, DataDir]:
    """:func:`open_store` behind a data dir of its own, for a module fixture that every test of a module reads."""
    data_dir = DataDir(tmp_path_factory.mktemp(name) / "data")
    data_dir.ensure("us-east-1")
    services, _ = open_store(data_dir, locked_moto)
    return services, data_dir


def open_store(data_dir: DataDir, locked_moto: str) -> tuple[Services, list[AuditEvent]]:
    """A fresh set of tables on the shared server, reached through ``data_dir``, with 12 events checkpointed."""
    prefix = f"cli{uuid.uuid4().hex[:10]}"
    services = build_services(load_settings(aws_endpoint_url=locked_moto, resource_prefix=prefix), EMBEDDED_CREDENTIALS)
    provision_all(services.aws, services.settings)
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


def test_verify_names_the_tampered_event_on_one_line_and_exits_1(
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
    [finding] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FINDING")]
    assert finding.startswith(f"FINDING {victim.event_id} [hash] content does not match its hash (recomputed ")
    assert finding.endswith(f", stored {victim.hash})")


def test_a_malformed_item_and_a_stray_chain_are_one_line_each_and_no_traceback(
    store: tuple[Services, list[AuditEvent]], data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    services, events = store
    table = services.aws.table_name("ledger")
    victim = events[5]
    services.aws.dynamodb.update_item(
        TableName=table,
        Key={"chain_id": {"S": victim.chain_id}, "seq": {"N": str(victim.seq)}},
        UpdateExpression="SET note = :n",
        ExpressionAttributeValues={":n": {"S": "x"}},
    )
    stray = seal(
        AuditEntry(action="reasoning.flow.started", actor="user:m", subject="flow:1"), "chain-016", 1, GENESIS_HASH, T
    )
    services.aws.dynamodb.put_item(TableName=table, Item=to_item(stray))
    assert main(["audit", "verify", "--data-dir", str(data_dir.path)]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert [line for line in lines if line.startswith("FINDING")] == [
        f"FINDING {victim.event_id} [malformed] not a well-formed event: unexpected attribute note",
        "FINDING chain-016.1 [unknown_chain] an item under a chain id that is not one of the ledger's chains"
        " (chain-000 to chain-015)",
    ]
    assert "chain-016: 1 event under a chain id outside chain-000 to chain-015" in lines
    # The other 11 events were checked, and the stray one counted, in the 16 chains and the stray one.
    assert lines[-1] == "ledger verification FAILED: checked 13 events in 17 chains and 1 checkpoint"
    assert "Traceback" not in captured.out + captured.err


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


def test_a_proof_reads_the_checkpoints_from_its_events_time_not_every_one_ever_taken(
    store: tuple[Services, list[AuditEvent]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowledger.ledger.audit import prove
    from flowledger.ledger.checkpoints import CheckpointStore

    services, _ = store
    later = datetime(2027, 6, 1, 9, 0, tzinfo=UTC)
    for minute in range(12):  # a year of older checkpoints, in small
        services.clock = lambda minute=minute: later + timedelta(minutes=minute)
        services.ledger.append(AuditEntry(action="reasoning.flow.started", actor="user:a", subject=f"flow:o{minute}"))
        take_checkpoint(services.ledger, checkpoints_of(services), services)
    services.clock = lambda: later + timedelta(hours=1)
    event = services.ledger.append(AuditEntry(action="reasoning.flow.started", actor="user:a", subject="flow:late"))
    services.clock = lambda: later + timedelta(hours=1, minutes=1)
    take_checkpoint(services.ledger, checkpoints_of(services), services)
    read: list[str] = []
    original = CheckpointStore.get
    monkeypatch.setattr(CheckpointStore, "get", lambda self, cid: read.append(cid) or original(self, cid))
    proof = prove(services.ledger, checkpoints_of(services), event.event_id)
    assert read == [proof.checkpoint.checkpoint_id]  # the one after the event, and none of the 13 before
