"""The jobs function and one EventBridge Scheduler entry per registered job."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, Stack, Validations
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from constructs import Construct

from flowledger.jobs import JOBS
from infra.constructs.functions import FunctionDefaults, python_function


class Jobs(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, prefix: str, defaults: FunctionDefaults) -> None:
        super().__init__(scope, construct_id)
        self.function = python_function(
            self,
            "Function",
            name="jobs",
            defaults=defaults,
            description="Runs the scheduled jobs; the event names the job",
            timeout=Duration.minutes(5),
        )
        for job in JOBS:
            scheduler.Schedule(
                self,
                f"Schedule-{job.name}",
                schedule_name=f"{prefix}-{job.name}",
                description=job.description,
                schedule=scheduler.ScheduleExpression.expression(job.schedule),
                # No retries: the next slot runs the job again, and jobs are idempotent.
                target=targets.LambdaInvoke(
                    self.function, retry_attempts=0, input=scheduler.ScheduleTargetInput.from_object({"job": job.name})
                ),
            )
        function_id = Stack.of(self).get_logical_id(self.function.node.default_child)  # type: ignore[arg-type]
        Validations.of(Stack.of(self)).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::<{function_id}.Arn>:*]",
                reason="The scheduler's role may invoke the jobs function and its versions; nothing else.",
            )
        )
