"""The optional edge of the stack (issue #28): AWS WAF on the API stage and the console's distribution
(``flowledger:waf``), custom names with TLS 1.2 for both (``flowledger:domain``), and the cdk-nag
acknowledgements that stand in for them only while they are off.

Each synthesis runs cdk-nag, which raises on an unacknowledged finding: a synth that passes with WAF or a
domain on and the acknowledgement gone shows the finding itself is resolved.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from aws_cdk import App, Stack, Validations
from constructs import IConstruct

from flowledger.config import Settings
from infra.constructs.domain import DOMAIN_CONTEXT, DomainSettings
from infra.constructs.waf import WAF_CONTEXT, WafSettings
from tests.infra.synth import app_with
from tests.infra.test_console_infra import deployed, logical_id, of_type, one, text

ACCOUNT = "123456789012"
CLOUDFRONT_ACL = f"arn:aws:wafv2:us-east-1:{ACCOUNT}:global/webacl/flowledger-edge/1234abcd-12ab-34cd-56ef-1234567890ab"
CONSOLE_CERTIFICATE = f"arn:aws:acm:us-east-1:{ACCOUNT}:certificate/11111111-2222-3333-4444-555555555555"
API_CERTIFICATE = f"arn:aws:acm:eu-west-1:{ACCOUNT}:certificate/66666666-7777-8888-9999-000000000000"
EAST_API_CERTIFICATE = f"arn:aws:acm:us-east-1:{ACCOUNT}:certificate/66666666-7777-8888-9999-000000000000"
ZONE_ID = "Z0123456789ABCDEFGHIJ"
DOMAIN = {
    "console": "console.example.org",
    "consoleCertificateArn": CONSOLE_CERTIFICATE,
    "api": "api.example.org",
    "apiCertificateArn": API_CERTIFICATE,
    "hostedZoneId": ZONE_ID,
    "hostedZoneName": "example.org",
}
# As `cdk -c key='{...}'` gives them: JSON strings.
EDGE = {
    WAF_CONTEXT: json.dumps({"rateLimit": 2000, "cloudFrontWebAclArn": CLOUDFRONT_ACL}),
    DOMAIN_CONTEXT: json.dumps(DOMAIN),
}


class Synth:
    """One synthesis: the app (its construct tree) and the stack's resources and outputs."""

    def __init__(self, app: App) -> None:
        self.app = app
        template = app.synth().get_stack_by_name("Flowledger").template
        self.resources: dict[str, Any] = template["Resources"]
        self.outputs: dict[str, Any] = template.get("Outputs", {})
        stack = app.node.find_child("Flowledger")
        assert isinstance(stack, Stack)
        self.stack = stack

    def construct(self, path: str) -> IConstruct:
        """The construct at ``path`` below the stack (``Console/Distribution``)."""
        node: IConstruct = self.stack
        for part in path.split("/"):
            node = node.node.find_child(part)
        return node

    def acknowledged(self, path: str) -> set[str]:
        """The cdk-nag rules acknowledged on the construct at ``path`` (e.g. ``Console/Distribution``)."""
        found: set[str] = set()
        for entry in self.construct(path).node.metadata:
            if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                found.update(rule.removeprefix("Annotation::") for rule in entry.data)
        return found

    def distribution(self) -> dict[str, Any]:
        """The console distribution's DistributionConfig."""
        _, properties = one(self.resources, "AWS::CloudFront::Distribution")
        return dict(properties["DistributionConfig"])

    def web_acls(self, scope: str) -> dict[str, Any]:
        """The web ACLs of ``scope`` (REGIONAL or CLOUDFRONT) by logical id, their properties."""
        acls = of_type(self.resources, "AWS::WAFv2::WebACL").items()
        return {key: value["Properties"] for key, value in acls if value["Properties"]["Scope"] == scope}


@pytest.fixture(scope="module")
def plain(app: App) -> Synth:
    """The stack as cdk.json's context alone makes it: no WAF, no custom domain (the shared synthesis)."""
    return Synth(app)


@pytest.fixture(scope="module")
def edge() -> Synth:
    """WAF (rate 2000, the distribution's web ACL named) and both names in a zone; region-agnostic."""
    return Synth(app_with(EDGE))


@pytest.fixture
def region(request: pytest.FixtureRequest) -> Iterator[None]:
    """The app's environment (infra/app.py reads CDK_DEFAULT_REGION/ACCOUNT), as `cdk deploy` would set it."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param is None:  # an environment-agnostic synth
            patch.delenv("CDK_DEFAULT_REGION", raising=False)
        else:
            patch.setenv("CDK_DEFAULT_REGION", request.param)
            patch.setenv("CDK_DEFAULT_ACCOUNT", ACCOUNT)
        yield


def rules_of(acl: dict[str, Any]) -> list[dict[str, Any]]:
    """A web ACL's rules in the order WAF evaluates them."""
    return sorted(acl["Rules"], key=lambda rule: rule["Priority"])


def without_metrics(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules without their visibility settings (each web ACL names its own metrics)."""
    return [{key: value for key, value in rule.items() if key != "VisibilityConfig"} for rule in rules]


def assert_rate_limit_and_managed_rules(acl: dict[str, Any], limit: int) -> None:
    """Allow by default; a rate rule per IP first, then the three AWS groups; metrics and samples on."""
    assert acl["DefaultAction"] == {"Allow": {}}
    rate, *managed = rules_of(acl)
    assert rate["Statement"] == {
        "RateBasedStatement": {"Limit": limit, "AggregateKeyType": "IP", "EvaluationWindowSec": 300}
    }
    assert rate["Action"] == {"Block": {}}
    groups = [rule["Statement"]["ManagedRuleGroupStatement"] for rule in managed]
    assert [(g["VendorName"], g["Name"]) for g in groups] == [
        ("AWS", "AWSManagedRulesAmazonIpReputationList"),
        ("AWS", "AWSManagedRulesCommonRuleSet"),
        ("AWS", "AWSManagedRulesKnownBadInputsRuleSet"),
    ]
    assert all(rule["OverrideAction"] == {"None": {}} for rule in managed)  # the groups' own block actions
    for visibility in [acl["VisibilityConfig"], *(rule["VisibilityConfig"] for rule in acl["Rules"])]:
        assert visibility["CloudWatchMetricsEnabled"] is True
        assert visibility["SampledRequestsEnabled"] is True


# --- Off: nothing at the edge, and the findings acknowledged -------------------------------------------------


def test_without_waf_or_domain_there_is_no_web_acl_and_the_findings_are_acknowledged(plain: Synth) -> None:
    assert not of_type(plain.resources, "AWS::WAFv2::WebACL")
    assert not of_type(plain.resources, "AWS::WAFv2::WebACLAssociation")
    assert not of_type(plain.resources, "AWS::ApiGateway::DomainName")
    assert not of_type(plain.resources, "AWS::Route53::RecordSet")
    distribution = plain.distribution()
    assert "WebACLId" not in distribution and "Aliases" not in distribution
    assert {"AwsSolutions-CFR2", "AwsSolutions-CFR4"} <= plain.acknowledged("Console/Distribution")
    assert "AwsSolutions-APIG3" in plain.acknowledged("Api/RestApi")


# --- flowledger:waf ------------------------------------------------------------------------------------------


def test_the_api_stage_gets_a_regional_web_acl_with_managed_rules_and_a_rate_limit(edge: Synth) -> None:
    ((_, acl),) = edge.web_acls("REGIONAL").items()
    assert_rate_limit_and_managed_rules(acl, limit=2000)


def test_the_core_rule_sets_body_size_rule_counts_instead_of_blocking(edge: Synth) -> None:
    # The API accepts JSON bodies (inline documents, step batches) far above the rule's 8 KB.
    assert Settings.model_fields["max_body_bytes"].default > 8 * 1024
    ((_, acl),) = edge.web_acls("REGIONAL").items()
    overrides = {
        rule["Name"]: rule["Statement"]["ManagedRuleGroupStatement"].get("RuleActionOverrides")
        for rule in acl["Rules"]
        if "ManagedRuleGroupStatement" in rule["Statement"]
    }
    assert overrides == {
        "AWSManagedRulesAmazonIpReputationList": None,
        "AWSManagedRulesCommonRuleSet": [{"Name": "SizeRestrictions_BODY", "ActionToUse": {"Count": {}}}],
        "AWSManagedRulesKnownBadInputsRuleSet": None,
    }


def test_the_web_acl_is_associated_with_the_v1_stage(edge: Synth) -> None:
    ((acl_id, _),) = edge.web_acls("REGIONAL").items()
    _, association = one(edge.resources, "AWS::WAFv2::WebACLAssociation")
    api = logical_id(edge.resources, "AWS::ApiGateway::RestApi", "Api")
    stage_id, stage = one(edge.resources, "AWS::ApiGateway::Stage")
    assert stage["StageName"] == "v1"
    assert text(association["ResourceArn"]) == (
        f"arn:<AWS::Partition>:apigateway:<AWS::Region>::/restapis/<{api}>/stages/<{stage_id}>"
    )
    assert association["WebACLArn"] == {"Fn::GetAtt": [acl_id, "Arn"]}
    assert "AwsSolutions-APIG3" not in edge.acknowledged("Api/RestApi")


def test_elsewhere_the_distribution_takes_the_named_cloudfront_web_acl(edge: Synth) -> None:
    assert not edge.web_acls("CLOUDFRONT")  # a CLOUDFRONT web ACL cannot be made outside us-east-1
    assert edge.distribution()["WebACLId"] == CLOUDFRONT_ACL
    assert "AwsSolutions-CFR2" not in edge.acknowledged("Console/Distribution")


@pytest.mark.parametrize(
    ("region", "where"), [("eu-west-1", "deploys to eu-west-1"), (None, "unknown region")], indirect=["region"]
)
def test_elsewhere_without_a_web_acl_arn_the_synth_fails_naming_the_setting(region: None, where: str) -> None:
    with pytest.raises(ValueError, match=f"{WAF_CONTEXT}: .*{where}.*cloudFrontWebAclArn"):
        app_with({WAF_CONTEXT: "true"})


@pytest.mark.parametrize(
    ("value", "settings"),
    [
        (None, None),
        ("", None),
        ("false", None),
        (False, None),
        ("true", WafSettings(rate_limit=1000)),
        (True, WafSettings(rate_limit=1000)),
        ('{"rateLimit": 10}', WafSettings(rate_limit=10)),
        ({"cloudFrontWebAclArn": CLOUDFRONT_ACL}, WafSettings(cloudfront_web_acl_arn=CLOUDFRONT_ACL)),
    ],
)
def test_waf_is_off_on_or_an_object(value: Any, settings: WafSettings | None) -> None:
    assert WafSettings.from_context(App(context={WAF_CONTEXT: value}).node) == settings


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yes", "must be true, false or a JSON object"),
        ("{", "must be true, false or a JSON object"),
        ("[1]", "must be true or an object with only cloudFrontWebAclArn, rateLimit"),
        ({"rate": 100}, "must be true or an object with only"),
        ({"rateLimit": 9}, "rateLimit must be an integer from 10"),
        ({"rateLimit": 2_000_000_001}, "rateLimit must be an integer from 10"),
        ('{"rateLimit": 1500.5}', "rateLimit must be an integer"),
        ({"rateLimit": True}, "rateLimit must be an integer"),
        ({"rateLimit": "1000"}, "rateLimit must be an integer"),
        ({"cloudFrontWebAclArn": CLOUDFRONT_ACL.replace("us-east-1", "eu-west-1")}, "cloudFrontWebAclArn must"),
        ({"cloudFrontWebAclArn": CLOUDFRONT_ACL.replace("global/", "regional/")}, "cloudFrontWebAclArn must"),
        ({"cloudFrontWebAclArn": CLOUDFRONT_ACL.replace(":wafv2:", ":waf:")}, "cloudFrontWebAclArn must"),
        ({"cloudFrontWebAclArn": ""}, "cloudFrontWebAclArn must"),
    ],
)
def test_a_bad_waf_value_fails_naming_the_key(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{WAF_CONTEXT}.*{message}"):
        WafSettings.from_context(App(context={WAF_CONTEXT: value}).node)


# --- flowledger:domain ---------------------------------------------------------------------------------------


def test_the_console_name_goes_on_the_distribution_with_tls_1_2_at_least(edge: Synth) -> None:
    distribution = edge.distribution()
    assert distribution["Aliases"] == ["console.example.org"]
    assert distribution["ViewerCertificate"] == {
        "AcmCertificateArn": CONSOLE_CERTIFICATE,
        "MinimumProtocolVersion": "TLSv1.2_2021",
        "SslSupportMethod": "sni-only",
    }
    assert "AwsSolutions-CFR4" not in edge.acknowledged("Console/Distribution")
    assert text(edge.outputs["ConsoleCustomUrl"]["Value"]) == "https://console.example.org/console/"


def test_the_api_gets_a_regional_tls_1_2_domain_mapped_to_its_v1_stage(edge: Synth) -> None:
    domain_id, domain = one(edge.resources, "AWS::ApiGateway::DomainName")
    assert domain == {
        "DomainName": "api.example.org",
        "RegionalCertificateArn": API_CERTIFICATE,
        "EndpointConfiguration": {"Types": ["REGIONAL"], "IpAddressType": "dualstack"},
        "SecurityPolicy": "TLS_1_2",
    }
    _, mapping = one(edge.resources, "AWS::ApiGateway::BasePathMapping")
    api = logical_id(edge.resources, "AWS::ApiGateway::RestApi", "Api")
    stage = logical_id(edge.resources, "AWS::ApiGateway::Stage", "Api")
    assert mapping == {
        "BasePath": "v1",
        "DomainName": {"Ref": domain_id},
        "RestApiId": {"Ref": api},
        "Stage": {"Ref": stage},
    }
    assert text(edge.outputs["ApiCustomUrl"]["Value"]) == "https://api.example.org/v1/"


def test_the_zone_gets_ipv4_and_ipv6_alias_records_for_both_names(edge: Synth) -> None:
    distribution = logical_id(edge.resources, "AWS::CloudFront::Distribution", "Console")
    domain = logical_id(edge.resources, "AWS::ApiGateway::DomainName", "Domain")
    records = {
        (r["Properties"]["Name"], r["Properties"]["Type"]): r["Properties"]
        for r in of_type(edge.resources, "AWS::Route53::RecordSet").values()
    }
    names = ("console.example.org.", "api.example.org.")
    assert set(records) == {(name, kind) for name in names for kind in ("A", "AAAA")}
    assert all(record["HostedZoneId"] == ZONE_ID for record in records.values())
    for kind in ("A", "AAAA"):
        console, api = records["console.example.org.", kind], records["api.example.org.", kind]
        assert console["AliasTarget"]["DNSName"] == {"Fn::GetAtt": [distribution, "DomainName"]}
        assert api["AliasTarget"]["DNSName"] == {"Fn::GetAtt": [domain, "RegionalDomainName"]}
        assert api["AliasTarget"]["HostedZoneId"] == {"Fn::GetAtt": [domain, "RegionalHostedZoneId"]}


def test_the_console_calls_the_api_by_its_custom_name(edge: Synth) -> None:
    config, _ = deployed(edge.app, edge.resources)
    assert config["api_base"] == "https://api.example.org/v1/"
    _, policy = one(edge.resources, "AWS::CloudFront::ResponseHeadersPolicy")
    headers = policy["ResponseHeadersPolicyConfig"]["SecurityHeadersConfig"]
    csp = text(headers["ContentSecurityPolicy"]["ContentSecurityPolicy"])
    (connect,) = [d.split() for d in csp.split(";") if d.strip().startswith("connect-src")]
    assert "https://api.example.org" in connect
    api = logical_id(edge.resources, "AWS::ApiGateway::RestApi", "Api")
    assert f"https://<{api}>.execute-api.<AWS::Region>.<AWS::URLSuffix>" in connect  # the default endpoint too


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("console.example.org", "must be a JSON object"),
        ('["console.example.org"]', "must be an object with only"),
        ({**DOMAIN, "zone": "example.org"}, "must be an object with only"),
        ({}, "names neither console nor api"),
        ({"console": "console.example.org"}, "console and consoleCertificateArn go together"),
        ({**DOMAIN, "api": None}, "api and apiCertificateArn go together"),
        ({**DOMAIN, "console": "https://console.example.org"}, "console must be a host name"),
        ({**DOMAIN, "api": "*.example.org"}, "api must be a host name"),
        ({**DOMAIN, "api": 42}, "api must be a string"),
        ({**DOMAIN, "consoleCertificateArn": "arn:aws:iam::123456789012:server-certificate/x"}, "must be an ACM"),
        (
            {**DOMAIN, "consoleCertificateArn": API_CERTIFICATE},
            "consoleCertificateArn must be a certificate in us-east-1",
        ),
        ({**DOMAIN, "hostedZoneName": None}, "hostedZoneId and hostedZoneName go together"),
        ({**DOMAIN, "hostedZoneId": "example.org"}, "hostedZoneId must be a Route 53 zone id"),
        ({**DOMAIN, "hostedZoneName": "example.com"}, "console 'console.example.org' is not in the hosted zone"),
    ],
)
def test_a_bad_domain_value_fails_naming_the_key(value: Any, message: str) -> None:
    if isinstance(value, dict):
        value = json.dumps({key: item for key, item in value.items() if item is not None})
    with pytest.raises(ValueError, match=f"^{DOMAIN_CONTEXT}.*{message}"):
        DomainSettings.from_context(App(context={DOMAIN_CONTEXT: value}).node)


def test_the_domain_settings_name_the_origins_the_console_and_cors_use() -> None:
    settings = DomainSettings.from_context(App(context={DOMAIN_CONTEXT: DOMAIN}).node)
    assert settings is not None
    assert settings.console_origin == "https://console.example.org"
    assert settings.api_origin == "https://api.example.org"
    assert settings.api_url == "https://api.example.org/v1/"
    assert DomainSettings.from_context(App().node) is None


@pytest.mark.parametrize("region", ["us-east-1"], indirect=True)
def test_an_api_certificate_from_another_region_fails_the_synth(region: None) -> None:
    domain = {"api": "api.example.org", "apiCertificateArn": API_CERTIFICATE}  # eu-west-1
    with pytest.raises(ValueError, match=f"{DOMAIN_CONTEXT}: apiCertificateArn must be a certificate in .*us-east-1"):
        app_with({DOMAIN_CONTEXT: json.dumps(domain)})


# --- In us-east-1 (last: an account-specific synth) ----------------------------------------------------------


@pytest.fixture(scope="module")
def east() -> Synth:
    """In us-east-1 with WAF on (no ARN) and only an API name, without a zone."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CDK_DEFAULT_REGION", "us-east-1")
        patch.setenv("CDK_DEFAULT_ACCOUNT", ACCOUNT)
        domain = {"api": "api.example.org", "apiCertificateArn": EAST_API_CERTIFICATE}
        return Synth(app_with({WAF_CONTEXT: "true", DOMAIN_CONTEXT: json.dumps(domain)}))


def test_in_us_east_1_the_stack_makes_the_distributions_cloudfront_web_acl(east: Synth) -> None:
    ((acl_id, acl),) = east.web_acls("CLOUDFRONT").items()
    assert_rate_limit_and_managed_rules(acl, limit=1000)  # the default
    assert east.distribution()["WebACLId"] == {"Fn::GetAtt": [acl_id, "Arn"]}
    ((_, regional),) = east.web_acls("REGIONAL").items()
    assert without_metrics(rules_of(acl)) == without_metrics(rules_of(regional))  # the same rules as the API's
    assert "AwsSolutions-CFR2" not in east.acknowledged("Console/Distribution")


def test_an_api_name_alone_leaves_the_console_and_dns_as_they_were(east: Synth) -> None:
    assert of_type(east.resources, "AWS::ApiGateway::DomainName")
    assert not of_type(east.resources, "AWS::Route53::RecordSet")  # no zone given: the operator adds the records
    distribution = east.distribution()
    assert "Aliases" not in distribution and "ViewerCertificate" not in distribution
    assert "AwsSolutions-CFR4" in east.acknowledged("Console/Distribution")
