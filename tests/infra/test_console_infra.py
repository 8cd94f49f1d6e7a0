"""The console in AWS: a private bucket read only by its distribution, strict headers, the shell rewrite,
the Cognito pools, the operator role that may call /admin/v1 and nothing else, and the deployed config."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App

from flowledger.local.console import SECURITY_HEADERS
from infra.constructs.api import CORS_CONTEXT
from tests.infra.synth import resources_with


def of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {key: value for key, value in resources.items() if value["Type"] == kind}


def one(resources: dict[str, Any], kind: str) -> tuple[str, dict[str, Any]]:
    (found,) = of_type(resources, kind).items()
    return found[0], found[1]["Properties"]


def text(value: Any) -> str:
    """A template value as a string, references written ``<LogicalId>`` (``<Id.Attr>`` for GetAtt)."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(text(part) for part in parts)
    if "Ref" in value:
        return f"<{value['Ref']}>"
    if "Fn::GetAtt" in value:
        return "<" + ".".join(value["Fn::GetAtt"]) + ">"
    raise AssertionError(f"unexpected template value {value!r}")


def logical_id(resources: dict[str, Any], kind: str, prefix: str) -> str:
    (found,) = [key for key in of_type(resources, kind) if key.startswith(prefix)]
    return found


@pytest.fixture(scope="module")
def ids(resources: dict[str, Any]) -> dict[str, str]:
    return {
        "api": logical_id(resources, "AWS::ApiGateway::RestApi", "Api"),
        "stage": logical_id(resources, "AWS::ApiGateway::Stage", "Api"),
        "bucket": logical_id(resources, "AWS::S3::Bucket", "ConsoleSite"),
        "distribution": logical_id(resources, "AWS::CloudFront::Distribution", "Console"),
        "users": logical_id(resources, "AWS::Cognito::UserPool", "Console"),
        "client": logical_id(resources, "AWS::Cognito::UserPoolClient", "Console"),
        "identities": logical_id(resources, "AWS::Cognito::IdentityPool", "Console"),
        "role": logical_id(resources, "AWS::IAM::Role", "ConsoleOperatorRole"),
        "logs": logical_id(resources, "AWS::S3::Bucket", "DataAccessLogs"),
        "uploads": logical_id(resources, "AWS::S3::Bucket", "DataBucketdocuments"),
    }


def test_the_site_bucket_is_private_versioned_encrypted_and_logged(
    resources: dict[str, Any], ids: dict[str, str]
) -> None:
    bucket = resources[ids["bucket"]]["Properties"]
    assert bucket["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert bucket["LoggingConfiguration"]["DestinationBucketName"] == {"Ref": ids["logs"]}


def test_only_the_distribution_may_read_the_bucket_and_only_over_tls(
    resources: dict[str, Any], ids: dict[str, str]
) -> None:
    policies = of_type(resources, "AWS::S3::BucketPolicy").values()
    (policy,) = [p["Properties"] for p in policies if p["Properties"]["Bucket"] == {"Ref": ids["bucket"]}]
    allows = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    denies = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert len(allows) == 1
    (allow,) = allows
    assert allow["Principal"] == {"Service": "cloudfront.amazonaws.com"}
    assert allow["Action"] == "s3:GetObject"
    source = text(allow["Condition"]["StringEquals"]["AWS:SourceArn"])
    assert source == f"arn:<AWS::Partition>:cloudfront::<AWS::AccountId>:distribution/<{ids['distribution']}>"
    assert any(d["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for d in denies)


def test_the_distribution_redirects_to_https_compresses_and_rewrites_addresses(
    resources: dict[str, Any], ids: dict[str, str]
) -> None:
    config = resources[ids["distribution"]]["Properties"]["DistributionConfig"]
    behaviour = config["DefaultCacheBehavior"]
    assert behaviour["ViewerProtocolPolicy"] == "redirect-to-https"
    assert behaviour["Compress"] is True
    function_id, _ = one(resources, "AWS::CloudFront::Function")
    assert behaviour["FunctionAssociations"] == [
        {"EventType": "viewer-request", "FunctionARN": {"Fn::GetAtt": [function_id, "FunctionARN"]}}
    ]
    (origin,) = config["Origins"]
    access_control, _ = one(resources, "AWS::CloudFront::OriginAccessControl")
    assert origin["OriginAccessControlId"] == {"Fn::GetAtt": [access_control, "Id"]}
    assert origin["DomainName"] == {"Fn::GetAtt": [ids["bucket"], "RegionalDomainName"]}
    assert config["Logging"]["Bucket"] == {"Fn::GetAtt": [ids["logs"], "RegionalDomainName"]}


def test_the_headers_are_the_dev_servers_with_the_api_and_cognito_allowed(
    resources: dict[str, Any], ids: dict[str, str]
) -> None:
    _, policy = one(resources, "AWS::CloudFront::ResponseHeadersPolicy")
    security = policy["ResponseHeadersPolicyConfig"]["SecurityHeadersConfig"]
    # The documents bucket by its deployed name, never its Ref (with no CORS origin configured, the bucket's
    # CORS rule names the distribution, and a Ref back would be a cycle).
    uploads = text(resources[ids["uploads"]]["Properties"]["BucketName"])
    assert uploads == "flowledger-documents-<AWS::AccountId>-<AWS::Region>"
    allowed = (
        f"connect-src 'self' https://<{ids['api']}>.execute-api.<AWS::Region>.<AWS::URLSuffix> "
        "https://cognito-idp.<AWS::Region>.<AWS::URLSuffix> https://cognito-identity.<AWS::Region>.<AWS::URLSuffix> "
        # a large upload's presigned PUT goes straight to the documents bucket (global and regional names)
        f"https://{uploads}.s3.<AWS::URLSuffix> https://{uploads}.s3.<AWS::Region>.<AWS::URLSuffix>"
    )
    local = SECURITY_HEADERS["content-security-policy"]
    assert text(security["ContentSecurityPolicy"]["ContentSecurityPolicy"]) == local.replace(
        "connect-src 'self'", allowed
    )
    assert security["ContentSecurityPolicy"]["Override"] is True
    assert security["StrictTransportSecurity"]["AccessControlMaxAgeSec"] >= 31_536_000
    assert security["ContentTypeOptions"] == {"Override": True}
    assert security["FrameOptions"] == {"FrameOption": "DENY", "Override": True}


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("/console/flows/f-1", "/console/index.html"),
        ("/console/patient/flows/f-1", "/console/index.html"),
        ("/console", "/console/index.html"),
        ("/console/", "/console/index.html"),
        ("/console/js/app.js", "/console/js/app.js"),
        ("/console/config.json", "/console/config.json"),
        ("/elsewhere/page", "/elsewhere/page"),
        ("/", 302),
    ],
)
def test_the_viewer_function_sends_addresses_that_are_no_file_to_the_shell(
    resources: dict[str, Any], uri: str, expected: str | int
) -> None:
    _, function = one(resources, "AWS::CloudFront::Function")
    assert function["FunctionConfig"]["Runtime"] == "cloudfront-js-2.0"
    script = (
        function["FunctionCode"] + f"\nconsole.log(JSON.stringify(handler({{request: {{uri: {json.dumps(uri)}}}}})));"
    )
    answer = json.loads(subprocess.run(["node", "-e", script], capture_output=True, check=True, text=True).stdout)
    if isinstance(expected, int):
        assert answer["statusCode"] == expected and answer["headers"]["location"]["value"] == "/console/"
    else:
        assert answer["uri"] == expected


def test_the_user_pool_is_invitation_only_with_a_strong_password_and_a_browser_client(
    resources: dict[str, Any], ids: dict[str, str]
) -> None:
    pool = resources[ids["users"]]["Properties"]
    assert pool["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True
    password = pool["Policies"]["PasswordPolicy"]
    assert password["MinimumLength"] >= 12
    assert all(password[k] for k in ("RequireLowercase", "RequireUppercase", "RequireNumbers", "RequireSymbols"))
    assert pool["MfaConfiguration"] in ("OPTIONAL", "ON")
    client = resources[ids["client"]]["Properties"]
    assert client["GenerateSecret"] is False
    assert sorted(client["ExplicitAuthFlows"]) == ["ALLOW_REFRESH_TOKEN_AUTH", "ALLOW_USER_PASSWORD_AUTH"]
    groups = {key: g["Properties"] for key, g in of_type(resources, "AWS::Cognito::UserPoolGroup").items()}
    assert sorted(g["GroupName"] for g in groups.values()) == [
        "chat-users",
        "erasure-officers",
        "operators",
        "patients",
    ]
    assert all(g["UserPoolId"] == {"Ref": ids["users"]} for g in groups.values())
    # The operators group keeps the logical id it was first deployed with: a new one would replace it,
    # and with it every operator's membership.
    (operators,) = [key for key, g in groups.items() if g["GroupName"] == "operators"]
    assert operators.startswith("ConsoleOperatorsGroup")


def test_the_identity_pool_has_no_unauthenticated_identities(resources: dict[str, Any], ids: dict[str, str]) -> None:
    pool = resources[ids["identities"]]["Properties"]
    assert pool["AllowUnauthenticatedIdentities"] is False
    assert pool["CognitoIdentityProviders"] == [
        {
            "ClientId": {"Ref": ids["client"]},
            "ProviderName": {"Fn::GetAtt": [ids["users"], "ProviderName"]},
            "ServerSideTokenCheck": True,
        }
    ]


def test_only_operators_and_erasure_officers_are_mapped_to_a_role(
    resources: dict[str, Any], ids: dict[str, str]
) -> None:
    _, attachment = one(resources, "AWS::Cognito::IdentityPoolRoleAttachment")
    assert attachment["IdentityPoolId"] == {"Ref": ids["identities"]}
    assert not attachment.get("Roles")  # no default authenticated role: a patient gets no AWS credentials
    (mapping,) = attachment["RoleMappings"].values()
    assert mapping["Type"] == "Rules" and mapping["AmbiguousRoleResolution"] == "Deny"
    assert text(mapping["IdentityProvider"]) == f"<{ids['users']}.ProviderName>:<{ids['client']}>"
    officers = logical_id(resources, "AWS::IAM::Role", "ConsoleErasureOfficerRole")
    # The first rule that matches wins: an erasure officer who is an operator too gets the officers' role.
    assert mapping["RulesConfiguration"]["Rules"] == [
        {
            "Claim": "cognito:groups",
            "MatchType": "Contains",
            "Value": group,
            "RoleARN": {"Fn::GetAtt": [role, "Arn"]},
        }
        for group, role in (("erasure-officers", officers), ("operators", ids["role"]))
    ]


def test_the_operator_role_is_assumed_through_the_identity_pool_by_signed_in_users(
    resources: dict[str, Any], ids: dict[str, str]
) -> None:
    role = resources[ids["role"]]["Properties"]
    assert "ManagedPolicyArns" not in role and "Policies" not in role
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust == {
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Effect": "Allow",
        "Principal": {"Federated": "cognito-identity.amazonaws.com"},
        "Condition": {
            "StringEquals": {"cognito-identity.amazonaws.com:aud": {"Ref": ids["identities"]}},
            "ForAnyValue:StringLike": {"cognito-identity.amazonaws.com:amr": "authenticated"},
        },
    }


def test_the_operator_role_may_invoke_this_apis_admin_routes_and_nothing_else(
    resources: dict[str, Any], ids: dict[str, str]
) -> None:
    policies = [p["Properties"] for p in of_type(resources, "AWS::IAM::Policy").values()]
    mine = [p for p in policies if {"Ref": ids["role"]} in p["Roles"]]
    statements = [s for p in mine for s in p["PolicyDocument"]["Statement"]]
    # Every admin route but erasing a subject, which is the erasure officers' role's alone.
    assert [(s["Effect"], s["Action"]) for s in statements] == [
        ("Allow", "execute-api:Invoke"),
        ("Deny", "execute-api:Invoke"),
    ]
    resources_allowed, denied = statements[0]["Resource"], statements[1]["Resource"]
    assert isinstance(resources_allowed, dict)  # one ARN, not a list that could hide a second
    api = f"arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<{ids['api']}>/v1"
    assert text(resources_allowed) == f"{api}/*/admin/v1/*"
    assert text(denied) == f"{api}/POST/admin/v1/subjects/*/erasure"


def deployed(app: App, resources: dict[str, Any]) -> tuple[dict[str, Any], list[Path]]:
    """The config.json the deployment writes (markers resolved to template values) and the site's folder."""
    (deployment,) = [r["Properties"] for r in of_type(resources, "Custom::CDKBucketDeployment").values()]
    assert deployment["DestinationBucketKeyPrefix"] == "console/"
    folders = [
        Path(app.synth().directory) / f"asset.{key.removesuffix('.zip')}" for key in deployment["SourceObjectKeys"]
    ]
    sources = zip(folders, deployment["SourceMarkers"], strict=True)
    ((folder, markers),) = [(f, m) for f, m in sources if (f / "config.json").is_file() and m]
    raw = (folder / "config.json").read_text()
    # Each marker stands for a JSON string literal, its quotes included.
    resolved = re.sub(r"<<marker:0xbaba:\d+>>", lambda m: text(markers[m.group(0)]), raw)
    sites = [f for f in folders if (f / "index.html").is_file()]
    return json.loads(resolved), sites


def test_the_deployed_config_names_the_api_and_the_pools(
    app: App, resources: dict[str, Any], ids: dict[str, str]
) -> None:
    config, _ = deployed(app, resources)
    assert config == {
        "mode": "cognito",
        "api_base": f"https://<{ids['api']}>.execute-api.<AWS::Region>.<AWS::URLSuffix>/<{ids['stage']}>/",
        "region": "<AWS::Region>",
        "cognito": {
            "user_pool_id": f"<{ids['users']}>",
            "client_id": f"<{ids['client']}>",
            "identity_pool_id": f"<{ids['identities']}>",
            "idp_endpoint": "https://cognito-idp.<AWS::Region>.<AWS::URLSuffix>/",
            "identity_endpoint": "https://cognito-identity.<AWS::Region>.<AWS::URLSuffix>/",
        },
    }


def test_the_console_files_are_deployed_without_source_maps(app: App, resources: dict[str, Any]) -> None:
    _, (site,) = deployed(app, resources)
    files = {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()}
    root = Path(__file__).resolve().parents[2] / "console"
    # The vendored files (stable) all ship; the pages change under other hands, so only the shell's are named.
    vendored = {str(p.relative_to(root)) for p in (root / "vendor").rglob("*") if p.is_file()}
    assert vendored and vendored <= files
    assert {"index.html", "css/console.css", "js/app.js", "js/api.js", "js/dom.js", "js/cognito.js"} <= files
    assert not [f for f in files if f.endswith(".map")]


@pytest.fixture(scope="module")
def without_origins() -> dict[str, Any]:
    return resources_with({CORS_CONTEXT: ""})


def test_without_a_cors_context_the_api_allows_the_consoles_own_origin(without_origins: dict[str, Any]) -> None:
    distribution = logical_id(without_origins, "AWS::CloudFront::Distribution", "Console")
    origin = f"https://<{distribution}.DomainName>"
    methods = [m["Properties"] for m in of_type(without_origins, "AWS::ApiGateway::Method").values()]
    preflights = [m for m in methods if m["HttpMethod"] == "OPTIONS"]
    assert preflights
    for preflight in preflights:
        answer = preflight["Integration"]["IntegrationResponses"][0]["ResponseParameters"]
        assert text(answer["method.response.header.Access-Control-Allow-Origin"]) == f"'{origin}'"
    functions = of_type(without_origins, "AWS::Lambda::Function").values()
    variables = [f["Properties"].get("Environment", {}).get("Variables", {}) for f in functions]
    ours = [v for v in variables if "FLOWLEDGER_RESOURCE_PREFIX" in v]
    assert ours and all(text(v["FLOWLEDGER_CORS_ORIGINS"]) == origin for v in ours)
