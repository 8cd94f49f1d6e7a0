"""The documents bucket in AWS answers the console's preflight for a large upload's presigned PUT: PUT only,
from the stack's CORS origins (the console's own distribution when none are given), ``ETag`` exposed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App

from flowledger.store.provision import upload_cors_rule
from infra.constructs.api import CORS_CONTEXT, cors_origins_from
from tests.infra.synth import resources_with


def cors_of_buckets(resources: dict[str, Any]) -> dict[str, Any]:
    """Each bucket's CORS rules, by the logical name in its physical name (``flowledger-<name>-...``)."""
    found = {}
    for value in resources.values():
        if value["Type"] == "AWS::S3::Bucket" and "CorsConfiguration" in value["Properties"]:
            name = json.dumps(value["Properties"].get("BucketName", ""))
            found[name] = value["Properties"]["CorsConfiguration"]["CorsRules"]
    return found


def documents_rules(resources: dict[str, Any]) -> list[dict[str, Any]]:
    cors = cors_of_buckets(resources)
    assert len(cors) == 1, f"only the documents bucket takes browser requests, not {sorted(cors)}"
    ((name, rules),) = cors.items()
    assert "flowledger-documents-" in name
    return list(rules)


def test_the_documents_bucket_lets_the_configured_console_origins_put_and_nothing_else(
    app: App, resources: dict[str, Any]
) -> None:
    origins = cors_origins_from(app.node.try_get_context(CORS_CONTEXT))
    assert origins, "cdk.json names the console's origins"
    (rule,) = documents_rules(resources)
    assert rule == {"AllowedMethods": ["PUT"], "AllowedOrigins": origins, "ExposedHeaders": ["ETag"], "MaxAge": 600}
    # The dev server writes the same rule on its embedded bucket (S3's API spells two keys differently).
    local = upload_cors_rule(origins)
    assert (local["AllowedMethods"], local.get("AllowedHeaders"), local["ExposeHeaders"], local["MaxAgeSeconds"]) == (
        rule["AllowedMethods"],
        rule.get("AllowedHeaders"),
        rule["ExposedHeaders"],
        rule["MaxAge"],
    )


@pytest.fixture(scope="module")
def without_origins() -> dict[str, Any]:
    return resources_with({CORS_CONTEXT: ""})


def test_without_cors_origins_the_consoles_own_distribution_may_put(without_origins: dict[str, Any]) -> None:
    (rule,) = documents_rules(without_origins)
    ((distribution, _),) = [(k, v) for k, v in without_origins.items() if v["Type"] == "AWS::CloudFront::Distribution"]
    assert rule["AllowedMethods"] == ["PUT"]
    assert rule["AllowedOrigins"] == [{"Fn::Join": ["", ["https://", {"Fn::GetAtt": [distribution, "DomainName"]}]]}]
