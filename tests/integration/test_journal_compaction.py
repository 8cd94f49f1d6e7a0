"""After an erasure's deletes, compaction leaves no erased value in any file of the embedded store.

The journal holds items as written and S3 bodies as uploaded, and snapshots hold the whole store: a
value written and then deleted stays in them until they are replaced. Each test writes a value found
nowhere else, deletes it everywhere it was written, compacts, and reads every file under the data dir.
"""

from __future__ import annotations

import base64
import select
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowledger.config import load_settings
from flowledger.errors import UpstreamUnavailable
from flowledger.local import moto_state
from flowledger.local.datadir import EMBEDDED_CREDENTIALS
from flowledger.local.journal import FaultInjection
from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import Services, build_services
from flowledger.store.compaction import compact_embedded_store

TABLE = "erasure-items"
BUCKET = "erasure-documents"


def journaled(
    data: Path, *, journal: bool = True, faults: FaultInjection | None = None
) -> tuple[LockedMotoServer, Services]:
    """A served store on ``data`` (as ``test_journal_replay``), restored from what ``data`` holds."""
    server = LockedMotoServer()
    server.bind()
    if journal:
        server.use_journal(data / "journal", data / "aws-state.pickle", faults)
    server.restore(data / "aws-state.pickle")
    server.serve()
    settings = load_settings(aws_endpoint_url=server.endpoint_url, resource_prefix="erasure")
    return server, build_services(settings, EMBEDDED_CREDENTIALS)


@pytest.fixture
def data(tmp_path: Path, clean_environment: None) -> Iterator[Path]:
    moto_state.reset_state()
    yield tmp_path
    moto_state.reset_state()


@pytest.fixture
def secret() -> str:
    return f"erase-me-{uuid.uuid4().hex}"


def forms(secret: str) -> list[bytes]:
    """The secret as bytes, and as base64 at each of the three alignments it can start at."""
    raw = secret.encode()
    found = [raw]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw)
        found.append(encoded[4 : len(encoded) - 4])  # the characters that depend on the secret alone
    return found


def files_holding(data: Path, secret: str) -> list[str]:
    """Every file under ``data`` whose bytes hold the secret in any of its forms."""
    wanted = forms(secret)
    return [
        str(path.relative_to(data))
        for path in sorted(data.rglob("*"))
        if path.is_file() and any(form in path.read_bytes() for form in wanted)
    ]


def make_store(services: Services) -> None:
    aws = services.aws
    aws.dynamodb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    aws.s3.create_bucket(Bucket=BUCKET)
    aws.s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    aws.dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "survivor"}, "note": {"S": "kept"}})
    aws.s3.put_object(Bucket=BUCKET, Key="survivor.txt", Body=b"kept")


def write_secret(services: Services, secret: str) -> str:
    """The secret in an item (put, then updated) and in two versions of an object named after it."""
    aws = services.aws
    aws.dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "patient-1"}, "note": {"S": f"{secret} as put"}})
    aws.dynamodb.update_item(
        TableName=TABLE,
        Key={"pk": {"S": "patient-1"}},
        UpdateExpression="SET note = :n, scan_bytes = :b",
        ExpressionAttributeValues={":n": {"S": f"{secret} as updated"}, ":b": {"B": secret.encode()}},
    )
    key = f"patients/{secret}/letter.txt"
    for version in ("first", "second"):
        aws.s3.put_object(Bucket=BUCKET, Key=key, Body=f"{secret} {version}".encode(), Tagging="kind=letter")
    return key


def erase(services: Services, key: str, *, batch: bool = False) -> None:
    """Delete the item, then every version of the object and every delete marker, as an erasure does.

    One by one, each delete is journaled; in one ``DeleteObjects`` (``batch``), the store snapshots.
    """
    aws = services.aws
    aws.dynamodb.delete_item(TableName=TABLE, Key={"pk": {"S": "patient-1"}})
    aws.s3.delete_object(Bucket=BUCKET, Key=key)  # a delete marker over the second version
    listing = aws.s3.list_object_versions(Bucket=BUCKET, Prefix=key)
    versions = [v["VersionId"] for v in listing.get("Versions", []) + listing.get("DeleteMarkers", [])]
    assert len(versions) == 3
    if batch:
        objects = [{"Key": key, "VersionId": version} for version in versions]
        aws.s3.delete_objects(Bucket=BUCKET, Delete={"Objects": objects})
    else:
        for version in versions:
            aws.s3.delete_object(Bucket=BUCKET, Key=key, VersionId=version)
    listing = aws.s3.list_object_versions(Bucket=BUCKET, Prefix=key)
    assert "Versions" not in listing and "DeleteMarkers" not in listing


def survivors(services: Services) -> tuple[Any, bytes, int, int]:
    aws = services.aws
    item = aws.dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "survivor"}}).get("Item")
    body = aws.s3.get_object(Bucket=BUCKET, Key="survivor.txt")["Body"].read()
    items = aws.dynamodb.scan(TableName=TABLE)["Count"]
    listing = aws.s3.list_object_versions(Bucket=BUCKET)
    versions = len(listing.get("Versions", [])) + len(listing.get("DeleteMarkers", []))
    return item, body, items, versions


def test_an_erasure_compacted_over_http_leaves_the_value_in_no_file_and_no_restart(data: Path, secret: str) -> None:
    server, services = journaled(data)
    try:
        make_store(services)
        key = write_secret(services, secret)
        server.snapshot(data / "aws-state.pickle")  # a snapshot holding the secret ...
        services.aws.dynamodb.update_item(  # ... and the journal after it too
            TableName=TABLE,
            Key={"pk": {"S": "patient-1"}},
            UpdateExpression="SET again = :n",
            ExpressionAttributeValues={":n": {"S": f"{secret} after the snapshot"}},
        )
        services.aws.dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "later"}, "note": {"S": "kept too"}})
        assert files_holding(data, secret)  # the check finds it where it is
        erase(services, key)
        assert files_holding(data, secret)  # deleting alone leaves it in the journal and the snapshot
        (data / ".aws-state.pickle.999-1.tmp").write_bytes(secret.encode())  # an orphaned snapshot's, say

        assert compact_embedded_store(services.settings) is True
        assert files_holding(data, secret) == []
        assert secret.encode() not in moto_state.dump_state()  # nor anywhere in what moto holds (its tags)
        expected = survivors(services)
        assert expected[2:] == (2, 1)
    finally:
        server.stop()
    moto_state.reset_state()

    again, services = journaled(data)
    try:
        assert survivors(services) == expected
        assert services.aws.dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "patient-1"}}).get("Item") is None
        assert secret.encode() not in moto_state.dump_state()
        assert files_holding(data, secret) == []
    finally:
        again.stop()


def test_compaction_waits_for_a_snapshot_forked_before_the_erasure(data: Path, secret: str) -> None:
    server, services = journaled(data)
    try:
        make_store(services)
        key = write_secret(services, secret)
        store = server.journaled
        assert store is not None
        with store._served.lock:  # a write's snapshot, forked before the deletes and not yet finished
            older = store._begin_snapshot()
        assert select.select([older.report], [], [], 10)[0]  # its file is written, holding the secret
        assert older.temporary.exists()
        erase(services, key, batch=True)

        compacting = threading.Thread(target=server.compact)
        compacting.start()
        compacting.join(timeout=0.3)
        assert compacting.is_alive()  # waiting for the older snapshot, whose file still holds the secret
        store._finish_snapshot(older)  # discarded: a newer snapshot is in place
        compacting.join(timeout=10)
        assert not compacting.is_alive()
        assert files_holding(data, secret) == []
    finally:
        server.stop()


def test_restore_deletes_temporary_snapshot_files_a_killed_server_left(data: Path, secret: str) -> None:
    for name in (".aws-state.pickle.x.tmp", ".aws-state.pickle.4242-1.tmp"):
        (data / name).write_bytes(secret.encode())
    (data / "unrelated.tmp").write_bytes(b"not a snapshot")
    server, _ = journaled(data)
    server.stop()
    assert files_holding(data, secret) == []
    assert (data / "unrelated.tmp").exists()

    (data / ".aws-state.pickle.x.tmp").write_bytes(secret.encode())
    server, _ = journaled(data, journal=False)
    server.stop()
    assert files_holding(data, secret) == []


def test_without_a_journal_compaction_rewrites_the_state_file(data: Path, secret: str) -> None:
    server, services = journaled(data, journal=False)
    try:
        make_store(services)
        key = write_secret(services, secret)
        server.snapshot(data / "aws-state.pickle")
        erase(services, key)
        (data / ".aws-state.pickle.x.tmp").write_bytes(secret.encode())
        assert files_holding(data, secret) == [".aws-state.pickle.x.tmp", "aws-state.pickle"]
        assert compact_embedded_store(services.settings) is True
        assert files_holding(data, secret) == []
    finally:
        server.stop()


def test_the_hook_refuses_other_clients_and_fails_when_the_store_cannot_compact(data: Path) -> None:
    full = data / "disk-full"
    server, services = journaled(data, faults=FaultInjection(full))
    answers: list[str] = []
    environ = {"PATH_INFO": "/_flowledger/compact", "REQUEST_METHOD": "POST", "HTTP_HOST": "127.0.0.1:1"}
    try:
        app = server._app
        body = app({**environ, "REMOTE_ADDR": "192.0.2.7"}, lambda status, headers: answers.append(status))
        assert answers == ["403 Forbidden"] and b'"compacted": false' in b"".join(body)
        changes = app.changes
        full.touch()  # a full disk: no snapshot can be written
        with pytest.raises(UpstreamUnavailable, match=r"HTTP 503.*No space left"):
            compact_embedded_store(services.settings)
        full.unlink()
        assert compact_embedded_store(services.settings) is True  # and the retry succeeds
        assert app.changes == changes  # neither request counted as a write, nor was journaled
    finally:
        server.stop()


def test_an_unreachable_embedded_store_fails_the_compaction(clean_environment: None) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed at once: nothing listens there
    settings = load_settings(aws_endpoint_url=f"http://127.0.0.1:{port}")
    with pytest.raises(UpstreamUnavailable, match="could not compact"):
        compact_embedded_store(settings, timeout_seconds=2)
