"""The one helper every Flowledger Lambda function is made with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Protocol

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

ROOT = Path(__file__).resolve().parents[2]
# The interpreter the tests and CI run (infra.deps_layer.LAMBDA_PYTHON); x86_64 so that the CI machine
# imports the very wheels that are deployed (scripts/check_assembly.py).
RUNTIME = lambda_.Runtime.PYTHON_3_11
ARCHITECTURE = lambda_.Architecture.X86_64
LOG_RETENTION = logs.RetentionDays.THREE_MONTHS
_EXCLUDE = ["**/__pycache__", "**/*.pyc", "*.egg-info"]


class LayerSource(Protocol):
    """Hands each function its own layers (``infra.constructs.layers.Layers``)."""

    def for_function(self, name: str) -> list[lambda_.ILayerVersion]: ...


@dataclass(frozen=True)
class FunctionDefaults:
    """What every function shares: its layer source, the base environment and how its logs are kept.

    ``log_key`` encrypts every function's log group (the stack passes the data key); ``log_removal``
    is the log groups' removal policy (RETAIN in prod, DESTROY in a trial stage);
    ``reserved_concurrency`` reserves concurrency for a function by its service name
    (``infra.constructs.concurrency``; a function not named reserves none).
    """

    layers: LayerSource
    environment: dict[str, str] = field(default_factory=dict)
    log_key: kms.IKey | None = None
    log_removal: RemovalPolicy = RemovalPolicy.RETAIN
    reserved_concurrency: Mapping[str, int] = field(default_factory=dict)


@cache
def function_names() -> frozenset[str]:
    """The name of every function there is: a function is made from ``functions/<name>/``."""
    return frozenset(p.name for p in (ROOT / "functions").iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


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
        scope,
        f"{construct_id}Logs",
        retention=LOG_RETENTION,
        removal_policy=defaults.log_removal,
        encryption_key=defaults.log_key,
    )
    environment = {**defaults.environment, "POWERTOOLS_SERVICE_NAME": name, **(environment or {})}
    service = environment["POWERTOOLS_SERVICE_NAME"]  # a function may report itself apart (chat-buffered)
    function = lambda_.Function(
        scope,
        construct_id,
        description=description,
        runtime=RUNTIME,
        architecture=ARCHITECTURE,
        handler=handler,
        code=lambda_.Code.from_asset(str(ROOT / "functions" / name), exclude=_EXCLUDE),
        layers=[*defaults.layers.for_function(name), *(extra_layers or [])],
        environment=environment,
        timeout=timeout or Duration.seconds(15),
        memory_size=memory_size,
        tracing=lambda_.Tracing.ACTIVE,
        logging_format=lambda_.LoggingFormat.JSON,
        log_group=log_group,
        reserved_concurrent_executions=defaults.reserved_concurrency.get(service),
    )
    Validations.of(function).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM5[Resource::*]",
            reason="Active tracing: xray:PutTraceSegments and PutTelemetryRecords support no resource-level scoping.",
        ),
        Acknowledgment(
            id="AwsSolutions-L1",
            reason="python3.11 is the interpreter every test and CI run on, and the only one whose wheels the "
            "locked index serves; the deployed interpreter is the tested one.",
        ),
    )
    return function
