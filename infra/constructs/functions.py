"""The one helper every Flowledger Lambda function is made with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
LOG_RETENTION = logs.RetentionDays.THREE_MONTHS
_EXCLUDE = ["**/__pycache__", "**/*.pyc", "*.egg-info"]


@dataclass(frozen=True)
class FunctionDefaults:
    """What every function shares: the two layers and the base environment."""

    layers: list[lambda_.ILayerVersion]
    environment: dict[str, str] = field(default_factory=dict)


def core_layer_code() -> lambda_.Code:
    return lambda_.Code.from_asset(str(ROOT / "layers" / "core"), exclude=_EXCLUDE)


def python_function(
    scope: Construct,
    construct_id: str,
    *,
    name: str,
    defaults: FunctionDefaults,
    description: str,
    timeout: Duration | None = None,
    memory_size: int = 512,
    environment: dict[str, str] | None = None,
    handler: str = "handler.handler",
    extra_layers: list[lambda_.ILayerVersion] | None = None,
) -> lambda_.Function:
    """A function from ``functions/<name>/handler.py`` with its own role, log group and tracing."""
    log_group = logs.LogGroup(
        scope, f"{construct_id}Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.RETAIN
    )
    function = lambda_.Function(
        scope,
        construct_id,
        description=description,
        runtime=RUNTIME,
        architecture=ARCHITECTURE,
        handler=handler,
        code=lambda_.Code.from_asset(str(ROOT / "functions" / name), exclude=_EXCLUDE),
        layers=[*defaults.layers, *(extra_layers or [])],
        environment={**defaults.environment, "POWERTOOLS_SERVICE_NAME": name, **(environment or {})},
        timeout=timeout or Duration.seconds(15),
        memory_size=memory_size,
        tracing=lambda_.Tracing.ACTIVE,
        logging_format=lambda_.LoggingFormat.JSON,
        log_group=log_group,
    )
    Validations.of(function).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM5[Resource::*]",
            reason="Active tracing: xray:PutTraceSegments and PutTelemetryRecords support no resource-level scoping.",
        )
    )
    return function
