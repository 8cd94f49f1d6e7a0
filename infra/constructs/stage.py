"""The deployment stage: ``prod`` keeps its data forever, ``dev`` is a trial that ``cdk destroy`` removes.

``cdk deploy -c flowledger:stage=dev`` (default ``prod``):

- ``prod``: every table, bucket, log group and the KMS key are RETAIN, and every table has DynamoDB
  deletion protection (nobody deletes it by hand either until it is turned off); the checkpoint
  bucket locks its objects in COMPLIANCE mode for the spec's years (nobody, root included, can
  shorten it); access logs are kept for a year.
- ``dev``: they are DESTROY, tables are unprotected, buckets are emptied on delete, the key is
  scheduled for deletion after the shortest pending window KMS allows, the checkpoint bucket locks in
  GOVERNANCE mode for a day (the shortest default retention) and access logs are kept for a month, so
  a trial leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Node

STAGE_CONTEXT = "flowledger:stage"
STAGES = ("prod", "dev")
DEV_LOCK_DAYS = 1  # S3's shortest default retention
DEV_KEY_PENDING_DAYS = 7  # KMS's shortest pending window
# S3 server and CloudFront access logs are for investigating traffic, not the audit record (that is the
# ledger and its locked checkpoints): a year covers an incident found late and a yearly review; a
# trial's month covers its own debugging.
ACCESS_LOG_DAYS = 365
DEV_ACCESS_LOG_DAYS = 30


@dataclass(frozen=True)
class StagePolicy:
    """How long a stage keeps its data, and what deleting the stack does to it."""

    name: str = "prod"

    @classmethod
    def from_context(cls, node: Node) -> StagePolicy:
        """The stage from ``flowledger:stage``; anything but ``prod`` or ``dev`` fails the synth naming the key."""
        value: Any = node.try_get_context(STAGE_CONTEXT)
        if value is None or value == "":
            return cls()
        if value not in STAGES:
            raise ValueError(f"{STAGE_CONTEXT} must be one of {', '.join(STAGES)}, not {value!r}")
        return cls(name=value)

    @property
    def is_trial(self) -> bool:
        return self.name == "dev"

    @property
    def removal(self) -> RemovalPolicy:
        """Tables, buckets, log groups, queues and keys."""
        return RemovalPolicy.DESTROY if self.is_trial else RemovalPolicy.RETAIN

    @property
    def deletion_protection(self) -> bool:
        """DynamoDB deletion protection on every table, in prod only.

        RETAIN keeps a table when CloudFormation deletes the stack; protection also refuses a DeleteTable
        from the console or an API call until someone turns it off. A trial's tables must go with ``cdk destroy``.
        """
        return not self.is_trial

    @property
    def access_log_retention(self) -> Duration:
        """How long the access-log bucket keeps a log object before it expires."""
        return Duration.days(DEV_ACCESS_LOG_DAYS if self.is_trial else ACCESS_LOG_DAYS)

    @property
    def auto_delete_objects(self) -> bool:
        """Empty a bucket when the stack deletes it (a non-empty bucket cannot be deleted)."""
        return self.is_trial

    @property
    def key_pending_window(self) -> Duration | None:
        return Duration.days(DEV_KEY_PENDING_DAYS) if self.is_trial else None

    def lock_retention(self, days: int) -> s3.ObjectLockRetention:
        """The checkpoint bucket's default retention: the spec's in prod, a day of GOVERNANCE in a trial."""
        if self.is_trial:
            return s3.ObjectLockRetention.governance(Duration.days(DEV_LOCK_DAYS))
        return s3.ObjectLockRetention.compliance(Duration.days(days))
