"""The OTLP receiver in the synthesized template: its route behind the authorizer on the reasoning function, the
API passing protobuf bodies through as bytes, the receiver's layer, and an alarm on the spans it refuses."""

from __future__ import annotations

from typing import Any

from flowledger.metrics import NAMESPACE
from flowledger.otlp import REFUSED_METRIC
from tests.infra.test_operations import alarms
from tests.infra.test_step_batch_route import _path_of
from tests.infra.test_template import of_type

TRACES = "/api/otlp/v1/traces"


def test_the_traces_route_is_served_by_the_reasoning_function_behind_the_authorizer(
    resources: dict[str, Any],
) -> None:
    paths = {_path_of(resources, {"Ref": key}): key for key in of_type(resources, "AWS::ApiGateway::Resource")}
    (post,) = [
        m["Properties"]
        for m in of_type(resources, "AWS::ApiGateway::Method").values()
        if m["Properties"]["ResourceId"] == {"Ref": paths[TRACES]} and m["Properties"]["HttpMethod"] == "POST"
    ]
    assert post["AuthorizationType"] == "CUSTOM"
    target = post["Integration"]["Uri"]["Fn::Join"][1]
    (function,) = [part["Fn::GetAtt"][0] for part in target if isinstance(part, dict) and "Fn::GetAtt" in part]
    assert function.startswith("Functionreasoning")


def test_protobuf_bodies_reach_the_function_as_bytes(resources: dict[str, Any]) -> None:
    (api,) = of_type(resources, "AWS::ApiGateway::RestApi").values()
    # API Gateway would otherwise read a protobuf body as UTF-8 text and mangle it
    assert api["Properties"]["BinaryMediaTypes"] == ["application/x-protobuf"]


def test_refused_spans_alarm_on_the_metric_the_reasoning_function_emits(resources: dict[str, Any]) -> None:
    (reasoning,) = [
        f
        for f in of_type(resources, "AWS::Lambda::Function").values()
        if f["Properties"].get("Environment", {}).get("Variables", {}).get("POWERTOOLS_SERVICE_NAME") == "reasoning"
    ]
    service = reasoning["Properties"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]
    (alarm,) = [a for a in alarms(resources).values() if a.get("MetricName") == REFUSED_METRIC]
    assert alarm["Namespace"] == NAMESPACE
    assert alarm["Dimensions"] == [{"Name": "service", "Value": service}]
    assert (alarm["Statistic"], alarm["Threshold"]) == ("Sum", 1)
