"""Witnesses in the CDK app: ``flowledger:witnesses``/``witnessQuorum`` reach the jobs function, the
``Ledger-CheckpointUnwitnessed`` alarm watches the metric the job emits, and ``flowledger:witness`` adds a
second stack (a public function URL, a state table keyed by origin, a KMS Ed25519 key it may only sign
RAW messages with) that passes cdk-nag and cfn-lint. A malformed setting fails the synth naming its key."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from flowledger.ledger.audit import CHECKPOINT_UNWITNESSED_METRIC
from flowledger.ledger.signed_note import COSIGNATURE_V1, ED25519, VerifierKey
from flowledger.metrics import NAMESPACE
from infra.constructs.witnesses import (
    QUORUM_CONTEXT,
    WITNESS_CONTEXT,
    WITNESSES_CONTEXT,
    WitnessClients,
    WitnessSettings,
)
from tests.infra.deploy_matrix import lint
from tests.infra.synth import app_with


def vkey(name: str, kind: int) -> str:
    public = Ed25519PrivateKey.generate().public_key()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return VerifierKey(name, kind, raw).vkey()


WITNESSES = [
    {"url": "https://witness-a.example.org", "vkey": vkey("witness-a.example.org", COSIGNATURE_V1)},
    {"url": "https://witness-b.example.org/w", "vkey": vkey("witness-b.example.org", COSIGNATURE_V1)},
]
LOG = vkey("flowledger/123456789012/eu-west-1/flowledger", ED25519)
CONTEXT = {
    WITNESSES_CONTEXT: json.dumps(WITNESSES),  # as `cdk -c` gives it: a string
    QUORUM_CONTEXT: "1",
    WITNESS_CONTEXT: {"name": "witness.auditor.example", "logs": [LOG]},
}


@pytest.fixture(scope="module")
def templates() -> dict[str, dict[str, Any]]:
    assembly = app_with(CONTEXT).synth()  # runs cdk-nag on both stacks: raises on any unacknowledged finding
    return {name: assembly.get_stack_by_name(name).template for name in ("Flowledger", "FlowledgerWitness")}


def of_type(resources: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r["Properties"] for r in resources.values() if r["Type"] == kind]


def test_the_jobs_function_gets_the_witnesses_and_the_quorum(templates: dict[str, dict[str, Any]]) -> None:
    functions = of_type(templates["Flowledger"]["Resources"], "AWS::Lambda::Function")
    (jobs,) = [f for f in functions if f["Environment"]["Variables"].get("POWERTOOLS_SERVICE_NAME") == "jobs"]
    variables = jobs["Environment"]["Variables"]
    assert json.loads(variables["FLOWLEDGER_WITNESSES"]) == WITNESSES
    assert variables["FLOWLEDGER_WITNESS_QUORUM"] == "1"
    others = [f for f in functions if f is not jobs]
    assert not [f for f in others if "FLOWLEDGER_WITNESSES" in f.get("Environment", {}).get("Variables", {})]


def test_the_unwitnessed_alarm_reads_the_metric_the_checkpoint_job_emits(templates: dict[str, dict[str, Any]]) -> None:
    alarms = of_type(templates["Flowledger"]["Resources"], "AWS::CloudWatch::Alarm")
    (alarm,) = [a for a in alarms if a.get("MetricName") == CHECKPOINT_UNWITNESSED_METRIC]
    assert alarm["AlarmName"].endswith("-Ledger-CheckpointUnwitnessed")
    assert (alarm["Namespace"], alarm["Dimensions"]) == (NAMESPACE, [{"Name": "service", "Value": "jobs"}])
    assert (alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
        "Maximum",
        1,
        "GreaterThanOrEqualToThreshold",
    )


def test_the_witness_stack_is_a_public_url_a_state_table_and_an_ed25519_key(
    templates: dict[str, dict[str, Any]],
) -> None:
    resources = templates["FlowledgerWitness"]["Resources"]
    (url,) = of_type(resources, "AWS::Lambda::Url")
    assert url["AuthType"] == "NONE"
    (table,) = of_type(resources, "AWS::DynamoDB::Table")
    assert table["KeySchema"] == [{"AttributeName": "origin", "KeyType": "HASH"}]
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    (key,) = of_type(resources, "AWS::KMS::Key")
    assert (key["KeySpec"], key["KeyUsage"]) == ("ECC_NIST_EDWARDS25519", "SIGN_VERIFY")
    (function,) = of_type(resources, "AWS::Lambda::Function")
    variables = function["Environment"]["Variables"]
    assert variables["FLOWLEDGER_WITNESS_NAME"] == "witness.auditor.example"
    assert json.loads(variables["FLOWLEDGER_WITNESS_LOGS"]) == [LOG]
    statements = [s for p in of_type(resources, "AWS::IAM::Policy") for s in p["PolicyDocument"]["Statement"]]
    (sign,) = [s for s in statements if s["Action"] == "kms:Sign"]
    assert sign["Condition"] == {"StringEquals": {"kms:SigningAlgorithm": "ED25519_SHA_512", "kms:MessageType": "RAW"}}
    (state,) = [s for s in statements if "dynamodb:PutItem" in s["Action"]]
    assert sorted(state["Action"]) == ["dynamodb:GetItem", "dynamodb:PutItem"]


def test_the_witness_template_passes_cfn_lint(templates: dict[str, dict[str, Any]]) -> None:
    assert not lint(templates["FlowledgerWitness"], "eu-west-1").errors


def test_without_the_witness_setting_there_is_one_stack() -> None:
    assert WitnessSettings.from_context(App().node) is None
    assert WitnessClients.from_context(App().node) == WitnessClients()


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({WITNESSES_CONTEXT: "[{"}, WITNESSES_CONTEXT),
        ({WITNESSES_CONTEXT: [{"url": "https://w.example", "vkey": LOG}]}, "cosignature key"),
        ({WITNESSES_CONTEXT: [{"url": "ftp://w.example", "vkey": WITNESSES[0]["vkey"]}]}, WITNESSES_CONTEXT),
        ({WITNESSES_CONTEXT: WITNESSES, QUORUM_CONTEXT: 3}, QUORUM_CONTEXT),
        ({WITNESSES_CONTEXT: WITNESSES, QUORUM_CONTEXT: "none"}, QUORUM_CONTEXT),
    ],
)
def test_bad_witnesses_fail_naming_the_setting(context: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WitnessClients.from_context(App(context=context).node)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"name": "w", "logs": []}, "logs must be"),
        ({"name": "w", "logs": [WITNESSES[0]["vkey"]]}, "note key"),
        ({"name": "has space", "logs": [LOG]}, "not a key name"),
        ({"name": "w", "logs": [LOG], "other": 1}, "unknown key"),
    ],
)
def test_a_bad_witness_setting_fails_naming_it(value: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WitnessSettings.from_context(App(context={WITNESS_CONTEXT: value}).node)


def test_the_public_url_and_the_plain_log_group_say_why_in_the_template(templates: dict[str, dict[str, Any]]) -> None:
    resources = templates["FlowledgerWitness"]["Resources"].values()
    skipped = {
        (resource["Type"], skip["id"]): skip["comment"]
        for resource in resources
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    }
    assert set(skipped) == {
        ("AWS::Lambda::Url", "CKV_AWS_258"),
        ("AWS::Logs::LogGroup", "CKV_AWS_158"),
        ("AWS::DynamoDB::Table", "CKV_AWS_119"),
    }
    assert all(skipped.values())
