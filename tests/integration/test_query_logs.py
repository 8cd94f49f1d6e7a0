"""``query_logs`` against moto's CloudWatch Logs: bounded requests, literal terms, bounded results, honest failures.

Requests are watched on the client's own event hooks: ``before-send`` fires once per HTTP attempt,
so a refused request provably sent nothing, and a scripted response there stands in for a service
that throttles or times out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import jsonschema
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ReadTimeoutError

from flowledger.diagnosis.tool_logs import MAX_MESSAGE_CHARS, MAX_PAGES, QueryLogsTool
from flowledger.diagnosis.tools import MAX_OBSERVATION_CHARS, ToolOutcome, ToolResult
from flowledger.services import Services

GROUP = "/app/payments"
OTHER_GROUP = "/app/secrets"
# moto, like CloudWatch Logs, accepts only events of the last 14 days: the tests live in the real present.
NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def logs(moto_services: Services) -> Any:
    """The real client ``AwsClients`` builds, on moto; both groups exist."""
    client = moto_services.aws.logs
    for group in (GROUP, OTHER_GROUP):
        client.create_log_group(logGroupName=group)
    return client


@pytest.fixture
def sent(logs: Any) -> list[dict[str, Any]]:
    """The parameters of every FilterLogEvents call the client makes."""
    requests: list[dict[str, Any]] = []
    logs.meta.events.register(
        "before-parameter-build.logs.FilterLogEvents", lambda params, **_: requests.append(dict(params))
    )
    return requests


@pytest.fixture
def attempts(logs: Any) -> list[str]:
    """Every HTTP request the client sends to CloudWatch Logs, whatever the operation (tests clear it
    after their own setup writes)."""
    seen: list[str] = []
    logs.meta.events.register("before-send.logs", lambda request, **_: seen.append(request.url))
    return seen


def put(logs: Any, stream: str, events: list[tuple[timedelta, str]], group: str = GROUP) -> None:
    """Write ``(age, message)`` events, ``age`` before NOW, into ``group/stream``."""
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    ordered = sorted(events, key=lambda e: -e[0])
    logs.put_log_events(
        logGroupName=group,
        logStreamName=stream,
        logEvents=[{"timestamp": int((NOW - age).timestamp() * 1000), "message": m} for age, m in ordered],
    )


def tool(logs: Any, allowed: tuple[str, ...] = (GROUP,)) -> QueryLogsTool:
    return QueryLogsTool(logs, allowed, lambda: NOW)


def ask(logs: Any, timeout: float = 10.0, **arguments: Any) -> ToolResult:
    request: dict[str, Any] = {
        "log_group": GROUP,
        "start": _iso(NOW - timedelta(hours=2)),
        "end": None,
        "terms": [],
        "limit": None,
    }
    return tool(logs).run({**request, **arguments}, timeout_seconds=timeout)


def events_of(result: ToolResult) -> list[dict[str, str]]:
    events: list[dict[str, str]] = json.loads(result.text)["events"]
    return events


def _iso(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_events_holding_every_term_come_back_oldest_first_across_streams(logs: Any) -> None:
    put(
        logs,
        "api-1",
        [
            (timedelta(minutes=40), "ERROR DB_POOL_EXHAUSTED in payments-api order=ord_7"),
            (timedelta(minutes=30), "ERROR DB_POOL_EXHAUSTED in ledger-api"),  # one term only
            (timedelta(minutes=20), "error db_pool_exhausted in payments-api"),  # terms match case-sensitively
            (timedelta(minutes=15), "ERROR DB_POOL_EXHAUSTED in Payments-API"),
        ],
    )
    put(
        logs,
        "api-2",
        [(timedelta(minutes=50), "ERROR DB_POOL_EXHAUSTED in payments-api"), (timedelta(minutes=10), "INFO ok")],
    )
    result = ask(logs, terms=["DB_POOL_EXHAUSTED", "payments-api"])
    assert (result.outcome, result.rows, result.truncated) == (ToolOutcome.OK, 2, False)
    assert json.loads(result.text) == {
        "log_group": GROUP,
        "events": [
            {
                "timestamp": _iso(NOW - timedelta(minutes=50)),
                "stream": "api-2",
                "message": "ERROR DB_POOL_EXHAUSTED in payments-api",
            },
            {
                "timestamp": _iso(NOW - timedelta(minutes=40)),
                "stream": "api-1",
                "message": "ERROR DB_POOL_EXHAUSTED in payments-api order=ord_7",
            },
        ],
        "truncated": False,
    }


def test_only_the_window_is_searched(logs: Any) -> None:
    put(
        logs,
        "api-1",
        [
            (timedelta(hours=3), "ERROR early"),
            (timedelta(minutes=90), "ERROR inside"),
            (timedelta(minutes=5), "ERROR late"),
        ],
    )
    result = ask(logs, start=_iso(NOW - timedelta(hours=2)), end=_iso(NOW - timedelta(hours=1)), terms=["ERROR"])
    assert [e["message"] for e in events_of(result)] == ["ERROR inside"]


def test_no_match_is_an_honest_empty_answer(logs: Any) -> None:
    put(logs, "api-1", [(timedelta(minutes=5), "INFO all good")])
    result = ask(logs, terms=["DB_POOL_EXHAUSTED"])
    assert (result.outcome, result.rows, result.safe) == (ToolOutcome.EMPTY, 0, True)
    assert json.loads(result.text) == {"log_group": GROUP, "events": [], "truncated": False}


def test_a_group_outside_the_allow_list_is_refused_and_never_queried(logs: Any, attempts: list[str]) -> None:
    put(logs, "vault", [(timedelta(minutes=5), "ERROR secret token=abc")], group=OTHER_GROUP)
    attempts.clear()
    result = ask(logs, log_group=OTHER_GROUP, terms=["ERROR"])
    assert result.outcome is ToolOutcome.REFUSED and not result.safe
    assert OTHER_GROUP in result.text and f"allowed: {GROUP}" in result.text
    assert "token=abc" not in result.text
    assert attempts == []


def test_a_window_over_24_hours_is_refused_and_never_queried(logs: Any, attempts: list[str]) -> None:
    start = NOW - timedelta(hours=25)
    result = ask(logs, start=_iso(start), end=_iso(NOW))
    assert result.outcome is ToolOutcome.REFUSED
    assert "25.0 hours" in result.text and "at most 24 hours" in result.text
    assert attempts == []


def test_exactly_24_hours_is_searched(logs: Any, attempts: list[str]) -> None:
    put(logs, "api-1", [(timedelta(hours=23), "ERROR a day ago")])
    attempts.clear()
    result = ask(logs, start=_iso(NOW - timedelta(hours=24)), end=_iso(NOW))
    assert result.outcome is ToolOutcome.OK and len(attempts) == 1


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"end": _iso(NOW + timedelta(hours=1))}, "is in the future"),
        ({"start": _iso(NOW - timedelta(hours=1)), "end": _iso(NOW - timedelta(hours=2))}, "is not before end"),
        ({"start": "last night"}, "is not an ISO-8601 time"),
        ({"start": None}, "must be an ISO-8601 UTC time"),
        ({"terms": ["a", "b", "c", "d", "e", "f"]}, "at most 5"),
        ({"terms": ["x" * 101]}, "at most 100"),
        ({"terms": ["ERROR\nWARN"]}, "control character"),
        ({"terms": "ERROR"}, "list of strings"),
        ({"limit": 0}, "from 1 to 200"),
        ({"limit": 201}, "from 1 to 200"),
        ({"limit": True}, "from 1 to 200"),
        ({"log_group": None}, "not allowed"),
    ],
)
def test_requests_outside_the_bounds_are_refused_with_a_reason_and_never_sent(
    logs: Any, attempts: list[str], arguments: dict[str, Any], reason: str
) -> None:
    result = ask(logs, **arguments)
    assert result.outcome is ToolOutcome.REFUSED
    assert reason in result.text
    assert attempts == []


def test_a_little_clock_skew_is_allowed(logs: Any) -> None:
    put(logs, "api-1", [(timedelta(minutes=1), "ERROR just now")])
    result = ask(logs, end=_iso(NOW + timedelta(minutes=2)))
    assert result.outcome is ToolOutcome.OK


def test_with_no_allowed_group_every_call_is_refused_and_the_schema_stays_valid(logs: Any, attempts: list[str]) -> None:
    empty = tool(logs, allowed=())
    result = empty.run(
        {"log_group": GROUP, "start": _iso(NOW - timedelta(hours=1)), "end": None, "terms": [], "limit": 10},
        timeout_seconds=5,
    )
    assert result.outcome is ToolOutcome.REFUSED and "no log group" in result.text
    assert attempts == []
    jsonschema.Draft202012Validator.check_schema(empty.spec.parameters)


def test_the_schema_is_strict_and_offers_only_the_allow_list(logs: Any) -> None:
    spec = tool(logs, allowed=(GROUP, "/app/checkout")).spec
    schema = spec.parameters
    assert spec.name == "query_logs"
    jsonschema.Draft202012Validator.check_schema(schema)
    # OpenAI strict mode: every property required, nothing else allowed.
    assert schema["additionalProperties"] is False
    assert sorted(schema["required"]) == sorted(schema["properties"])
    assert schema["properties"]["log_group"]["enum"] == [GROUP, "/app/checkout"]
    validator = jsonschema.Draft202012Validator(schema)
    ok = {"log_group": GROUP, "start": "2026-11-30T22:00:00Z", "end": None, "terms": ["ERROR"], "limit": None}
    assert validator.is_valid(ok)
    assert not validator.is_valid({**ok, "log_group": OTHER_GROUP})
    assert not validator.is_valid({**ok, "limit": 201})
    assert not validator.is_valid({**ok, "fields": ["@message"]})
    assert not validator.is_valid({k: v for k, v in ok.items() if k != "end"})


def test_the_limit_bounds_the_rows_and_says_more_matched(logs: Any, sent: list[dict[str, Any]]) -> None:
    put(logs, "api-1", [(timedelta(minutes=60 - i), f"ERROR number {i:02d}") for i in range(30)])
    five = ask(logs, terms=["ERROR"], limit=5)
    assert (five.rows, five.truncated) == (5, True)
    assert len(sent) == 1  # one more than the limit, asked for at once, tells there is more
    assert [e["message"] for e in events_of(five)] == [f"ERROR number {i:02d}" for i in range(5)]
    assert json.loads(five.text)["truncated"] is True
    every = ask(logs, terms=["ERROR"], limit=30)  # exactly as many as there are
    assert (every.rows, every.truncated) == (30, False)


def test_an_observation_stays_within_its_character_bound_in_whole_events(logs: Any) -> None:
    put(logs, "api-1", [(timedelta(minutes=100 - i / 2), f"ERROR {i:03d} " + "x" * 1000) for i in range(200)])
    result = ask(logs, terms=["ERROR"], limit=200)
    assert len(result.text) <= MAX_OBSERVATION_CHARS
    document = json.loads(result.text)  # cut between events, never inside the JSON
    assert document["truncated"] is True and result.truncated
    assert result.rows == len(document["events"]) > 1
    assert all(len(e["message"]) <= MAX_MESSAGE_CHARS for e in document["events"])
    assert [e["message"][:9] for e in document["events"]] == [f"ERROR {i:03d}" for i in range(result.rows)]


@pytest.mark.parametrize(
    ("term", "sent_pattern"),
    [
        ("?ERROR ?WARN", '"?ERROR ?WARN"'),  # would be "ERROR or WARN" unquoted
        ("-ERROR", '"-ERROR"'),  # would exclude ERROR
        ("{ $.level = * }", '"{ $.level = * }"'),  # would be a JSON selector
        ("%ERR.*%", '"%ERR.*%"'),  # would be a regex
        ('x" ?"WARN', None),  # a quote is never sent: no escaping rule is relied on
        ("back\\slash", None),
    ],
)
def test_pattern_syntax_in_a_term_is_matched_literally(
    logs: Any, sent: list[dict[str, Any]], term: str, sent_pattern: str | None
) -> None:
    put(
        logs,
        "api-1",
        [
            (timedelta(minutes=30), "ERROR plain error"),
            (timedelta(minutes=20), "WARN plain warning"),
            (timedelta(minutes=10), f"INFO literal {term} here"),
        ],
    )
    result = ask(logs, terms=[term])
    assert [e["message"] for e in events_of(result)] == [f"INFO literal {term} here"]
    assert [request.get("filterPattern") for request in sent] == [sent_pattern]


def test_results_follow_next_tokens_until_the_limit(logs: Any, sent: list[dict[str, Any]]) -> None:
    # The service matches one term; the others are checked here, so pages hold events that do not qualify.
    events = [
        (timedelta(minutes=100 - i), f"payment-failure {'order=ord_1 ' if i % 4 == 3 else ''}#{i}") for i in range(40)
    ]
    put(logs, "api-1", events)
    result = ask(logs, terms=["payment-failure", "order=ord_1"], limit=5)
    assert [e["message"] for e in events_of(result)] == [
        f"payment-failure order=ord_1 #{i}" for i in (3, 7, 11, 15, 19)
    ]
    assert result.truncated  # #23 and later matched too
    assert len(sent) > 1 and all(request["nextToken"] for request in sent[1:])


def test_pages_are_bounded_and_a_search_cut_short_says_so(logs: Any, sent: list[dict[str, Any]]) -> None:
    put(logs, "api-1", [(timedelta(minutes=100 - i), f"payment-failure #{i}") for i in range(80)])
    result = ask(logs, terms=["payment-failure", "never-there"], limit=1)
    assert len(sent) == MAX_PAGES
    assert (result.outcome, result.truncated) == (ToolOutcome.EMPTY, True)
    assert json.loads(result.text)["truncated"] is True


def test_no_page_is_fetched_past_the_deadline(logs: Any, sent: list[dict[str, Any]]) -> None:
    put(logs, "api-1", [(timedelta(minutes=100 - i), f"payment-failure #{i}") for i in range(40)])
    result = ask(logs, timeout=0.0, terms=["payment-failure", "never-there"], limit=1)
    assert len(sent) == 1 and result.truncated


# Failures: a client that does not retry, so each scripted failure is one attempt.


@pytest.fixture
def bare_logs(moto_services: Services) -> Iterator[Any]:
    client = boto3.client(
        "logs",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"total_max_attempts": 1}),
    )
    client.create_log_group(logGroupName=GROUP)
    yield client


def _answer_with(client: Any, respond: Callable[[Any], AWSResponse | None]) -> None:
    # First in line, so the scripted answer wins over moto's.
    client.meta.events.register_first("before-send.logs.FilterLogEvents", lambda request, **_: respond(request))


def _error(code: str, status: int = 400) -> AWSResponse:
    body = json.dumps({"__type": code, "message": "Rate exceeded"}).encode()

    class Raw:
        def stream(self, **_: Any) -> Iterator[bytes]:
            yield body

    return AWSResponse("https://logs.us-east-1.amazonaws.com/", status, {"x-amzn-requestid": "r1"}, Raw())


def _run(client: Any) -> ToolResult:
    return QueryLogsTool(client, (GROUP,), lambda: NOW).run(
        {"log_group": GROUP, "start": _iso(NOW - timedelta(hours=1)), "end": None, "terms": ["ERROR"], "limit": 5},
        timeout_seconds=5,
    )


def test_throttling_fails_and_says_so(bare_logs: Any) -> None:
    _answer_with(bare_logs, lambda request: _error("ThrottlingException"))
    result = _run(bare_logs)
    assert result.outcome is ToolOutcome.FAILED and not result.safe
    assert "throttling" in result.text and "ThrottlingException" in result.text
    assert "Traceback" not in result.text and "\n" not in result.text


def test_a_timeout_fails_and_says_so(bare_logs: Any) -> None:
    def time_out(request: Any) -> None:
        raise ReadTimeoutError(endpoint_url=request.url)

    _answer_with(bare_logs, time_out)
    result = _run(bare_logs)
    assert (result.outcome, result.text) == (ToolOutcome.FAILED, "CloudWatch Logs did not answer in time (timeout)")


def test_a_missing_log_group_fails_naming_it(bare_logs: Any) -> None:
    result = QueryLogsTool(bare_logs, ("/app/gone",), lambda: NOW).run(
        {"log_group": "/app/gone", "start": _iso(NOW - timedelta(hours=1)), "end": None, "terms": [], "limit": 5},
        timeout_seconds=5,
    )
    assert result.outcome is ToolOutcome.FAILED
    assert result.text == "log group /app/gone does not exist in CloudWatch Logs (ResourceNotFoundException)"


def test_a_failure_after_the_first_page_keeps_what_was_found_and_says_more_may_match(bare_logs: Any) -> None:
    put(
        bare_logs,
        "api-1",
        [(timedelta(minutes=50 - i), f"ERROR #{i}{' order' if i % 5 == 0 else ''}") for i in range(30)],
    )
    # The first page is moto's; every later one (it carries a nextToken) is throttled.
    _answer_with(bare_logs, lambda request: _error("ThrottlingException") if b"nextToken" in request.body else None)
    result = QueryLogsTool(bare_logs, (GROUP,), lambda: NOW).run(
        {
            "log_group": GROUP,
            "start": _iso(NOW - timedelta(hours=1)),
            "end": None,
            "terms": ["ERROR", "order"],
            "limit": 5,
        },
        timeout_seconds=5,
    )
    assert (result.outcome, result.truncated) == (ToolOutcome.OK, True)
    assert [e["message"] for e in events_of(result)] == ["ERROR #0 order", "ERROR #5 order"]
