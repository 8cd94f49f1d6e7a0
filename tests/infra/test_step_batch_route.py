"""The step batch route in the synthesized template: a `steps:batch` resource beside `steps`, behind the authorizer."""

from __future__ import annotations

from typing import Any

FLOW = "/api/reasoning/flows/{flow_id}"


def _of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {key: value for key, value in resources.items() if value["Type"] == kind}


def _path_of(resources: dict[str, Any], resource_id: Any) -> str:
    if isinstance(resource_id, dict) and "Fn::GetAtt" in resource_id:
        return ""  # the API's root resource
    node = resources[resource_id["Ref"]]["Properties"]
    return f"{_path_of(resources, node['ParentId'])}/{node['PathPart']}"


def test_the_batch_route_is_its_own_resource_with_the_authorizer_and_a_preflight(resources: dict[str, Any]) -> None:
    paths = {_path_of(resources, {"Ref": key}): key for key in _of_type(resources, "AWS::ApiGateway::Resource")}
    # API Gateway (and CDK's path-part check) take ':' in a path part: no workaround path is needed.
    assert f"{FLOW}/steps" in paths and f"{FLOW}/steps:batch" in paths
    served = {
        m["Properties"]["HttpMethod"]: m["Properties"]
        for m in _of_type(resources, "AWS::ApiGateway::Method").values()
        if m["Properties"]["ResourceId"] == {"Ref": paths[f"{FLOW}/steps:batch"]}
    }
    assert set(served) == {"POST", "OPTIONS"}
    assert served["POST"]["AuthorizationType"] == "CUSTOM"
    assert served["POST"]["Integration"]["Type"] == "AWS_PROXY"
