"""The ticket issue's retries under endless contention: bounded in count and total wait, jittered, no last pause."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from flowledger.errors import BacklogContention
from flowledger.research.backlog import TICKET_ATTEMPTS, TICKET_MAX_WAIT_SECONDS, Backlog
from flowledger.research.synthetic import enqueue_synthetic
from flowledger.services import Services

ENDPOINT = "https://dynamodb.us-east-1.amazonaws.com"


class CounterAlwaysTaken:
    """Another enqueue took the next ticket every time: the counter's condition (item 1) fails."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        self.calls += 1
        count = len(json.loads(params["body"])["TransactItems"])
        reasons = [{"Code": "ConditionalCheckFailed" if i == 1 else "None"} for i in range(count)]
        error = {
            "Error": {"Code": "TransactionCanceledException", "Message": "injected"},
            "CancellationReasons": reasons,
        }
        return AWSResponse(ENDPOINT, 400, {}, None), error


def test_a_contended_ticket_gives_up_after_bounded_jittered_pauses_and_none_after_the_last(
    services: Services,
) -> None:
    pauses: list[float] = []
    backlog = Backlog(services, sleep=pauses.append)  # records the pauses instead of sleeping
    contended = CounterAlwaysTaken()
    events = services.aws.dynamodb.meta.events
    events.register("before-call.dynamodb.TransactWriteItems", contended)
    try:
        with pytest.raises(BacklogContention):
            enqueue_synthetic(backlog, 1, "contended")
    finally:
        events.unregister("before-call.dynamodb.TransactWriteItems", contended)
    assert contended.calls == TICKET_ATTEMPTS
    assert len(pauses) == TICKET_ATTEMPTS - 1  # between attempts only
    assert sum(pauses) <= TICKET_MAX_WAIT_SECONDS < 2.0
    assert len(set(pauses)) == len(pauses) and all(p >= 0 for p in pauses)  # jittered
    assert backlog.get(next(iter(enqueue_synthetic(backlog, 1, "contended")))) is not None  # and it works after
