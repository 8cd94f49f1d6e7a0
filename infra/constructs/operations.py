"""The operations baseline: alarms on what breaks a deployment, all to one SNS topic, and a dashboard.

The topic is ``flowledger:alarmTopicArn`` when the context names one (an existing topic, imported;
if it is encrypted, its key must let CloudWatch use it); otherwise the stack makes one, encrypted
with a key of its own, and outputs its ARN to subscribe to. Alarms:

- every function: ``Errors`` and ``Throttles`` (the chat function's errors cover the streaming routes);
- the REST API: ``5XXError`` and p99 ``Latency``;
- every table: ``ReadThrottleEvents`` + ``WriteThrottleEvents`` (per table, every operation);
- the schedules: messages in their dead-letter queue and the scheduler's ``TargetErrorCount``;
- the jobs: messages in the job-failures queue (a job that raised after Lambda's retries, or waited
  too long to run);
- the research loop: ``research.loop_health.critical`` (EMF, emitted by the stale-sweep job);
- the ledger: ``ledger.checkpoint.refused`` and ``ledger.checkpoint.unwitnessed`` (EMF, the checkpoint job).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct, Node

from flowledger.ledger.audit import CHECKPOINT_REFUSED_METRIC, CHECKPOINT_UNWITNESSED_METRIC
from flowledger.metrics import NAMESPACE
from flowledger.otlp import METRIC_SERVICE as OTLP_METRIC_SERVICE
from flowledger.otlp import REFUSED_METRIC as OTLP_REFUSED_METRIC
from flowledger.research.loop import LOOP_HEALTH_CRITICAL_METRIC
from flowledger.subjects.retention import FAILED_METRIC as RETENTION_FAILED_METRIC
from infra.constructs.stage import StagePolicy

TOPIC_CONTEXT = "flowledger:alarmTopicArn"
_TOPIC_ARN = re.compile(r"^arn:aws[\w-]*:sns:[a-z0-9-]+:\d{12}:[\w-]{1,256}$")
PERIOD = Duration.minutes(5)
LATENCY_P99_MS = 10_000  # above any REST route's answer; the streaming chat route counts here too
JOBS_SERVICE = "jobs"  # the jobs function's POWERTOOLS_SERVICE_NAME: the dimension its EMF metrics carry


def topic_arn_from(node: Node) -> str | None:
    """The alarm topic from ``flowledger:alarmTopicArn``, or None (the stack makes one)."""
    value: Any = node.try_get_context(TOPIC_CONTEXT)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _TOPIC_ARN.match(value):
        raise ValueError(f"{TOPIC_CONTEXT} must be an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)")
    return value


@dataclass(frozen=True)
class Watched:
    """What the baseline watches, by a name that reads well in an alarm's description."""

    functions: dict[str, lambda_.IFunction]
    rest_api: apigw.RestApi
    tables: dict[str, dynamodb.Table]
    dead_letters: sqs.IQueue
    job_failures: sqs.IQueue


class Operations(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, prefix: str, stage: StagePolicy, watched: Watched
    ) -> None:
        super().__init__(scope, construct_id)
        self._prefix = prefix
        self.topic = self._topic(stage)
        self.alarms: list[cloudwatch.Alarm] = []
        rows: list[list[cloudwatch.IWidget]] = []

        for name, function in watched.functions.items():
            errors = function.metric_errors(period=PERIOD, statistic="Sum")
            throttles = function.metric_throttles(period=PERIOD, statistic="Sum")
            self._alarm(f"Function-{name}-Errors", errors, f"The {name} function raised errors.")
            self._alarm(f"Function-{name}-Throttles", throttles, f"The {name} function was throttled.")
        rows.append(
            [
                _graph("Function errors", [f.metric_errors(period=PERIOD) for f in watched.functions.values()]),
                _graph("Function throttles", [f.metric_throttles(period=PERIOD) for f in watched.functions.values()]),
            ]
        )

        server_errors = watched.rest_api.metric_server_error(period=PERIOD, statistic="Sum")
        latency = watched.rest_api.metric_latency(period=PERIOD, statistic="p99")
        self._alarm("Api-5XXError", server_errors, "The REST API answered 5xx.")
        self._alarm(
            "Api-LatencyP99",
            latency,
            f"The REST API's p99 latency stayed above {LATENCY_P99_MS} ms for 15 minutes.",
            threshold=LATENCY_P99_MS,
            periods=3,
        )
        rows.append([_graph("API 5XXError", [server_errors]), _graph("API p99 latency (ms)", [latency])])

        # An OTLP exporter logs a partial success and moves on: the operator must hear of refused spans here.
        refused_spans = cloudwatch.Metric(
            namespace=NAMESPACE,
            metric_name=OTLP_REFUSED_METRIC,
            dimensions_map={"service": OTLP_METRIC_SERVICE},
            period=PERIOD,
            statistic="Sum",
        )
        self._alarm(
            "Otlp-RefusedSpans",
            refused_spans,
            "The OTLP receiver refused spans (each refusal is named in the answer's partial_success and in the "
            "request's receipt, reasoning.otlp.received).",
        )
        rows.append([_graph("OTLP spans refused", [refused_spans], width=24)])

        throttled = []
        for index, (name, table) in enumerate(watched.tables.items()):
            metric = _table_throttles(table, name, index)
            throttled.append(metric)
            self._alarm(f"Table-{name}-Throttles", metric, f"DynamoDB throttled requests to the {name} table.")
        rows.append([_graph("DynamoDB throttle events", throttled, width=24)])

        dead = watched.dead_letters.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum")
        target_errors = cloudwatch.Metric(
            namespace="AWS/Scheduler",
            metric_name="TargetErrorCount",
            dimensions_map={"ScheduleGroup": "default"},
            period=PERIOD,
            statistic="Sum",
        )
        self._alarm("Schedules-DeadLetters", dead, "A schedule's invocation failed after its retries (see its DLQ).")
        self._alarm("Schedules-TargetErrors", target_errors, "The scheduler could not invoke the jobs function.")
        failed_jobs = watched.job_failures.metric_approximate_number_of_messages_visible(
            period=PERIOD, statistic="Maximum"
        )
        self._alarm("Jobs-Failures", failed_jobs, "A job failed after its retries or expired unrun (see its queue).")

        loop_critical = _jobs_flag(LOOP_HEALTH_CRITICAL_METRIC)
        self._alarm("Research-LoopHealthCritical", loop_critical, "The research loop's health verdict is critical.")
        refused = _jobs_flag(CHECKPOINT_REFUSED_METRIC)
        self._alarm(
            "Ledger-CheckpointRefused",
            refused,
            "The checkpoint job refused to sign: the chain heads do not extend the last checkpoint.",
        )
        unwitnessed = _jobs_flag(CHECKPOINT_UNWITNESSED_METRIC)
        self._alarm(
            "Ledger-CheckpointUnwitnessed",
            unwitnessed,
            "A checkpoint has fewer witness cosignatures than the quorum (the job's result names the witnesses).",
        )
        retention_failed = _jobs_flag(RETENTION_FAILED_METRIC)
        self._alarm(
            "Subjects-RetentionFailures",
            retention_failed,
            "The retention job could not erase an item past its retention (it tries again the next day).",
        )
        rows.append(
            [
                _graph("Schedule dead letters", [dead]),
                _graph("Scheduler target errors", [target_errors]),
                _graph("Job failures", [failed_jobs]),
                _graph("Research loop critical (1 = critical)", [loop_critical]),
                _graph("Checkpoints refused (1 = refused)", [refused]),
                _graph("Checkpoints unwitnessed (1 = under quorum)", [unwitnessed]),
                _graph("Retention failures (items left for the next day)", [retention_failed]),
            ]
        )

        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"{prefix}-operations", widgets=rows)

    def _topic(self, stage: StagePolicy) -> sns.ITopic:
        arn = topic_arn_from(self.node)
        if arn is not None:
            return sns.Topic.from_topic_arn(self, "AlarmTopic", arn)
        key = kms.Key(
            self,
            "AlarmTopicKey",
            enable_key_rotation=True,
            description="Flowledger alarm notifications",
            removal_policy=stage.removal,
            pending_window=stage.key_pending_window,
        )
        # CloudWatch publishes alarm notifications itself, so it must be able to use the topic's key.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            )
        )
        topic = sns.Topic(self, "AlarmTopic", topic_name=f"{self._prefix}-alarms", master_key=key, enforce_ssl=True)
        CfnOutput(Stack.of(self), "AlarmTopicArn", value=topic.topic_arn, description="Subscribe to get the alarms")
        return topic

    def _alarm(
        self, name: str, metric: cloudwatch.IMetric, description: str, *, threshold: float = 1, periods: int = 1
    ) -> None:
        alarm = cloudwatch.Alarm(
            self,
            name,
            alarm_name=f"{self._prefix}-{name}",
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            # No data is no traffic (or no run yet), not a failure.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(actions.SnsAction(self.topic))
        alarm.add_ok_action(actions.SnsAction(self.topic))
        self.alarms.append(alarm)


def _table_throttles(table: dynamodb.Table, name: str, index: int) -> cloudwatch.IMetric:
    """Read plus write throttle events of one table (every operation; its indexes report their own).

    The ids are numbered: the dashboard graphs every table's expression together, and ids must differ.
    """

    def events(metric_name: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace="AWS/DynamoDB",
            metric_name=metric_name,
            dimensions_map={"TableName": table.table_name},
            period=PERIOD,
            statistic="Sum",
        )

    return cloudwatch.MathExpression(
        expression=f"FILL(reads{index}, 0) + FILL(writes{index}, 0)",
        using_metrics={f"reads{index}": events("ReadThrottleEvents"), f"writes{index}": events("WriteThrottleEvents")},
        label=name,
        period=PERIOD,
    )


def _jobs_flag(name: str) -> cloudwatch.Metric:
    """A 0-or-1 metric the jobs function emits (``Metrics.emit``), at its worst in each period."""
    dimensions = {"service": JOBS_SERVICE}
    return cloudwatch.Metric(
        namespace=NAMESPACE, metric_name=name, dimensions_map=dimensions, period=PERIOD, statistic="Maximum"
    )


def _graph(title: str, metrics: list[Any], width: int = 12) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=metrics, width=width)
