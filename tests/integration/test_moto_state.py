"""The embedded AWS store survives a restart: a snapshot of moto, reset and restored, is the same store.

moto's backends are global to the process, so every test resets them through moto's own
``/moto-api/reset`` between saving and restoring: what comes back can only come from the file.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import moto
import pytest
from botocore.exceptions import ClientError

from flowledger.config import load_settings
from flowledger.errors import ConfigurationError
from flowledger.ledger.checkpoint_notes import CheckpointSigner
from flowledger.ledger.checkpoints import build_checkpoint
from flowledger.ledger.signed_note import verify
from flowledger.local import moto_state
from flowledger.local.datadir import STATE_FILE as STATE_FILE_NAME
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.local.moto_server import LockedMotoServer, may_change_state
from flowledger.local.moto_state import PeriodicSnapshots, SnapshotInfo, StateCounts
from flowledger.services import Services, build_services
from flowledger.store.aws import AwsClients
from flowledger.store.provision import provision_all
from flowledger.store.tables import BUCKETS, TABLES


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[LockedMotoServer]:
    # Object bodies past 1 KiB roll over from memory to a real temporary file, as large ones do.
    monkeypatch.setenv("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", "1024")
    moto_state.reset_state()  # nothing left over from other tests' use of the global backends
    server = LockedMotoServer()
    server.start()
    yield server
    server.stop()
    moto_state.reset_state()


@pytest.fixture
def store(server: LockedMotoServer, clean_environment: None) -> Services:
    """Every declared table and bucket and the data key, through the locked server."""
    services = build_services(
        load_settings(aws_endpoint_url=server.endpoint_url, resource_prefix="statecheck"), EMBEDDED_CREDENTIALS
    )
    provision_all(services.aws, services.settings)
    return services


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    return tmp_path / STATE_FILE_NAME


def moto_reset(server: LockedMotoServer) -> None:
    """Reset every moto backend through moto's own API, not through the code under test."""
    url = f"{server.endpoint_url}/moto-api/reset"  # always http://127.0.0.1
    with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10) as response:  # noqa: S310
        assert response.status == 200


def _plain(response: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in response.items() if k != "ResponseMetadata"}


def observe(aws: AwsClients) -> dict[str, Any]:
    """Everything the declared resources hold, read through the AWS API."""
    ddb, s3, kms = aws.dynamodb, aws.s3, aws.kms
    tables = {}
    for table in TABLES:
        name = aws.table_name(table.name)
        items = [item for page in ddb.get_paginator("scan").paginate(TableName=name) for item in page["Items"]]
        tables[name] = {
            "table": ddb.describe_table(TableName=name)["Table"],
            "ttl": ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"],
            "items": sorted(items, key=lambda item: json.dumps(item, sort_keys=True, default=str)),
        }
    buckets = {}
    for bucket in BUCKETS:
        name = aws.bucket_name(bucket.name)
        listing = s3.list_object_versions(Bucket=name)
        versions = [
            {
                **version,
                "head": _plain(s3.head_object(Bucket=name, Key=version["Key"], VersionId=version["VersionId"])),
                "body": s3.get_object(Bucket=name, Key=version["Key"], VersionId=version["VersionId"])["Body"].read(),
            }
            for version in listing.get("Versions", [])
        ]
        buckets[name] = {
            "versions": versions,
            "delete_markers": listing.get("DeleteMarkers", []),
            "versioning": _plain(s3.get_bucket_versioning(Bucket=name)),
            "lock": _plain(s3.get_object_lock_configuration(Bucket=name)) if bucket.lock_days else None,
        }
    keys = {key["KeyId"]: kms.describe_key(KeyId=key["KeyId"])["KeyMetadata"] for key in kms.list_keys()["Keys"]}
    aliases = sorted((a["AliasName"], a.get("TargetKeyId")) for a in kms.list_aliases()["Aliases"])
    return {"tables": tables, "buckets": buckets, "keys": keys, "aliases": aliases}


def write_sample(services: Services) -> dict[str, Any]:
    """Items (one by a conditional write), two object versions under Object Lock, a sealed value."""
    aws = services.aws
    ddb = aws.dynamodb
    ddb.put_item(
        TableName=aws.table_name("consents"),
        Item={"patient_id": {"S": "p-1"}, "scopes": {"SS": ["labs", "notes"]}, "granted": {"BOOL": True}},
        ConditionExpression="attribute_not_exists(patient_id)",
    )
    ddb.put_item(
        TableName=aws.table_name("ledger"),
        Item={"chain_id": {"S": "c-0"}, "seq": {"N": "1"}, "subject": {"S": "p-1"}, "at": {"S": "2026-12-01"}},
    )
    ddb.put_item(
        TableName=aws.table_name("knowledge"),
        Item={
            "pk": {"S": "doc#1"},
            "sk": {"S": "chunk#0"},
            "vector": {"B": bytes(range(256))},
            "meta": {"M": {"tags": {"L": [{"S": "a"}, {"N": "2"}]}, "none": {"NULL": True}}},
        },
    )
    ddb.update_item(
        TableName=aws.table_name("backlog_tickets"),
        Key={"ticket": {"N": "0"}},
        UpdateExpression="ADD issued :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    checkpoints = aws.bucket_name("checkpoints")
    aws.s3.put_object(Bucket=checkpoints, Key="chain/c-0", Body=b"first")
    aws.s3.put_object(Bucket=checkpoints, Key="chain/c-0", Body=b"second", Metadata={"head": "2"})
    large = os.urandom(64 * 1024)  # past the buffer size: a body held in a temporary file
    aws.s3.put_object(Bucket=aws.bucket_name("documents"), Key="big.bin", Body=large)
    sealed = aws.kms.encrypt(KeyId=services.settings.data_key_id, Plaintext=b"patient secret")["CiphertextBlob"]
    return {"sealed": sealed, "large": large}


def test_restore_brings_back_exactly_what_was_saved(
    server: LockedMotoServer, store: Services, state_file: Path
) -> None:
    sample = write_sample(store)
    saved = observe(store.aws)
    ledger_key = store.checkpoint_signer.verifier
    info = server.snapshot(state_file)
    assert info.written
    # Two keys: the data key and the ledger's Ed25519 signing key.
    assert info.counts == StateCounts(tables=len(TABLES), items=4, buckets=len(BUCKETS), objects=2, keys=2)
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    assert [p.name for p in state_file.parent.iterdir()] == [STATE_FILE_NAME]  # no temporary file left

    moto_reset(server)
    assert store.aws.dynamodb.list_tables()["TableNames"] == []
    assert store.aws.s3.list_buckets()["Buckets"] == []

    assert server.restore(state_file) == info.counts
    assert observe(store.aws) == saved
    assert store.aws.kms.decrypt(CiphertextBlob=sample["sealed"])["Plaintext"] == b"patient secret"
    big = store.aws.s3.get_object(Bucket=store.aws.bucket_name("documents"), Key="big.bin")["Body"].read()
    assert big == sample["large"]
    # The signing key came back whole: the same public key, and it still signs what that key verifies.
    restored = CheckpointSigner(store.aws.kms, store.settings.ledger_signing_key_id, store.settings.ledger_origin)
    assert restored.verifier == ledger_key
    note = restored.sign(build_checkpoint([], None, datetime(2026, 12, 3, tzinfo=UTC)))
    assert verify(note, ledger_key) is None

    # Provisioning again finds every table, bucket and the alias: it only reads.
    provision_all(store.aws, store.settings)
    assert not server.dirty
    assert observe(store.aws) == saved


def test_conditions_and_object_lock_hold_after_restore(
    server: LockedMotoServer, store: Services, state_file: Path
) -> None:
    write_sample(store)
    server.snapshot(state_file)
    moto_reset(server)
    server.restore(state_file)

    with pytest.raises(ClientError) as taken:
        store.aws.dynamodb.put_item(
            TableName=store.aws.table_name("consents"),
            Item={"patient_id": {"S": "p-1"}},
            ConditionExpression="attribute_not_exists(patient_id)",
        )
    assert taken.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    checkpoints = store.aws.bucket_name("checkpoints")
    oldest = store.aws.s3.list_object_versions(Bucket=checkpoints)["Versions"][-1]
    with pytest.raises(ClientError) as locked:
        store.aws.s3.delete_object(Bucket=checkpoints, Key=oldest["Key"], VersionId=oldest["VersionId"])
    assert locked.value.response["Error"]["Code"] == "AccessDenied"


def test_restore_drops_what_was_made_after_the_snapshot(
    server: LockedMotoServer, store: Services, state_file: Path
) -> None:
    saved = observe(store.aws)
    server.snapshot(state_file)
    # Made after the snapshot, in places the file has no backend for: only clearing removes them.
    west = build_services(
        load_settings(aws_endpoint_url=server.endpoint_url, resource_prefix="statecheck", aws_region="us-west-2"),
        EMBEDDED_CREDENTIALS,
    )
    provision_all(west.aws, west.settings)
    store.aws.s3.create_bucket(Bucket="statecheck-extra")

    server.restore(state_file)
    assert west.aws.dynamodb.list_tables()["TableNames"] == []
    assert west.aws.kms.list_keys()["Keys"] == []
    assert observe(store.aws) == saved
    # The bucket name is free again: S3's global name registry was restored too.
    store.aws.s3.create_bucket(Bucket="statecheck-extra")


def test_kms_asymmetric_and_hmac_keys_work_after_restore(
    server: LockedMotoServer, store: Services, state_file: Path
) -> None:
    kms = store.aws.kms
    signing = {
        "RSA_2048": "RSASSA_PSS_SHA_256",
        "RSA_4096": "RSASSA_PKCS1_V1_5_SHA_512",
        "ECC_NIST_P256": "ECDSA_SHA_256",
        "ECC_SECG_P256K1": "ECDSA_SHA_256",
        "ECC_NIST_P521": "ECDSA_SHA_512",
    }
    before = {}
    for spec, algorithm in signing.items():
        key_id = kms.create_key(KeySpec=spec, KeyUsage="SIGN_VERIFY")["KeyMetadata"]["KeyId"]
        signature = kms.sign(KeyId=key_id, Message=b"checkpoint", SigningAlgorithm=algorithm)["Signature"]
        before[key_id] = (algorithm, signature, kms.get_public_key(KeyId=key_id)["PublicKey"])
    hmac_key = kms.create_key(KeySpec="HMAC_256", KeyUsage="GENERATE_VERIFY_MAC")["KeyMetadata"]["KeyId"]
    mac = kms.generate_mac(KeyId=hmac_key, Message=b"checkpoint", MacAlgorithm="HMAC_SHA_256")["Mac"]
    server.snapshot(state_file)
    moto_reset(server)
    server.restore(state_file)

    for key_id, (algorithm, signature, public_key) in before.items():
        assert kms.get_public_key(KeyId=key_id)["PublicKey"] == public_key
        verified = kms.verify(KeyId=key_id, Message=b"checkpoint", Signature=signature, SigningAlgorithm=algorithm)
        assert verified["SignatureValid"]
    verified = kms.verify_mac(KeyId=hmac_key, Message=b"checkpoint", Mac=mac, MacAlgorithm="HMAC_SHA_256")
    assert verified["MacValid"]


def test_snapshots_taken_under_writes_never_hold_half_a_transaction(
    server: LockedMotoServer, store: Services, tmp_path: Path
) -> None:
    # Pickled outside the request lock, most of these snapshots hold one item of the pair new and
    # the other old.
    aws = store.aws
    first, last = aws.table_name("consents"), aws.table_name("claims_review")
    # Filler in a table pickled between the pair's two, so pickling spans many thread switches.
    filler = aws.table_name("ledger")
    for start in range(0, 2000, 25):
        aws.dynamodb.batch_write_item(
            RequestItems={
                filler: [
                    {"PutRequest": {"Item": {"chain_id": {"S": f"c{n}"}, "seq": {"N": "1"}, "pad": {"S": "x" * 200}}}}
                    for n in range(start, start + 25)
                ]
            }
        )
    stop = threading.Event()

    def write_pairs() -> None:
        client = build_services(store.settings, EMBEDDED_CREDENTIALS).aws.dynamodb
        number = 0
        while not stop.is_set():
            number += 1
            value = {"N": str(number)}
            client.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": first, "Item": {"patient_id": {"S": "pair"}, "n": value}}},
                    {"Put": {"TableName": last, "Item": {"claim_id": {"S": "pair"}, "n": value}}},
                ]
            )

    writer = threading.Thread(target=write_pairs)
    writer.start()
    try:
        files = [server.snapshot(tmp_path / f"{i}.pickle").path for i in range(20)]
    finally:
        stop.set()
        writer.join()

    for path in files:
        server.restore(path)
        a = aws.dynamodb.get_item(TableName=first, Key={"patient_id": {"S": "pair"}}).get("Item", {})
        b = aws.dynamodb.get_item(TableName=last, Key={"claim_id": {"S": "pair"}}).get("Item", {})
        assert a.get("n") == b.get("n"), path.name


def test_unchanged_state_skips_the_snapshot(server: LockedMotoServer, store: Services, state_file: Path) -> None:
    sample = write_sample(store)
    assert server.dirty
    assert server.snapshot(state_file).written
    written_at = state_file.stat().st_mtime_ns

    # Reads only: DynamoDB and KMS reads are POSTs, S3 reads are GETs.
    observe(store.aws)
    store.aws.kms.decrypt(CiphertextBlob=sample["sealed"])
    assert not server.dirty
    skipped = server.snapshot(state_file)
    assert not skipped.written
    assert skipped.counts.items == 4
    assert state_file.stat().st_mtime_ns == written_at

    assert server.snapshot(state_file, force=True).written
    store.aws.dynamodb.delete_item(TableName=store.aws.table_name("consents"), Key={"patient_id": {"S": "p-1"}})
    assert server.dirty
    assert server.snapshot(state_file).counts.items == 3
    # Another path, or the file gone, is written even with nothing changed.
    assert server.snapshot(state_file.with_name("other.pickle")).written
    state_file.unlink()
    assert server.snapshot(state_file).written


def test_restored_state_is_not_dirty(server: LockedMotoServer, store: Services, state_file: Path) -> None:
    server.snapshot(state_file)
    moto_reset(server)
    server.restore(state_file)
    assert not server.dirty
    assert not server.snapshot(state_file).written


def test_restore_without_a_file_changes_nothing(server: LockedMotoServer, store: Services, state_file: Path) -> None:
    before = observe(store.aws)
    assert server.restore(state_file) is None
    assert observe(store.aws) == before


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _flipped(data: bytes) -> bytes:
    return data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:]


def _headerless(data: bytes) -> bytes:
    return data[data.index(b"\n") + 1 :]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (_truncated, "truncated"),
        (_flipped, "corrupt (checksum mismatch)"),
        (_headerless, "not a Flowledger state file"),
        (lambda data: b"", "not a Flowledger state file"),
    ],
)
def test_a_damaged_file_is_refused_in_one_line_and_memory_is_kept(
    server: LockedMotoServer,
    store: Services,
    state_file: Path,
    damage: Callable[[bytes], bytes],
    problem: str,
) -> None:
    write_sample(store)
    server.snapshot(state_file)
    state_file.write_bytes(damage(state_file.read_bytes()))
    before = observe(store.aws)

    with pytest.raises(ConfigurationError) as refused:
        server.restore(state_file)
    message = refused.value.message
    assert "\n" not in message
    assert str(state_file) in message and problem in message and "--reset" in message
    assert observe(store.aws) == before  # checked before anything was cleared


def test_a_file_from_another_moto_version_is_refused(
    server: LockedMotoServer, store: Services, state_file: Path
) -> None:
    server.snapshot(state_file)
    header, _, payload = state_file.read_bytes().partition(b"\n")
    state_file.write_bytes(json.dumps({**json.loads(header), "moto": "4.0.0"}).encode() + b"\n" + payload)

    with pytest.raises(ConfigurationError) as refused:
        server.restore(state_file)
    assert refused.value.message == (
        f"cannot restore the embedded AWS state from {state_file}: it was saved by moto 4.0.0, "
        f"this is moto {moto.__version__}; start with --reset to discard it and begin empty"
    )


class CountedSnapshots:
    """The server as the snapshot thread sees it, counting the intervals at which it was asked."""

    def __init__(self, server: LockedMotoServer) -> None:
        self._server = server
        self.calls = 0

    def snapshot(self, path: Path, *, force: bool = False) -> SnapshotInfo:
        self.calls += 1
        return self._server.snapshot(path, force=force)


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_periodic_snapshots_write_after_a_change_and_on_stop(
    server: LockedMotoServer, store: Services, state_file: Path
) -> None:
    consents = store.aws.table_name("consents")
    ticks = CountedSnapshots(server)
    periodic = PeriodicSnapshots(ticks, state_file, interval_seconds=0.05)
    periodic.start()
    store.aws.dynamodb.put_item(TableName=consents, Item={"patient_id": {"S": "p-1"}})
    _wait_for(lambda: periodic.last is not None and periodic.last.counts.items == 1)
    written_at = state_file.stat().st_mtime_ns
    seen = ticks.calls
    _wait_for(lambda: ticks.calls >= seen + 3)  # several intervals with nothing changed
    assert state_file.stat().st_mtime_ns == written_at
    assert periodic.last is not None and not periodic.last.written

    store.aws.dynamodb.put_item(TableName=consents, Item={"patient_id": {"S": "p-2"}})
    final = periodic.stop()
    assert final is not None and final.counts.items == 2

    moto_reset(server)
    server.restore(state_file)
    assert store.aws.dynamodb.scan(TableName=consents)["Count"] == 2


def test_a_failing_periodic_snapshot_is_logged_and_retried(
    server: LockedMotoServer, store: Services, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "not-yet" / STATE_FILE_NAME
    periodic = PeriodicSnapshots(server, target, interval_seconds=0.05)
    with caplog.at_level(logging.WARNING, logger="flowledger.local"):
        periodic.start()
        _wait_for(lambda: any("could not save the embedded AWS state" in r.getMessage() for r in caplog.records))
        target.parent.mkdir()
        _wait_for(target.exists)
    assert periodic.stop() is not None


def test_a_failing_final_snapshot_is_logged_not_raised(
    server: LockedMotoServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    periodic = PeriodicSnapshots(server, tmp_path / "missing" / STATE_FILE_NAME, interval_seconds=60)
    periodic.start()
    with caplog.at_level(logging.ERROR, logger="flowledger.local"):
        assert periodic.stop() is None
    assert "on shutdown" in caplog.text


def test_counts_read_as_the_banner_says_them() -> None:
    counts = StateCounts(tables=9, items=1234, buckets=2, objects=5, keys=1)
    assert counts.describe() == "9 tables (1,234 items), 2 buckets (5 objects), 1 key"
    assert StateCounts(tables=1, items=1).describe() == "1 table (1 item), 0 buckets (0 objects), 0 keys"


@pytest.mark.parametrize(
    ("method", "target", "changes"),
    [
        ("POST", "DynamoDB_20120810.GetItem", False),
        ("POST", "DynamoDB_20120810.Query", False),
        ("POST", "TrentService.Decrypt", False),
        ("POST", "Logs_20140328.FilterLogEvents", False),
        ("POST", "Logs_20140328.PutLogEvents", True),
        ("GET", None, False),
        ("HEAD", None, False),
        ("POST", "DynamoDB_20120810.PutItem", True),
        ("POST", "DynamoDB_20120810.TransactWriteItems", True),
        ("POST", "TrentService.CreateKey", True),
        ("PUT", None, True),
        ("DELETE", None, True),
        ("POST", None, True),  # moto-api/reset, S3 DeleteObjects
    ],
)
def test_only_known_reads_leave_the_store_clean(method: str, target: str | None, changes: bool) -> None:
    environ = {"REQUEST_METHOD": method, **({"HTTP_X_AMZ_TARGET": target} if target else {})}
    assert may_change_state(environ) is changes
