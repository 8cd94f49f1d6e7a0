"""What the diagnosis agent may read in AWS: the allowed log groups and, optionally, one Aurora database.

Both come from CDK context, and nothing is granted without it:

- ``flowledger:diagnosisLogGroups``: the log groups ``query_logs`` may search (a list, or a
  comma-separated string from ``-c``). Default none: the tool is not offered.
- ``flowledger:diagnosisDataApi``: ``{"resourceArn", "secretArn", "database"}`` of an Aurora MySQL
  cluster with the RDS Data API enabled and the secret of a SELECT-only user. Default none:
  ``query_sql`` is not offered (the function has no SQLite file and no MySQL host).

The diagnosis executor runs in the chat function, so that function alone gets the grants and the
environment (``FLOWLEDGER_DIAGNOSIS_*``), each grant on the named resource only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aws_cdk import Acknowledgment, ArnFormat, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Node

from infra.constructs.context import json_context
from infra.constructs.nag import NagEnvironment

LOG_GROUPS_CONTEXT = "flowledger:diagnosisLogGroups"
DATA_API_CONTEXT = "flowledger:diagnosisDataApi"
_LOG_GROUP_NAME = re.compile(r"^[\w./#-]{1,512}$")
_CLUSTER_ARN = re.compile(r"^arn:aws[\w-]*:rds:[a-z0-9-]+:\d{12}:cluster:[a-zA-Z][\w-]{0,62}$")
_SECRET_ARN = re.compile(r"^arn:aws[\w-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+$")
_DATABASE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,63}$")


@dataclass(frozen=True)
class DataApiDatabase:
    resource_arn: str
    secret_arn: str
    database: str


@dataclass(frozen=True)
class DiagnosisAccess:
    """The log groups and the database the diagnosis agent may read; nothing by default."""

    log_groups: tuple[str, ...] = ()
    data_api: DataApiDatabase | None = None

    @classmethod
    def from_context(cls, node: Node) -> DiagnosisAccess:
        """Read and check the two context values; a bad one fails the synth with a message naming it."""
        return cls(
            log_groups=_log_groups(node.try_get_context(LOG_GROUPS_CONTEXT)),
            data_api=_data_api(json_context(node, DATA_API_CONTEXT)),
        )

    def environment(self) -> dict[str, str]:
        """The settings the chat function's diagnosis executor reads (see ``flowledger.config``)."""
        # Always set: without it the settings' default (the two demo groups) would be offered in AWS.
        environment = {"FLOWLEDGER_DIAGNOSIS_LOG_GROUPS": ",".join(self.log_groups)}
        if self.data_api is not None:
            environment |= {
                "FLOWLEDGER_DIAGNOSIS_SQL_BACKEND": "data_api",
                "FLOWLEDGER_DIAGNOSIS_DATA_API_RESOURCE_ARN": self.data_api.resource_arn,
                "FLOWLEDGER_DIAGNOSIS_DATA_API_SECRET_ARN": self.data_api.secret_arn,
                "FLOWLEDGER_DIAGNOSIS_DATA_API_DATABASE": self.data_api.database,
            }
        return environment


def grant_diagnosis(function: lambda_.Function, access: DiagnosisAccess) -> None:
    """Give ``function`` the environment of ``access`` and read access to exactly what it names."""
    for name, value in access.environment().items():
        function.add_environment(name, value)
    if access.log_groups:
        stack = Stack.of(function)
        groups = [
            stack.format_arn(
                service="logs", resource="log-group", resource_name=group, arn_format=ArnFormat.COLON_RESOURCE_NAME
            )
            for group in access.log_groups
        ]
        # CloudWatch Logs names a group both ways (DescribeLogGroups reports "<arn>:*"); both are granted.
        function.add_to_role_policy(
            iam.PolicyStatement(actions=["logs:FilterLogEvents"], resources=[*groups, *(f"{g}:*" for g in groups)])
        )
        nag = NagEnvironment.of(function)
        Validations.of(function).acknowledge(
            *(
                Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::{nag.arn('logs', f'log-group:{g}:*')}]",
                    reason="The ':*' form of one allowed log group's own ARN, which CloudWatch Logs also "
                    "authorizes reads against; it covers that group's streams only.",
                )
                for g in access.log_groups
            )
        )
    if access.data_api is not None:
        function.add_to_role_policy(
            iam.PolicyStatement(actions=["rds-data:ExecuteStatement"], resources=[access.data_api.resource_arn])
        )
        function.add_to_role_policy(
            iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[access.data_api.secret_arn])
        )


def _log_groups(value: Any) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{LOG_GROUPS_CONTEXT} must be a list of log group names or a comma-separated string")
    groups = tuple(dict.fromkeys(n.strip() for n in names if n.strip()))
    for group in groups:
        if not _LOG_GROUP_NAME.match(group):
            raise ValueError(f"{LOG_GROUPS_CONTEXT}: {group!r} is not a CloudWatch Logs group name")
    return groups


def _data_api(value: Any) -> DataApiDatabase | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"resourceArn", "secretArn", "database"}:
        raise ValueError(f"{DATA_API_CONTEXT} must be an object with exactly resourceArn, secretArn and database")
    target = DataApiDatabase(str(value["resourceArn"]), str(value["secretArn"]), str(value["database"]))
    if not _CLUSTER_ARN.match(target.resource_arn):
        raise ValueError(f"{DATA_API_CONTEXT}: resourceArn must be an Aurora cluster ARN (arn:aws:rds:...:cluster:...)")
    if not _SECRET_ARN.match(target.secret_arn):
        raise ValueError(f"{DATA_API_CONTEXT}: secretArn must be a Secrets Manager secret ARN")
    if not _DATABASE.match(target.database):
        raise ValueError(f"{DATA_API_CONTEXT}: database must be a database name")
    return target
