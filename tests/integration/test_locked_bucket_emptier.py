"""The trial stage's emptier (``functions/locked_bucket_emptier``): on the stack's delete it removes every
version of a GOVERNANCE-locked bucket, inside its retention, so the bucket itself can then be deleted;
it answers CloudFormation at the presigned URL either way. moto plays S3, a loopback server the URL."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto import mock_aws

from infra.constructs.functions import ROOT

REGION = "us-east-1"
BUCKET = "flowledger-checkpoints-trial"


def load_handler(stack_status: str = "DELETE_IN_PROGRESS") -> ModuleType:
    """The handler, its stack's status as CloudFormation would describe it (``DescribeStacks`` is faked:
    moto cannot hold a stack mid-deletion)."""
    path = ROOT / "functions" / "locked_bucket_emptier" / "handler.py"
    spec = importlib.util.spec_from_file_location("locked_bucket_emptier_handler", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class CloudFormationClient:
        def describe_stacks(self, StackName: str) -> dict[str, Any]:
            assert StackName.startswith("arn:aws:cloudformation:")
            return {"Stacks": [{"StackId": StackName, "StackStatus": stack_status}]}

    real = module.boto3.client
    module.boto3 = type(
        "Boto3",
        (),
        {"client": staticmethod(lambda name: CloudFormationClient() if name == "cloudformation" else real(name))},
    )
    return module


class CloudFormation:
    """Receives the custom resource's answer, as CloudFormation's presigned S3 URL would."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                owner.answers.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/response?signed=1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True).start()

    def event(self, request_type: str, bucket: str = BUCKET) -> dict[str, Any]:
        return {
            "RequestType": request_type,
            "ResponseURL": self.url,
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/Flowledger/1",
            "RequestId": "req-1",
            "LogicalResourceId": "TrialCleanupEmpty",
            "ResourceType": "Custom::EmptyLockedBucket",
            "ResourceProperties": {"ServiceToken": "arn", "BucketName": bucket},
        }


@pytest.fixture
def cloudformation() -> Iterator[CloudFormation]:
    running = CloudFormation()
    yield running
    running.server.shutdown()
    running.server.server_close()


@pytest.fixture
def s3(clean_environment: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A bucket locked as a trial's checkpoints are (GOVERNANCE, a day): versions, an overwrite, a delete marker."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET, ObjectLockEnabledForBucket=True)
        client.put_object_lock_configuration(
            Bucket=BUCKET,
            ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}},
            },
        )
        for i in range(3):
            client.put_object(Bucket=BUCKET, Key=f"checkpoints/{i}.json", Body=b"{}")
        client.put_object(Bucket=BUCKET, Key="checkpoints/0.json", Body=b"{ }")  # a second version
        client.delete_object(Bucket=BUCKET, Key="checkpoints/1.json")  # a delete marker
        yield client


def versions(s3: Any) -> int:
    listed = s3.list_object_versions(Bucket=BUCKET)
    return len(listed.get("Versions", [])) + len(listed.get("DeleteMarkers", []))


def test_delete_removes_every_locked_version_so_the_bucket_can_go(s3: Any, cloudformation: CloudFormation) -> None:
    with pytest.raises(s3.exceptions.ClientError):  # locked: CDK's auto-delete would be refused
        _plain_delete_fails(s3)
    assert versions(s3) == 5
    load_handler().handler(cloudformation.event("Delete"), None)
    (answer,) = cloudformation.answers
    assert answer["Status"] == "SUCCESS", answer
    assert answer["Reason"] == f"deleted 5 versions of {BUCKET}"
    assert (answer["PhysicalResourceId"], answer["RequestId"]) == (BUCKET, "req-1")
    assert versions(s3) == 0
    s3.delete_bucket(Bucket=BUCKET)  # what CloudFormation does next


def _plain_delete_fails(s3: Any) -> None:
    """What CDK's auto-delete does (no bypass): S3 refuses every locked version."""
    listed = s3.list_object_versions(Bucket=BUCKET)["Versions"]
    answer = s3.delete_objects(
        Bucket=BUCKET, Delete={"Objects": [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in listed]}
    )
    if answer.get("Errors"):
        raise s3.exceptions.ClientError({"Error": {"Code": answer["Errors"][0]["Code"]}}, "DeleteObjects")


@pytest.mark.parametrize("request_type", ["Create", "Update"])
def test_create_and_update_delete_nothing(s3: Any, cloudformation: CloudFormation, request_type: str) -> None:
    load_handler().handler(cloudformation.event(request_type), None)
    assert [a["Status"] for a in cloudformation.answers] == ["SUCCESS"]
    assert versions(s3) == 5


def test_a_bucket_already_gone_is_success(s3: Any, cloudformation: CloudFormation) -> None:
    load_handler().handler(cloudformation.event("Delete", bucket="never-made"), None)
    assert [a["Status"] for a in cloudformation.answers] == ["SUCCESS"]


def test_a_refused_delete_is_reported_as_failed_not_left_hanging(
    s3: Any, cloudformation: CloudFormation, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3.put_object_retention(
        Bucket=BUCKET,
        Key="checkpoints/2.json",
        Retention={"Mode": "COMPLIANCE", "RetainUntilDate": "2099-01-01T00:00:00Z"},
        BypassGovernanceRetention=True,
    )
    load_handler().handler(cloudformation.event("Delete"), None)
    (answer,) = cloudformation.answers
    assert answer["Status"] == "FAILED"
    assert "not deleted" in answer["Reason"] and "AccessDenied" in answer["Reason"]


@pytest.mark.parametrize("stack_status", ["UPDATE_ROLLBACK_IN_PROGRESS", "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS"])
def test_a_delete_of_the_resource_alone_keeps_the_bucket(
    s3: Any, cloudformation: CloudFormation, stack_status: str
) -> None:
    """An update's rollback (or a renamed logical id) deletes the resource while the bucket stays in use."""
    load_handler(stack_status).handler(cloudformation.event("Delete"), None)
    (answer,) = cloudformation.answers
    assert answer["Status"] == "SUCCESS" and "is kept" in answer["Reason"]
    assert versions(s3) == 5
