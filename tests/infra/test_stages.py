"""Stages: prod keeps every table, bucket, log group and key (checkpoints locked in COMPLIANCE; tables
deletion-protected; access logs a year); dev destroys them all, empties the buckets, leaves the tables
unprotected, keeps access logs a month and locks checkpoints in GOVERNANCE for a day, so a trial can be
torn down. The data key encrypts every log group, and lets CloudWatch Logs of this region use it for that."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App

from flowledger.store.tables import BUCKETS
from infra.constructs.data import ABORT_MULTIPART_DAYS, ACCESS_LOG_NONCURRENT_DAYS, ERASED_VERSION_DAYS
from infra.constructs.stage import ACCESS_LOG_DAYS, DEV_ACCESS_LOG_DAYS, STAGE_CONTEXT, StagePolicy
from infra.constructs.trial_cleanup import EMPTIER_ACTIONS, RESOURCE_TYPE
from tests.infra.synth import resources_with

KEPT = ("AWS::DynamoDB::Table", "AWS::S3::Bucket", "AWS::KMS::Key", "AWS::Logs::LogGroup", "AWS::SQS::Queue")
LOCK_DAYS = next(spec.lock_days for spec in BUCKETS if spec.lock_days)


def synth_with(context: dict[str, Any]) -> dict[str, Any]:
    """The real app's template with ``context`` on top of cdk.json's, as ``cdk -c`` would put it; cdk-nag runs."""
    return resources_with(context)


@pytest.fixture(scope="module")
def dev() -> dict[str, Any]:
    return synth_with({STAGE_CONTEXT: "dev"})


def kept(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {key: r for key, r in resources.items() if r["Type"] in KEPT}


def lock_rule(resources: dict[str, Any]) -> dict[str, Any]:
    (locked,) = [
        r for r in resources.values() if r["Type"] == "AWS::S3::Bucket" and r["Properties"].get("ObjectLockEnabled")
    ]
    return dict(locked["Properties"]["ObjectLockConfiguration"]["Rule"]["DefaultRetention"])


def test_prod_retains_every_table_bucket_key_log_group_and_queue(resources: dict[str, Any]) -> None:
    found = kept(resources)
    assert {r["Type"] for r in found.values()} == set(KEPT)
    for key, resource in found.items():
        assert (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) == ("Retain", "Retain"), key
    assert not [r for r in resources.values() if r["Type"] == "Custom::S3AutoDeleteObjects"]


def test_prod_locks_checkpoints_in_compliance_mode_for_the_specs_years(resources: dict[str, Any]) -> None:
    assert lock_rule(resources) == {"Mode": "COMPLIANCE", "Days": LOCK_DAYS}


def test_dev_destroys_every_table_bucket_key_log_group_and_queue(dev: dict[str, Any]) -> None:
    found = kept(dev)
    assert {r["Type"] for r in found.values()} == set(KEPT)
    for key, resource in found.items():
        assert (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) == ("Delete", "Delete"), key


def test_dev_empties_every_bucket_before_deleting_it(dev: dict[str, Any]) -> None:
    buckets = {key for key, r in dev.items() if r["Type"] == "AWS::S3::Bucket"}
    emptied = [
        r["Properties"]["BucketName"]["Ref"]
        for r in dev.values()
        if r["Type"] in ("Custom::S3AutoDeleteObjects", RESOURCE_TYPE)  # CDK's, and ours for the locked one
    ]
    assert sorted(emptied) == sorted(buckets) and len(buckets) == len(BUCKETS) + 2  # the access-log and console buckets


def test_dev_keys_are_deleted_after_the_shortest_pending_window(dev: dict[str, Any]) -> None:
    keys = [r for r in dev.values() if r["Type"] == "AWS::KMS::Key"]
    assert keys and all(k["Properties"]["PendingWindowInDays"] == 7 for k in keys)


def test_dev_locks_checkpoints_in_governance_mode_for_a_day(dev: dict[str, Any]) -> None:
    assert lock_rule(dev) == {"Mode": "GOVERNANCE", "Days": 1}


@pytest.mark.parametrize("value", ["staging", "PROD", 1])
def test_an_unknown_stage_fails_the_synth_naming_the_key(value: Any) -> None:
    with pytest.raises(ValueError, match="must be one of prod, dev") as failure:
        StagePolicy.from_context(App(context={STAGE_CONTEXT: value}).node)
    assert str(failure.value).startswith(STAGE_CONTEXT)


def test_the_stage_is_prod_unless_the_context_says_dev() -> None:
    assert StagePolicy.from_context(App().node).name == "prod"
    assert StagePolicy.from_context(App(context={STAGE_CONTEXT: "dev"}).node).name == "dev"


def data_key(resources: dict[str, Any]) -> str:
    (key,) = [k for k, r in resources.items() if r["Type"] == "AWS::KMS::Key" and k.startswith("DataKey")]
    return key


@pytest.mark.parametrize("stage", ["prod", "dev"])
def test_every_log_group_is_encrypted_with_the_data_key(
    stage: str, resources: dict[str, Any], dev: dict[str, Any]
) -> None:
    template = resources if stage == "prod" else dev
    groups = [r for r in template.values() if r["Type"] == "AWS::Logs::LogGroup"]
    assert len(groups) >= 9  # eight functions and the API's access logs
    for group in groups:
        assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [data_key(template), "Arn"]}


def test_the_data_key_lets_cloudwatch_logs_of_this_region_encrypt_this_accounts_log_groups(
    resources: dict[str, Any],
) -> None:
    policy = resources[data_key(resources)]["Properties"]["KeyPolicy"]["Statement"]
    logs = [s for s in policy if "logs." in json.dumps(s.get("Principal", {}))]
    assert len(logs) == 1
    (statement,) = logs
    assert json.dumps(statement["Principal"]["Service"]) == json.dumps(
        {"Fn::Join": ["", ["logs.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}
    )
    assert {"kms:Encrypt*", "kms:Decrypt*", "kms:GenerateDataKey*"} <= set(statement["Action"])
    condition = statement["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
    assert condition == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":logs:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                ":log-group:*",
            ],
        ]
    }


def test_dev_empties_the_locked_bucket_with_the_governance_bypass_before_deleting_it(dev: dict[str, Any]) -> None:
    (locked_id,) = [
        key for key, r in dev.items() if r["Type"] == "AWS::S3::Bucket" and r["Properties"].get("ObjectLockEnabled")
    ]
    (emptied,) = [r for r in dev.values() if r["Type"] == RESOURCE_TYPE]
    assert emptied["Properties"]["BucketName"] == {"Ref": locked_id}  # so CloudFormation deletes it first
    (emptier_id,) = [
        key for key, r in dev.items() if r["Type"] == "AWS::Lambda::Function" and key.startswith("TrialCleanupFunction")
    ]
    assert emptied["Properties"]["ServiceToken"] == {"Fn::GetAtt": [emptier_id, "Arn"]}
    emptier = dev[emptier_id]
    assert emptier["Properties"]["Handler"] == "handler.handler"
    role = emptier["Properties"]["Role"]["Fn::GetAtt"][0]
    (policy_id,) = [
        key for key, r in dev.items() if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"]["Roles"]
    ]
    assert policy_id in emptied["DependsOn"]  # the role may still delete when the resource is deleted
    (statement,) = [
        s
        for s in dev[policy_id]["Properties"]["PolicyDocument"]["Statement"]
        if "s3:BypassGovernanceRetention" in s["Action"]
    ]
    assert sorted(statement["Action"]) == sorted(EMPTIER_ACTIONS)
    assert referenced(statement["Resource"]) == {locked_id}  # this bucket and its objects, nothing else
    # CDK's auto-delete (which cannot bypass the lock) is not also attached to it.
    auto = [r for r in dev.values() if r["Type"] == "Custom::S3AutoDeleteObjects"]
    assert {"Ref": locked_id} not in [r["Properties"]["BucketName"] for r in auto]


def test_prod_builds_no_emptier(resources: dict[str, Any]) -> None:
    assert not [r for r in resources.values() if r["Type"] == RESOURCE_TYPE]
    assert not [
        s
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if "s3:BypassGovernanceRetention" in s["Action"]
    ]


def referenced(value: Any) -> set[str]:
    """The logical ids a template value refers to (``Ref`` and ``Fn::GetAtt``), however nested."""
    if isinstance(value, dict):
        if "Ref" in value:
            return {value["Ref"]}
        if "Fn::GetAtt" in value:
            return {value["Fn::GetAtt"][0]}
        return set().union(*(referenced(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(referenced(v) for v in value))
    return set()


@pytest.mark.parametrize(("stage", "protected"), [("prod", True), ("dev", False)])
def test_every_table_is_deletion_protected_in_prod_only(
    stage: str, protected: bool, resources: dict[str, Any], dev: dict[str, Any]
) -> None:
    template = resources if stage == "prod" else dev
    tables = [r for r in template.values() if r["Type"] == "AWS::DynamoDB::Table"]
    assert tables
    for table in tables:
        # An unprotected table says so (false), so that a stage moved to dev can be destroyed.
        assert table["Properties"]["DeletionProtectionEnabled"] is protected, table["Properties"]["TableName"]


@pytest.mark.parametrize(("stage", "days"), [("prod", ACCESS_LOG_DAYS), ("dev", DEV_ACCESS_LOG_DAYS)])
def test_the_access_log_bucket_is_versioned_and_expires_logs_by_the_stages_retention(
    stage: str, days: int, resources: dict[str, Any], dev: dict[str, Any]
) -> None:
    template = resources if stage == "prod" else dev
    (bucket,) = [r for k, r in template.items() if r["Type"] == "AWS::S3::Bucket" and k.startswith("DataAccessLogs")]
    assert bucket["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["Properties"]["LifecycleConfiguration"]["Rules"] == [
        {
            "Id": "ExpireAccessLogs",
            "Status": "Enabled",
            "ExpirationInDays": days,
            "NoncurrentVersionExpiration": {"NoncurrentDays": ACCESS_LOG_NONCURRENT_DAYS},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_MULTIPART_DAYS},
        }
    ]
    # the retention docs/operations.md documents
    assert (ACCESS_LOG_DAYS, DEV_ACCESS_LOG_DAYS, ACCESS_LOG_NONCURRENT_DAYS, ABORT_MULTIPART_DAYS) == (365, 30, 30, 7)


def test_an_erased_document_or_artifact_is_gone_a_month_later_and_checkpoints_stay_locked(
    resources: dict[str, Any],
) -> None:
    buckets = {
        spec.name: next(r for k, r in resources.items() if k.startswith(f"DataBucket{spec.name}"))["Properties"]
        for spec in BUCKETS
    }
    for spec in BUCKETS:
        rules = buckets[spec.name].get("LifecycleConfiguration", {}).get("Rules")
        if spec.lock_days:  # evidence: its lock keeps every version, no rule shortens it
            assert rules is None, spec.name
            continue
        assert buckets[spec.name]["VersioningConfiguration"] == {"Status": "Enabled"}
        assert rules == [
            {
                "Id": "ExpireOldVersions",
                "Status": "Enabled",
                "NoncurrentVersionExpiration": {"NoncurrentDays": ERASED_VERSION_DAYS},
                "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_MULTIPART_DAYS},
            }
        ], spec.name
    assert ERASED_VERSION_DAYS == 30  # the month docs/operations.md names
