"""The jobs function and one EventBridge Scheduler entry per registered job.

A schedule whose invocation fails (the function throttled or unavailable) is retried, and one that
still fails lands in an SQS dead-letter queue the operations baseline alarms on. The scheduler
invokes asynchronously, so a job that raises is Lambda's to retry: one that still fails (or waited
too long to run) is sent to a second queue, the job-failures queue, the baseline alarms on too.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, Stack, Validations
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from flowledger.jobs import Job, jobs_with_checkpoints_every
from infra.constructs.functions import FunctionDefaults, python_function
from infra.constructs.stage import StagePolicy

RETRY_ATTEMPTS = 3
MAX_EVENT_AGE = Duration.hours(1)
DEAD_LETTER_RETENTION = Duration.days(14)  # SQS's longest: time to read why a slot failed
# Lambda's own retries of a job that raised. Jobs are idempotent, so a retry is safe; one retry (a
# minute later) gets past a passing fault (a throttled table, a model timeout, a cold dependency),
# which matters for the hourly and daily jobs whose next slot is far. A job failing twice in a row
# most likely fails for a reason a third run will not change, and a second retry would hold the
# failure back from the queue (and its alarm) for a few more minutes and up to five of run time.
JOB_RETRY_ATTEMPTS = 1
# How long an event may wait for the function (throttled, or between retries) before it is given up
# and sent to the job-failures queue: as long as the schedules retry their invocation.
JOB_MAX_EVENT_AGE = MAX_EVENT_AGE


def max_event_age(job: Job) -> Duration:
    """Retry for an hour, or until the job's next slot (which runs it again anyway), at least a minute."""
    seconds = min(int(MAX_EVENT_AGE.to_seconds()), job.interval_seconds)
    return Duration.seconds(max(seconds, 60))


class Jobs(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        defaults: FunctionDefaults,
        stage: StagePolicy,
        checkpoint_minutes: int = 5,
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
        self.dead_letters = _dead_letter_queue(
            self, "DeadLetters", f"{prefix}-schedule-dead-letters", stage, of="the schedules' dead-letter queue"
        )
        self.failures = self._failures(prefix, stage)
        self.schedules = [
            scheduler.Schedule(
                self,
                f"Schedule-{job.name}",
                schedule_name=f"{prefix}-{job.name}",
                description=job.description,
                schedule=scheduler.ScheduleExpression.expression(job.schedule),
                # The scheduler invokes asynchronously: these retries cover a throttled or unavailable
                # function, not a job that fails (Lambda retries that into the job-failures queue, and
                # the function's errors alarm too). Jobs are idempotent.
                target=targets.LambdaInvoke(
                    self.function,
                    retry_attempts=RETRY_ATTEMPTS,
                    max_event_age=max_event_age(job),
                    dead_letter_queue=self.dead_letters,
                    input=scheduler.ScheduleTargetInput.from_object({"job": job.name}),
                ),
            )
            for job in jobs_with_checkpoints_every(checkpoint_minutes)
        ]
        function_id = Stack.of(self).get_logical_id(self.function.node.default_child)  # type: ignore[arg-type]
        Validations.of(Stack.of(self)).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::<{function_id}.Arn>:*]",
                reason="The scheduler's role may invoke the jobs function and its versions; nothing else.",
            )
        )

    def _failures(self, prefix: str, stage: StagePolicy) -> sqs.Queue:
        """The on-failure destination of the function's asynchronous invocations, and their retries.

        A record there carries the event (the job's name) and the error the last run raised.
        """
        queue = _dead_letter_queue(
            self, "Failures", f"{prefix}-job-failures", stage, of="the jobs function's on-failure (dead-letter) queue"
        )
        self.function.configure_async_invoke(
            on_failure=destinations.SqsDestination(queue),
            retry_attempts=JOB_RETRY_ATTEMPTS,
            max_event_age=JOB_MAX_EVENT_AGE,
        )
        return queue


def _dead_letter_queue(scope: Construct, construct_id: str, name: str, stage: StagePolicy, *, of: str) -> sqs.Queue:
    """A queue that failures land in: encrypted, HTTPS only, kept as long as SQS keeps a message."""
    queue = sqs.Queue(
        scope,
        construct_id,
        queue_name=name,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=DEAD_LETTER_RETENTION,
        removal_policy=stage.removal,
    )
    Validations.of(queue).acknowledge(Acknowledgment(id="AwsSolutions-SQS3", reason=f"This queue is {of} itself."))
    return queue
