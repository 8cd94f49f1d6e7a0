"""CloudFormation custom resource of a trial (``dev``) stage: empties an Object Lock bucket when the
stack deletes it, so ``cdk destroy`` can remove the bucket.

CDK's own auto-delete cannot: a version still inside its GOVERNANCE retention is deleted only with
``x-amz-bypass-governance-retention``, which its handler never sends. This one deletes every version
and delete marker with the bypass (the role may ``s3:BypassGovernanceRetention`` on this bucket only).
Create and Update do nothing. A COMPLIANCE lock (prod) cannot be bypassed, and prod never deploys this.

CloudFormation also sends Delete when the resource alone goes (an update's rollback, a renamed logical
id) while the bucket stays in use: the bucket is emptied only when the stack itself is being deleted.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

import boto3

logger = logging.getLogger("flowledger.locked_bucket_emptier")
logger.setLevel(logging.INFO)
BATCH = 1000  # DeleteObjects takes at most 1,000 keys


class NotEmptied(RuntimeError):
    """S3 refused to delete some versions; the message names how many and the first error."""


def empty(s3: Any, bucket: str) -> int:
    """Delete every object version and delete marker of ``bucket``; the number deleted."""
    deleted = 0
    pages = s3.get_paginator("list_object_versions").paginate(Bucket=bucket)
    try:
        for page in pages:
            listed = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in (*page.get("Versions", ()), *page.get("DeleteMarkers", ()))
            ]
            for start in range(0, len(listed), BATCH):
                answer = s3.delete_objects(
                    Bucket=bucket,
                    Delete={"Objects": listed[start : start + BATCH], "Quiet": True},
                    BypassGovernanceRetention=True,
                )
                errors = answer.get("Errors", [])
                if errors:
                    first = errors[0]
                    raise NotEmptied(f"{len(errors)} versions not deleted: {first.get('Code')} {first.get('Message')}")
                deleted += len(listed[start : start + BATCH])
    except s3.exceptions.NoSuchBucket:
        logger.info("bucket %s is already gone", bucket)
    return deleted


def respond(event: dict[str, Any], status: str, reason: str) -> None:
    """Tell CloudFormation the outcome (a PUT to the presigned URL it gave)."""
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason[:1000],
            "PhysicalResourceId": event.get("PhysicalResourceId") or event["ResourceProperties"]["BucketName"],
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
        }
    ).encode()
    request = urllib.request.Request(  # noqa: S310 - CloudFormation's presigned https URL
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))}
    )
    with urllib.request.urlopen(request, timeout=30):  # noqa: S310
        pass


def stack_is_being_deleted(stack_id: str) -> bool:
    """Whether the stack (not just this resource) is being deleted."""
    stacks = boto3.client("cloudformation").describe_stacks(StackName=stack_id)["Stacks"]
    return bool(stacks) and stacks[0]["StackStatus"] == "DELETE_IN_PROGRESS"


def handler(event: dict[str, Any], context: object) -> None:
    status, reason = "SUCCESS", "nothing to do"
    try:
        if event["RequestType"] == "Delete":
            bucket = event["ResourceProperties"]["BucketName"]
            if stack_is_being_deleted(event["StackId"]):
                count = empty(boto3.client("s3"), bucket)
                reason = f"deleted {count} versions of {bucket}"
            else:
                reason = f"the stack is not being deleted: {bucket} is kept"
            logger.info(reason)
    except Exception as error:  # CloudFormation waits an hour for an answer that never comes otherwise
        status, reason = "FAILED", f"{type(error).__name__}: {error}"
        logger.error("emptying failed: %s", reason)
    respond(event, status, reason)
