"""The operations baseline: alarms on every function, the API, every table, the schedules and the research
loop, all to one topic (made and output, or given by context); a dashboard of the same metrics; schedules
that retry into a dead-letter queue; a throttled API stage; CORS for the console origin only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App

from flowledger.api.chat_app import STREAMING_ROUTES
from flowledger.jobs import JOBS
from flowledger.metrics import NAMESPACE
from flowledger.research.loop import LOOP_HEALTH_CRITICAL_METRIC
from infra.constructs.api import CORS_CONTEXT, HEAVY_ROUTES, THROTTLE_CONTEXT, Throttle, cors_origins_from
from infra.constructs.jobs import JOB_RETRY_ATTEMPTS, RETRY_ATTEMPTS
from infra.constructs.operations import TOPIC_CONTEXT, topic_arn_from
from tests.infra.test_stages import synth_with
from tests.infra.test_template import _path_of, of_type

GIVEN_TOPIC = "arn:aws:sns:eu-west-1:123456789012:ops-pager"
CONFIGURED = {TOPIC_CONTEXT: GIVEN_TOPIC, THROTTLE_CONTEXT: '{"rateLimit": 3, "burstLimit": 4}'}


@pytest.fixture(scope="module")
def configured() -> dict[str, Any]:
    return synth_with(CONFIGURED)


def alarms(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: r["Properties"] for k, r in of_type(resources, "AWS::CloudWatch::Alarm").items()}


def metrics_of(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """(namespace, name, dimensions, stat) of each metric an alarm reads, plain or inside its math."""
    if "MetricName" in alarm:
        stat = alarm.get("Statistic") or alarm.get("ExtendedStatistic")
        return [
            {"ns": alarm["Namespace"], "name": alarm["MetricName"], "dims": alarm.get("Dimensions", []), "stat": stat}
        ]
    found = []
    for query in alarm["Metrics"]:
        if "MetricStat" in query:
            metric = query["MetricStat"]["Metric"]
            found.append(
                {
                    "ns": metric["Namespace"],
                    "name": metric["MetricName"],
                    "dims": metric.get("Dimensions", []),
                    "stat": query["MetricStat"]["Stat"],
                }
            )
    return found


def alarmed(resources: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for alarm in alarms(resources).values() for m in metrics_of(alarm)]


def queue_named(resources: dict[str, Any], name: str) -> str:
    """The logical id of the queue ``flowledger-<name>``."""
    (queue,) = [k for k, q in of_type(resources, "AWS::SQS::Queue").items() if q["Properties"]["QueueName"] == name]
    return str(queue)


def visible_messages_alarms(resources: dict[str, Any], queue: str) -> list[dict[str, Any]]:
    """The alarms on ``queue``'s ApproximateNumberOfMessagesVisible."""
    dimensions = [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}]
    return [
        a
        for a in alarms(resources).values()
        if a.get("MetricName") == "ApproximateNumberOfMessagesVisible" and a["Dimensions"] == dimensions
    ]


DEAD_LETTERS = "flowledger-schedule-dead-letters"


def topic_ref(resources: dict[str, Any]) -> dict[str, str]:
    (topic,) = of_type(resources, "AWS::SNS::Topic")
    return {"Ref": topic}


def test_without_context_an_encrypted_topic_is_made_and_its_arn_output(
    resources: dict[str, Any], template: Any
) -> None:
    (topic,) = of_type(resources, "AWS::SNS::Topic").values()
    key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    assert resources[key_id]["Type"] == "AWS::KMS::Key" and not key_id.startswith("DataKey")
    # CloudWatch publishes the notifications, so the topic's key lets it.
    statements = resources[key_id]["Properties"]["KeyPolicy"]["Statement"]
    assert any(
        s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
        and {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(s["Action"])
        for s in statements
    )
    assert template.to_json()["Outputs"]["AlarmTopicArn"]["Value"] == topic_ref(resources)


def test_every_alarm_notifies_the_one_topic(resources: dict[str, Any]) -> None:
    found = alarms(resources)
    assert len(found) >= 30
    for name, alarm in found.items():
        assert alarm["AlarmActions"] == [topic_ref(resources)], name


def test_a_topic_given_by_context_is_used_and_none_is_made(configured: dict[str, Any]) -> None:
    assert not of_type(configured, "AWS::SNS::Topic")
    for name, alarm in alarms(configured).items():
        assert alarm["AlarmActions"] == [GIVEN_TOPIC], name


@pytest.mark.parametrize("value", ["ops-pager", "arn:aws:sqs:eu-west-1:123456789012:q", "arn:aws:sns:*:*:*", 7])
def test_a_topic_context_that_is_not_a_topic_arn_fails_naming_it(value: Any) -> None:
    with pytest.raises(ValueError, match="must be an SNS topic ARN") as failure:
        topic_arn_from(App(context={TOPIC_CONTEXT: value}).node)
    assert str(failure.value).startswith(TOPIC_CONTEXT)


def test_every_function_has_an_errors_and_a_throttles_alarm(resources: dict[str, Any]) -> None:
    functions = of_type(resources, "AWS::Lambda::Function")
    assert any(k.startswith("ChatFunction") for k in functions)  # the streaming routes' function
    watched = {
        (m["name"], m["dims"][0]["Value"]["Ref"])
        for m in alarmed(resources)
        if m["ns"] == "AWS/Lambda" and m["dims"][0]["Name"] == "FunctionName"
    }
    assert watched == {(metric, f) for f in functions for metric in ("Errors", "Throttles")}


def test_the_api_has_a_5xx_and_a_p99_latency_alarm(resources: dict[str, Any]) -> None:
    (api,) = of_type(resources, "AWS::ApiGateway::RestApi").values()
    on_api = {
        (m["name"], m["stat"])
        for m in alarmed(resources)
        if m["ns"] == "AWS/ApiGateway" and m["dims"] == [{"Name": "ApiName", "Value": api["Properties"]["Name"]}]
    }
    assert on_api == {("5XXError", "Sum"), ("Latency", "p99")}


def test_every_table_has_a_throttle_alarm_on_its_read_and_write_throttle_events(resources: dict[str, Any]) -> None:
    tables = set(of_type(resources, "AWS::DynamoDB::Table"))
    by_table: dict[str, set[str]] = {}
    for alarm in alarms(resources).values():
        if "Metrics" not in alarm:
            continue
        for m in metrics_of(alarm):
            if m["ns"] == "AWS/DynamoDB":
                by_table.setdefault(m["dims"][0]["Value"]["Ref"], set()).add(m["name"])
        (expression,) = [q["Expression"] for q in alarm["Metrics"] if "Expression" in q]
        assert expression.count("FILL(") == 2  # a quiet table is 0, not missing data
    assert by_table == {t: {"ReadThrottleEvents", "WriteThrottleEvents"} for t in tables}


def test_failed_schedule_invocations_alarm_on_the_dead_letter_queue(resources: dict[str, Any]) -> None:
    (alarm,) = visible_messages_alarms(resources, queue_named(resources, DEAD_LETTERS))
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert any(m["ns"] == "AWS/Scheduler" and m["name"] == "TargetErrorCount" for m in alarmed(resources))


def test_the_loop_health_alarm_reads_the_metric_the_jobs_function_emits(resources: dict[str, Any]) -> None:
    (jobs,) = [f for k, f in of_type(resources, "AWS::Lambda::Function").items() if k.startswith("JobsFunction")]
    service = jobs["Properties"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]
    (alarm,) = [a for a in alarms(resources).values() if a.get("MetricName") == LOOP_HEALTH_CRITICAL_METRIC]
    assert alarm["Namespace"] == NAMESPACE
    assert alarm["Dimensions"] == [{"Name": "service", "Value": service}]  # EMF adds the service dimension
    assert (alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
        "Maximum",
        1,
        "GreaterThanOrEqualToThreshold",
    )


def test_the_dashboard_graphs_every_alarmed_metric(resources: dict[str, Any]) -> None:
    (dashboard,) = of_type(resources, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in alarmed(resources):
        assert json.dumps(metric["name"]).strip('"') in body, metric["name"]
        for dimension in metric["dims"]:
            value = dimension["Value"]
            assert (json.dumps(value) if isinstance(value, dict) else value) in body, (metric["name"], value)


def test_a_job_that_raises_is_retried_then_sent_to_the_job_failures_queue(resources: dict[str, Any]) -> None:
    (jobs_id,) = [k for k in of_type(resources, "AWS::Lambda::Function") if k.startswith("JobsFunction")]
    queue = queue_named(resources, "flowledger-job-failures")
    (config,) = of_type(resources, "AWS::Lambda::EventInvokeConfig").values()
    assert config["Properties"] == {
        "FunctionName": {"Ref": jobs_id},
        "Qualifier": "$LATEST",
        "DestinationConfig": {"OnFailure": {"Destination": {"Fn::GetAtt": [queue, "Arn"]}}},
        "MaximumRetryAttempts": JOB_RETRY_ATTEMPTS,
        "MaximumEventAgeInSeconds": 3600,
    }
    # Lambda sends the failure record with the function's own role.
    role = resources[jobs_id]["Properties"]["Role"]["Fn::GetAtt"][0]
    sends = [
        s["Resource"]
        for p in of_type(resources, "AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "sqs:SendMessage" in s["Action"]
    ]
    assert sends == [{"Fn::GetAtt": [queue, "Arn"]}]


def test_a_failed_job_alarms_to_the_topic(resources: dict[str, Any]) -> None:
    (alarm,) = visible_messages_alarms(resources, queue_named(resources, "flowledger-job-failures"))
    assert (alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
        "Maximum",
        1,
        "GreaterThanOrEqualToThreshold",
    )
    assert alarm["AlarmActions"] == alarm["OKActions"] == [topic_ref(resources)]


@pytest.mark.parametrize("job", JOBS, ids=lambda job: job.name)
def test_every_schedule_retries_then_sends_to_the_dead_letter_queue(resources: dict[str, Any], job: Any) -> None:
    queue = queue_named(resources, DEAD_LETTERS)
    (schedule,) = [
        s["Properties"]
        for s in of_type(resources, "AWS::Scheduler::Schedule").values()
        if s["Properties"]["Target"]["Input"] == json.dumps({"job": job.name}, separators=(",", ":"))
    ]
    target = schedule["Target"]
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [queue, "Arn"]}}
    assert target["RetryPolicy"] == {
        "MaximumRetryAttempts": RETRY_ATTEMPTS,
        # an hour, or the job's next slot if sooner (it runs the job again), never under a minute
        "MaximumEventAgeInSeconds": max(60, min(3600, job.interval_seconds)),
    }
    role = target["RoleArn"]["Fn::GetAtt"][0]
    sends = [
        s
        for p in of_type(resources, "AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "sqs:SendMessage"
    ]
    assert [s["Resource"] for s in sends] == [{"Fn::GetAtt": [queue, "Arn"]}]


@pytest.mark.parametrize("name", [DEAD_LETTERS, "flowledger-job-failures"])
def test_the_dead_letter_queues_are_encrypted_keep_messages_and_refuse_plain_http(
    resources: dict[str, Any], name: str
) -> None:
    queue_id = queue_named(resources, name)
    queue = resources[queue_id]
    assert queue["Properties"]["SqsManagedSseEnabled"] is True
    assert queue["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600
    (policy,) = [
        p
        for p in of_type(resources, "AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": queue_id}]
    ]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    )


def method_settings(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (stage,) = of_type(resources, "AWS::ApiGateway::Stage").values()
    # "/~1api~1chat" is /api/chat ("~1" escapes a slash); "/*" with "*" is the stage's own.
    return {
        f"{s['ResourcePath'][1:].replace('~1', '/')}/{s['HttpMethod']}": s
        for s in stage["Properties"]["MethodSettings"]
    }


def limits(setting: dict[str, Any]) -> tuple[float, int]:
    return setting["ThrottlingRateLimit"], setting["ThrottlingBurstLimit"]


def test_the_stage_is_throttled_and_the_heavy_routes_lower(resources: dict[str, Any]) -> None:
    settings = method_settings(resources)
    assert limits(settings["*/*"]) == (50, 100)
    heavy = {key: s for key, s in settings.items() if key != "*/*"}
    assert heavy.keys() == {f"{path}/{method}" for path, method in HEAVY_ROUTES}
    for setting in heavy.values():
        assert limits(setting) == (5, 10)
        # A method's settings replace the stage's: the heavy routes still log errors and never bodies.
        assert (setting["DataTraceEnabled"], setting["LoggingLevel"], setting["MetricsEnabled"]) == (
            False,
            "ERROR",
            True,
        )


def test_the_heavy_routes_are_deployed_methods(resources: dict[str, Any]) -> None:
    deployed = {
        (_path_of(resources, m["Properties"]["ResourceId"]), m["Properties"]["HttpMethod"])
        for m in of_type(resources, "AWS::ApiGateway::Method").values()
    }
    assert set(HEAVY_ROUTES) <= deployed
    assert set(STREAMING_ROUTES) <= set(HEAVY_ROUTES)


def test_the_throttle_context_sets_the_stage_and_caps_the_heavy_routes(configured: dict[str, Any]) -> None:
    for key, setting in method_settings(configured).items():
        assert limits(setting) == (3, 4), key  # a route's limit never exceeds a lowered stage limit


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"rateLimit": 3}', "exactly rateLimit and burstLimit"),
        ({"rateLimit": 0, "burstLimit": 4}, "positive"),
        ({"rateLimit": 3, "burstLimit": 2.5}, "positive integer"),
        ({"rateLimit": True, "burstLimit": 4}, "positive"),
        ("{not json", "must be a JSON object"),
    ],
)
def test_a_bad_throttle_context_fails_naming_it(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as failure:
        Throttle.from_context(App(context={THROTTLE_CONTEXT: value}).node)
    assert str(failure.value).startswith(THROTTLE_CONTEXT)


def test_the_throttle_context_is_read_as_cdk_json_or_the_command_line_gives_it() -> None:
    expected = Throttle(20, 40)
    assert Throttle.from_context(App(context={THROTTLE_CONTEXT: {"rateLimit": 20, "burstLimit": 40}}).node) == expected
    assert (
        Throttle.from_context(App(context={THROTTLE_CONTEXT: '{"rateLimit": 20, "burstLimit": 40}'}).node) == expected
    )


def test_every_resource_answers_preflights_for_the_console_origin_only(resources: dict[str, Any]) -> None:
    preflights = {
        json.dumps(m["Properties"]["ResourceId"]): m["Properties"]
        for m in of_type(resources, "AWS::ApiGateway::Method").values()
        if m["Properties"]["HttpMethod"] == "OPTIONS"
    }
    (api,) = of_type(resources, "AWS::ApiGateway::RestApi")
    every = [{"Ref": r} for r in of_type(resources, "AWS::ApiGateway::Resource")]
    every.append({"Fn::GetAtt": [api, "RootResourceId"]})
    assert set(preflights) == {json.dumps(r) for r in every}
    for preflight in preflights.values():
        answer = preflight["Integration"]["IntegrationResponses"][0]["ResponseParameters"]
        assert answer["method.response.header.Access-Control-Allow-Origin"] == "'https://console.example.com'"
    assert "'*'" not in json.dumps(resources)


def test_the_gateways_own_errors_carry_the_console_origin(resources: dict[str, Any]) -> None:
    answers = {
        r["Properties"]["ResponseType"]: r["Properties"]["ResponseParameters"]
        for r in of_type(resources, "AWS::ApiGateway::GatewayResponse").values()
    }
    assert answers.keys() == {"DEFAULT_4XX", "DEFAULT_5XX"}  # 401/403 from the authorizer, 429, 5xx
    for answer in answers.values():
        assert answer["gatewayresponse.header.Access-Control-Allow-Origin"] == "'https://console.example.com'"


@pytest.mark.parametrize(
    "value", ["*", "https://console.example.com,*", "https://console.example.com/app", "console.example.com"]
)
def test_a_cors_origin_that_is_a_wildcard_or_not_an_origin_fails_naming_the_key(value: str) -> None:
    with pytest.raises(ValueError, match="is not an origin") as failure:
        cors_origins_from(value)
    assert str(failure.value).startswith(CORS_CONTEXT)


def test_cors_origins_are_read_from_the_comma_separated_context() -> None:
    assert cors_origins_from(" https://a.example.com/, https://b.example.com:8443 ,") == [
        "https://a.example.com",
        "https://b.example.com:8443",
    ]
    assert cors_origins_from("") == []
