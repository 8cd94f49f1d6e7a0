"""The jobs function and one EventBridge Scheduler entry per registered job.

A schedule whose invocation fails (the function throttled or unavailable) is retried, and one that
still fails lands in an SQS dead-letter queue the operations baseline alarms on.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, Stack, Validations
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from flowledger.jobs import JOBS, Job
from infra.constructs.functions import FunctionDefaults, python_function
from infra.constructs.stage import StagePolicy

RETRY_ATTEMPTS = 3
MAX_EVENT_AGE = Duration.hours(1)
DEAD_LETTER_RETENTION = Duration.days(14)  # SQS's longest: time to read why a slot failed


def max_event_age(job: Job) -> Duration:
    """Retry for an hour, or until the job's next slot (which runs it again anyway), at least a minute."""
    seconds = min(int(MAX_EVENT_AGE.to_seconds()), job.interval_seconds)
    return Duration.seconds(max(seconds, 60))


class Jobs(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, prefix: str, defaults: FunctionDefaults, stage: StagePolicy
    ) -> None:
        super().__init__(scope, construct_id)
        self.function = python_function(
            self,
            "Function",
            name="jobs",
            defaults=defaults,
            description="Runs the scheduled jobs; the event names the job",
            timeout=Duration.minutes(5),
        )
        self.dead_letters = sqs.Queue(
            self,
            "DeadLetters",
            queue_name=f"{prefix}-schedule-dead-letters",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DEAD_LETTER_RETENTION,
            removal_policy=stage.removal,
        )
        Validations.of(self.dead_letters).acknowledge(
            Acknowledgment(id="AwsSolutions-SQS3", reason="This queue is the schedules' dead-letter queue itself.")
        )
        self.schedules = [
            scheduler.Schedule(
                self,
                f"Schedule-{job.name}",
                schedule_name=f"{prefix}-{job.name}",
                description=job.description,
                schedule=scheduler.ScheduleExpression.expression(job.schedule),
                # The scheduler invokes asynchronously: these retries cover a throttled or unavailable
                # function, not a job that fails (the function's own alarm covers that). Jobs are idempotent.
                target=targets.LambdaInvoke(
                    self.function,
                    retry_attempts=RETRY_ATTEMPTS,
                    max_event_age=max_event_age(job),
                    dead_letter_queue=self.dead_letters,
                    input=scheduler.ScheduleTargetInput.from_object({"job": job.name}),
                ),
            )
            for job in JOBS
        ]
        function_id = Stack.of(self).get_logical_id(self.function.node.default_child)  # type: ignore[arg-type]
        Validations.of(Stack.of(self)).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::<{function_id}.Arn>:*]",
                reason="The scheduler's role may invoke the jobs function and its versions; nothing else.",
            )
        )
