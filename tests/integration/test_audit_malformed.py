"""Malformed ledger items and checkpoints never crash `flowledger audit proof` or the checkpoint job."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from flowledger.cli import main
from flowledger.ledger.audit import checkpoints_of, take_checkpoint, verify_ledger
from flowledger.ledger.checkpoints import PREFIX
from flowledger.ledger.events import AuditEvent
from flowledger.local.datadir import DataDir
from flowledger.services import Services
from tests.integration.test_audit_cli import store

__all__ = ["store"]  # the fixture: 12 events on the shared locked moto server, then one checkpoint


def test_proof_through_a_malformed_ledger_item_is_one_line_and_exit_2(
    store: tuple[Services, list[AuditEvent]], data_dir: DataDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    services, events = store
    victim = events[3]
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("ledger"),
        Key={"chain_id": {"S": victim.chain_id}, "seq": {"N": str(victim.seq)}},
        UpdateExpression="SET note = :n",
        ExpressionAttributeValues={":n": {"S": "x"}},
    )
    out = tmp_path / "proof.json"
    assert main(["audit", "proof", victim.event_id, "--out", str(out), "--data-dir", str(data_dir.path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowledger: error: the stored ledger event"), captured.err
    assert victim.event_id in lines[0] and "flowledger audit verify" in lines[0]
    assert "Traceback" not in captured.out + captured.err and not out.exists()


def test_a_checkpoint_after_an_unparseable_latest_one_links_to_the_last_good_and_names_it(
    store: tuple[Services, list[AuditEvent]],
) -> None:
    services, _ = store
    checkpoints = checkpoints_of(services)
    (good,) = checkpoints.ids()
    bad = "99990101T000000000000Z"[: len(good)]  # sorts after every real id: the latest
    services.aws.s3.put_object(
        Bucket=services.aws.bucket_name("checkpoints"), Key=f"{PREFIX}{bad}.json", Body=b'{"heads": "oops"'
    )
    later = services.clock() + timedelta(minutes=5)  # after the fixture's checkpoint, taken just now
    services.clock = lambda: later
    taken = take_checkpoint(services.ledger, checkpoints, services)
    assert taken["findings"] == [f"checkpoint {bad} [malformed] not a well-formed checkpoint (JSONDecodeError)"]
    new = checkpoints.get(str(taken["checkpoint_id"]))
    assert new.prev_checkpoint_hash == checkpoints.get(good).hash
    report = verify_ledger(services.ledger, checkpoints)
    assert [f.where for f in report.findings] == [f"checkpoint {bad}"]  # the bad one, named; the rest verifies
