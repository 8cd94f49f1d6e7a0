"""Erasure in the synthesized template: the subjects routes behind IAM on a function of their own, and the
erasure route open to the erasure officers' role and refused to the operators' role."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.test_step_batch_route import _path_of
from tests.infra.test_template import _key_statements, _role_of, of_type

ERASURE = "/admin/v1/subjects/{patient_id}/erasure"


def _role(resources: dict[str, Any], prefix: str) -> tuple[str, list[dict[str, Any]]]:
    (name,) = [k for k in of_type(resources, "AWS::IAM::Role") if k.startswith(prefix)]
    statements = [
        s
        for policy in of_type(resources, "AWS::IAM::Policy").values()
        if {"Ref": name} in policy["Properties"]["Roles"]
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    return name, statements


def test_the_erasure_route_is_served_by_the_subjects_function_behind_iam(resources: dict[str, Any]) -> None:
    paths = {_path_of(resources, {"Ref": key}): key for key in of_type(resources, "AWS::ApiGateway::Resource")}
    (post,) = [
        m["Properties"]
        for m in of_type(resources, "AWS::ApiGateway::Method").values()
        if m["Properties"]["ResourceId"] == {"Ref": paths[ERASURE]} and m["Properties"]["HttpMethod"] == "POST"
    ]
    assert post["AuthorizationType"] == "AWS_IAM"
    target = post["Integration"]["Uri"]["Fn::Join"][1]
    (function,) = [part["Fn::GetAtt"][0] for part in target if isinstance(part, dict) and "Fn::GetAtt" in part]
    assert function.startswith("Functionsubjects")


def test_operators_may_not_erase_and_erasure_officers_may(resources: dict[str, Any]) -> None:
    _, operator = _role(resources, "ConsoleOperatorRole")
    _, officer = _role(resources, "ConsoleErasureOfficerRole")
    (denied,) = [s for s in operator if s.get("Effect") == "Deny"]
    assert denied["Action"] == "execute-api:Invoke"
    assert "/POST/admin/v1/subjects/*/erasure" in json.dumps(denied["Resource"])
    assert not [s for s in officer if s.get("Effect") == "Deny"]
    assert [s["Action"] for s in officer] == ["execute-api:Invoke"]
    # The officers' rule comes first: an officer who is an operator too gets the officers' role.
    (mapping,) = of_type(resources, "AWS::Cognito::IdentityPoolRoleAttachment").values()
    rules = mapping["Properties"]["RoleMappings"]["console"]["RulesConfiguration"]["Rules"]
    assert [r["Value"] for r in rules] == ["erasure-officers", "operators"]


def test_only_erasure_and_retention_may_delete_object_versions(resources: dict[str, Any]) -> None:
    policies = {**of_type(resources, "AWS::IAM::Policy"), **of_type(resources, "AWS::IAM::ManagedPolicy")}
    deleting = {
        role["Ref"]
        for policy in policies.values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement.get("Effect", "Allow") == "Allow" and "s3:DeleteObjectVersion" in json.dumps(statement["Action"])
        for role in policy["Properties"].get("Roles", [])
    }
    # The subjects function (erasure) and the jobs function (retention); the locked-bucket emptier of a trial
    # stage is not in this template.
    assert sorted(name.split("ServiceRole")[0] for name in deleting) == ["Functionsubjects", "JobsFunction"], deleting


def test_the_chat_function_may_record_its_turns_flows(resources: dict[str, Any]) -> None:
    # It records each turn's flow in process, a patient's sealed under their own key: it writes the flows, their
    # steps and audit events, and the subjects' keys, and seals under a flow's or a subject's context.
    chat = _role_of(resources, "ChatFunction")
    writes = [
        s
        for p in [
            *of_type(resources, "AWS::IAM::Policy").values(),
            *of_type(resources, "AWS::IAM::ManagedPolicy").values(),
        ]
        if {"Ref": chat} in p["Properties"].get("Roles", [])
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "dynamodb:PutItem" in json.dumps(s["Action"])
    ]
    written = json.dumps([s["Resource"] for s in writes])
    for table in ("Tableflows", "Tablesteps", "Tableledger", "Tablesubjects", "Tableruns"):
        assert table in written, table
    sealing = json.dumps([s for s in _key_statements(resources, chat) if s["Effect"] == "Allow"])
    assert "flowledger:subject" in sealing and "flowledger:flow_id" in sealing
