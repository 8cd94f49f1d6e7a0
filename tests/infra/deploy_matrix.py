"""The template-validation matrix (issue #28): every documented CDK context setting, in few templates.

Each entry is a CDK context on top of cdk.json's, as ``cdk -c`` would give it, and is synthesized for an
environment (account and region set, as ``cdk deploy`` sets them from the caller's credentials): the base
in eu-west-1, us-east-1 and the aws-cn and aws-us-gov partitions; four mixes, each a few settings that touch
different resources (issue #43: one template for several settings alone, where there was one each); and
all settings together in eu-west-1 and us-east-1. Ten templates. :data:`DOCUMENTED_FORMS` lists every
setting of docs/deployment.md with its value forms, and the tests check that each form is in some entry.
The tests (``tests/infra/test_deploy_matrix*.py``) and ``scripts/check_templates.py`` (``make
template-check``: cfn-lint and checkov on every template) both read it, so it imports nothing of pytest's.

A ``prod`` stage needs a model that reaches a server, so every prod entry names one (the model's three
forms anchor three entries); a ``dev`` entry may go without one. Context strings may hold ``{partition}``,
``{region}`` and ``{account}``: a setting whose ARN must be in the stack's own region (an API certificate)
gets the target's, and every other ARN matches the partition the stack deploys to.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ACCOUNT = "123456789012"
STACK = "Flowledger"
HOME_REGION = "eu-west-1"
# CloudFront's certificates and CLOUDFRONT web ACLs live in this region, whatever the stack's.
GLOBAL_REGION = "us-east-1"
PARTITION_REGIONS = {"aws-cn": "cn-north-1", "aws-us-gov": "us-gov-west-1"}
PARTITION_PREFIXES = {"cn-": "aws-cn", "us-gov-": "aws-us-gov"}  # any other region is in "aws"
# The console's resource types a partition does not offer (CDK's template rule F3006, cfn-lint's E3006): the
# stack does not deploy there as is, and its synth stops naming them (docs/deployment.md). Everything else in
# those templates, every ARN and every cdk-nag acknowledgement, is checked as anywhere.
MISSING_IN_PARTITION: dict[str, tuple[str, ...]] = {
    "aws-cn": (
        "AWS::CloudFront::Function",
        "AWS::CloudFront::OriginAccessControl",
        "AWS::Cognito::UserPool",
        "AWS::Cognito::UserPoolClient",
        "AWS::Cognito::UserPoolGroup",
    ),
    "aws-us-gov": (
        "AWS::CloudFront::Distribution",
        "AWS::CloudFront::Function",
        "AWS::CloudFront::OriginAccessControl",
        "AWS::CloudFront::ResponseHeadersPolicy",
    ),
}

MODEL_SECRET = {
    "secretArn": "arn:{partition}:secretsmanager:{region}:{account}:secret:flowledger/openai-AbCdEf",
    "model": "gpt-4o-mini",
}
MODEL_LITERAL = {"baseUrl": "https://models.example.org/v1", "model": "m"}
MODEL_PARAMETERS = {"baseUrlParameter": "/flowledger/base-url", "modelParameter": "/flowledger/model"}
VOYAGE_SECRET = "arn:{partition}:secretsmanager:{region}:{account}:secret:flowledger/voyage-AbCdEf"
DIAGNOSIS_LOG_GROUPS = ["/aws/lambda/checkout", "/aws/lambda/payments"]
DIAGNOSIS_DATA_API = {
    "resourceArn": "arn:{partition}:rds:{region}:{account}:cluster:shop",
    "secretArn": "arn:{partition}:secretsmanager:{region}:{account}:secret:shop-readonly-AbCdEf",
    "database": "shop",
}
CORS_ORIGINS = "https://console.example.org,http://localhost:8000"
ALARM_TOPIC = "arn:{partition}:sns:{region}:{account}:ops-alarms"
API_THROTTLE = {"rateLimit": 20, "burstLimit": 40}
WAF = {
    "rateLimit": 2000,
    "cloudFrontWebAclArn": "arn:{partition}:wafv2:us-east-1:{account}:global/webacl/flowledger-console/"
    "a1b2c3d4-5678-90ab-cdef-EXAMPLE11111",
}
DOMAIN = {
    "console": "console.example.org",
    "consoleCertificateArn": "arn:{partition}:acm:us-east-1:{account}:certificate/11111111-2222-3333-4444-555555555555",
    "api": "api.example.org",
    "apiCertificateArn": "arn:{partition}:acm:{region}:{account}:certificate/66666666-7777-8888-9999-000000000000",
    "hostedZoneId": "Z0123456789ABCDEFGHIJ",
    "hostedZoneName": "example.org",
}
RESERVED_CONCURRENCY = {"chat": 20, "chat-buffered": 5, "jobs": 2}

# Two witnesses the checkpoint job submits to (url, cosignature verifier key: type 0x04).
WITNESSES = [
    {
        "url": "https://witness-a.example.org",
        "vkey": "witness-a.example.org+497b7455+BE1rpRFNrR7mF6SkAcM3Jm6WRDS1O19F88fnYouDLrIZ",
    },
    {
        "url": "https://witness-b.example.org/w",
        "vkey": "witness-b.example.org+45f575b6+BHyx7+KWUCwVVCHrUyyZ+cYtfJUcs8WmghPEO2RC7MSu",
    },
]

BASE: dict[str, Any] = {"flowledger:model": MODEL_SECRET}

# The base; four "mixes", each a few settings that touch different resources (or different properties of
# one function: its environment, its concurrency, its grants), so that one template proves each of them
# without the rest; then all of them together. A value that excludes another (the model's forms, the
# empty CORS setting and given origins, flow capture off and the research loop, waf true and its object,
# the dev stage and prod's) sits in another template than its rival: the mixes hold what "all-together"
# cannot.
MATRIX: dict[str, dict[str, Any]] = {
    "base": BASE,
    # A trial: the offline model (no flowledger:model), so none of the settings that need a server.
    "dev-mix": {
        "flowledger:stage": "dev",
        "flowledger:flowCapture": False,  # every agent's capture off: the research loop stays off
        "flowledger:continuityNativeReruns": False,  # the chat's environment
        "flowledger:alarmTopicArn": ALARM_TOPIC,  # every alarm's action; the stack makes no topic
        # The console's and the API's custom names; corsOrigins unset, so the API allows the custom name.
        "flowledger:domain": DOMAIN,
    },
    # The model as literal values; OpenAI embeddings through its server; CORS left to the console's own
    # distribution (empty, whatever cdk.json says); diagnosis grants the chat function alone.
    "literal-mix": {
        "flowledger:model": MODEL_LITERAL,
        "flowledger:embeddings": {"pathways": "openai_text_3_small", "knowledge": "openai_text_3_small"},
        "flowledger:corsOrigins": "",
        "flowledger:diagnosisLogGroups": DIAGNOSIS_LOG_GROUPS,  # documented together (docs/diagnosis.md)
        "flowledger:diagnosisDataApi": DIAGNOSIS_DATA_API,
    },
    # The model by SSM parameters; Voyage for pathways (its key's secret to the pathway functions alone);
    # the research loop (the jobs' environment), continuity (the chat's), reserved concurrency (three
    # functions' own), the console pool as token issuer, and a prefix on every physical name.
    "parameters-mix": {
        "flowledger:model": MODEL_PARAMETERS,
        "flowledger:embeddings": {
            "pathways": "voyage_3_5_lite",
            "knowledge": "hash_bucket_v1",
            "voyageSecretArn": VOYAGE_SECRET,
        },
        "flowledger:researchLoop": True,
        "flowledger:criticDispatchStrategy": "re_research",
        "flowledger:continuity": True,
        "flowledger:reservedConcurrency": RESERVED_CONCURRENCY,
        "flowledger:ledgerChains": 1024,  # every function's environment: more chains than the functions' writers
        "flowledger:tokenIssuer": "console-pool",
        "flowledger:resourcePrefix": "acme-ledger",
    },
    # us-east-1 (ENTRY_REGIONS): waf true makes the distribution's web ACL in the stack. The API stage's
    # throttling, and the witnesses (the checkpoint job's environment and its alarm).
    "waf-mix": {
        **BASE,
        "flowledger:waf": True,
        "flowledger:apiThrottle": API_THROTTLE,
        "flowledger:witnesses": WITNESSES,
        "flowledger:witnessQuorum": 1,
    },
    # ---- A NEW CONTEXT SETTING goes here: its key and each of its documented value forms in
    # DOCUMENTED_FORMS below (test_deploy_matrix_settings.py fails until every documented key is there and
    # every form is in some entry); its value in the mix whose settings touch none of the resources it
    # touches (a prod mix needs a model: the model's forms are the mixes' anchors), or in a new mix when
    # it excludes a value of each; a form that excludes none of all-together's values goes there too.
    # flowCapture, waf, domain, reservedConcurrency and witnesses came this way. ----
    "all-together": {
        "flowledger:stage": "prod",
        "flowledger:model": {"secretArn": MODEL_SECRET["secretArn"], **MODEL_PARAMETERS},
        "flowledger:embeddings": {
            "pathways": "voyage_3_5_lite",
            "knowledge": "openai_text_3_small",
            "voyageSecretArn": VOYAGE_SECRET,
        },
        "flowledger:researchLoop": True,
        "flowledger:criticDispatchStrategy": "re_research",
        "flowledger:continuity": True,
        "flowledger:continuityNativeReruns": False,
        "flowledger:diagnosisLogGroups": DIAGNOSIS_LOG_GROUPS,
        "flowledger:diagnosisDataApi": DIAGNOSIS_DATA_API,
        "flowledger:tokenIssuer": "console-pool",
        "flowledger:apiThrottle": API_THROTTLE,
        "flowledger:corsOrigins": CORS_ORIGINS,
        "flowledger:alarmTopicArn": ALARM_TOPIC,
        "flowledger:resourcePrefix": "acme-ledger",
        "flowledger:lwaLayerVersion": 25,  # only the chat functions' layer ARN: checked here alone
        # The research loop needs flow capture on, so it stays at its default here.
        "flowledger:flowCapture": True,
        "flowledger:waf": WAF,
        "flowledger:domain": DOMAIN,
        "flowledger:reservedConcurrency": RESERVED_CONCURRENCY,
        "flowledger:ledgerChains": 1024,
        "flowledger:witnesses": WITNESSES,
        "flowledger:witnessQuorum": 1,
    },
}
# Where each entry is synthesized when not in HOME_REGION alone. The base and all-together in a second
# region of the aws partition: the names AWS keeps account-wide must differ between the two.
ENTRY_REGIONS: dict[str, tuple[str, ...]] = {
    "base": (HOME_REGION, GLOBAL_REGION, *PARTITION_REGIONS.values()),
    "waf-mix": (GLOBAL_REGION,),
    "all-together": (HOME_REGION, GLOBAL_REGION),
}

# The context every entry starts from, as `cdk -c` adds to it: cdk.json's.
CDK_JSON_CONTEXT: dict[str, Any] = json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())["context"]


def _is(*values: Any) -> Callable[[Any], bool]:
    return lambda value: any(value is v if isinstance(v, bool) or v is None else value == v for v in values)


def _given(kind: type) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, kind) and bool(value)


def _model(*keys: str) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, dict) and set(keys) <= set(value) and set(value) - {"model"} <= set(keys)


def _embedding(part: str, default: str, model: str) -> Callable[[Any], bool]:
    return lambda value: (value or {}).get(part, default) == model


_PREFIX = CDK_JSON_CONTEXT["flowledger:resourcePrefix"]
_LWA = CDK_JSON_CONTEXT["flowledger:lwaLayerVersion"]
# Every setting of docs/deployment.md's table ("Every -c setting") and each of its documented value forms:
# a test over the value each entry gives it (cdk.json's underneath, None where neither sets it).
DOCUMENTED_FORMS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "flowledger:resourcePrefix": {
        "cdk.json's": _is(_PREFIX),
        "another": lambda v: isinstance(v, str) and v != _PREFIX,
    },
    "flowledger:stage": {"prod (default)": _is(None, "prod"), "dev": _is("dev")},
    "flowledger:model": {
        "none (dev)": _is(None),
        "secretArn": _model("secretArn"),
        "baseUrl": _model("baseUrl"),
        "parameters": _model("baseUrlParameter", "modelParameter"),
        "secretArn with parameters": _model("secretArn", "baseUrlParameter", "modelParameter"),
    },
    "flowledger:embeddings": {
        "default": _is(None),
        **{
            f"pathways {m}": _embedding("pathways", "hash_bucket_v1", m)
            for m in ("hash_bucket_v1", "openai_text_3_small", "voyage_3_5_lite")
        },
        **{
            f"knowledge {m}": _embedding("knowledge", "none", m)
            for m in ("none", "hash_bucket_v1", "openai_text_3_small")
        },
    },
    "flowledger:jwksUrl": {"cdk.json's": _given(str)},
    "flowledger:jwtIssuer": {"cdk.json's": _given(str)},
    "flowledger:jwtAudience": {"cdk.json's": _given(str)},
    "flowledger:tokenIssuer": {"external (default)": _is(None, "external"), "console-pool": _is("console-pool")},
    "flowledger:corsOrigins": {"empty": _is(""), "origins": _given(str)},
    "flowledger:flowCapture": {"true (default)": _is(None, True), "false": _is(False)},
    "flowledger:researchLoop": {"false (default)": _is(None, False), "true": _is(True)},
    "flowledger:criticDispatchStrategy": {
        "mark_for_review (default)": _is(None, "mark_for_review"),
        "re_research": _is("re_research"),
    },
    "flowledger:continuity": {"false (default)": _is(None, False), "true": _is(True)},
    "flowledger:continuityNativeReruns": {"true (default)": _is(None, True), "false": _is(False)},
    "flowledger:diagnosisLogGroups": {"none (default)": _is(None), "log groups": _given(list)},
    "flowledger:diagnosisDataApi": {"none (default)": _is(None), "a cluster": _given(dict)},
    "flowledger:alarmTopicArn": {"none: the stack's topic": _is(None), "a topic": _given(str)},
    "flowledger:apiThrottle": {"default": _is(None), "rateLimit and burstLimit": _given(dict)},
    "flowledger:reservedConcurrency": {"none (default)": _is(None), "by service": _given(dict)},
    "flowledger:waf": {"false (default)": _is(None, False), "true": _is(True), "an object": _given(dict)},
    "flowledger:domain": {"none (default)": _is(None), "the console's and the API's": _given(dict)},
    "flowledger:ledgerChains": {"16 (default)": _is(None), "a number": lambda v: isinstance(v, int)},
    "flowledger:witnesses": {"none (default)": _is(None), "a list": _given(list)},
    "flowledger:witnessQuorum": {"all (default)": _is(None), "a number": lambda v: isinstance(v, int)},
    "flowledger:lwaLayerVersion": {
        "cdk.json's": _is(_LWA),
        "another": lambda v: isinstance(v, int) and v != _LWA,
    },
}
# Documented settings no entry carries, and what checks them instead.
NOT_IN_MATRIX = {
    "flowledger:witness": "a second stack (FlowledgerWitness): tests/infra/test_witness_infra.py, cdk-nag and cfn-lint",
    "flowledger:skipDependenciesLayerBuild": "every matrix synth skips the layer build (tests/infra/synth.py); "
    "make synth-check builds the real layers",
}


def effective_value(entry: str, key: str) -> Any:
    """The value ``entry`` gives ``key`` on top of cdk.json's context; None where neither sets it."""
    return {**CDK_JSON_CONTEXT, **MATRIX[entry]}.get(key)


def partition_of(region: str) -> str:
    """The AWS partition ``region`` belongs to."""
    return next((p for prefix, p in PARTITION_PREFIXES.items() if region.startswith(prefix)), "aws")


@dataclass(frozen=True)
class Target:
    """One matrix entry synthesized for one region of account :data:`ACCOUNT`."""

    entry: str
    region: str

    def __str__(self) -> str:
        return f"{self.entry}-{self.region}"

    @property
    def partition(self) -> str:
        return partition_of(self.region)

    @property
    def missing_types(self) -> tuple[str, ...]:
        """The resource types of the stack this target's partition does not offer."""
        return MISSING_IN_PARTITION.get(self.partition, ())

    def names_a_missing_type(self, finding: str) -> bool:
        """``finding`` (a validation line or a cfn-lint line) says one of :attr:`missing_types` does not exist."""
        rule = "F3006" in finding.split(":", 1)[0] or finding.startswith("E3006 ")
        return rule and any(f"'{kind}' does not exist" in finding for kind in self.missing_types)

    def unexpected(self, findings: tuple[str, ...]) -> tuple[str, ...]:
        """``findings`` but those that only say a type of :attr:`missing_types` does not exist here."""
        return tuple(f for f in findings if not self.names_a_missing_type(f))

    def context(self) -> dict[str, Any]:
        """The entry's context with its placeholders filled in for this target."""
        return dict(self._fill(MATRIX[self.entry]))

    def _fill(self, value: Any) -> Any:
        if isinstance(value, str):
            for name, filled in (("partition", self.partition), ("region", self.region), ("account", ACCOUNT)):
                value = value.replace("{" + name + "}", filled)
            return value
        if isinstance(value, dict):
            return {key: self._fill(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._fill(item) for item in value]
        return value


TARGETS = tuple(Target(entry, region) for entry in MATRIX for region in ENTRY_REGIONS.get(entry, (HOME_REGION,)))
# The base across regions and partitions, and everything at once: one test module's share.
WHOLE_TARGETS = tuple(t for t in TARGETS if t.entry in ("base", "all-together"))
# The mixes: another test module's (a parallel worker takes a module of tests/infra at a time).
SETTING_TARGETS = tuple(t for t in TARGETS if t not in WHOLE_TARGETS)


# CloudFormation takes 500 resources a stack; past this the next capability's routes and alarms would not fit.
MAX_STACK_RESOURCES = 450


@dataclass(frozen=True)
class Synthesis:
    """A target's template, what cdk-nag (and any other validation plugin) reported, and how long it took."""

    target: Target
    template: dict[str, Any]
    validation_failures: tuple[str, ...]
    seconds: float

    @property
    def resource_count(self) -> int:
        return len(self.template.get("Resources", {}))


@contextmanager
def _environment(target: Target) -> Iterator[None]:
    """CDK_DEFAULT_ACCOUNT/REGION for one synth; infra/app.py reads them from os.environ into the stack's env."""
    names = {"CDK_DEFAULT_ACCOUNT": ACCOUNT, "CDK_DEFAULT_REGION": target.region}
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def synthesize(target: Target) -> Synthesis:
    """Synthesize the real app (dependencies layer skipped) for ``target``. A validation failure (cdk-nag)
    is recorded, not raised, so the template is still linted; a bad context or any other error raises."""
    from tests.infra.synth import app_with_context

    outdir = Path(tempfile.mkdtemp(prefix=f"flowledger-matrix-{target}-"))
    started = time.monotonic()
    try:
        with _environment(target):
            app = app_with_context(target.context(), outdir)
        try:
            app.synth()
            failures: tuple[str, ...] = ()
        except Exception as error:  # jsii raises a plain RuntimeError for a failed validation
            failures = _validation_failures(outdir, error)
        template_file = outdir / f"{STACK}.template.json"
        template = json.loads(template_file.read_text())
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    return Synthesis(target, template, failures, time.monotonic() - started)


def _validation_failures(outdir: Path, error: Exception) -> tuple[str, ...]:
    """The violations of every failed validation plugin, one line each; re-raises what was no validation."""
    report_file = outdir / "validation-report.json"
    if not report_file.exists() or not (outdir / f"{STACK}.template.json").exists():
        raise error
    report = json.loads(report_file.read_text())
    found = [
        f"{plugin['pluginName']} {violation['ruleName']} at {construct['constructPath']}: {violation['description']}"
        for plugin in report.get("pluginReports", [])
        if plugin.get("conclusion") != "success"
        for violation in plugin.get("violations", [])
        for construct in violation.get("violatingConstructs", [])
    ]
    return tuple(found) or (str(error),)


@dataclass(frozen=True)
class LintFindings:
    """cfn-lint's errors and warnings for one template, one line each (informational findings are left out)."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...]


def lint(template: dict[str, Any], region: str) -> LintFindings:
    """cfn-lint (every rule but the informational ones) on ``template`` for the region it deploys to."""
    from cfnlint.api import ManualArgs, lint  # type: ignore[import-untyped]

    matches = lint(json.dumps(template), config=ManualArgs(regions=[region]))
    lines: dict[str, list[str]] = {"error": [], "warning": []}
    for match in matches:
        where = "/".join(str(part) for part in getattr(match, "path", None) or ())
        lines.setdefault(match.rule.severity, []).append(f"{match.rule.id} {where}: {match.message}")
    return LintFindings(tuple(lines["error"]), tuple(lines["warning"]))
