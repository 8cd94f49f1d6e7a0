"""Issue #28, every documented setting yields a valid template (tests/infra/deploy_matrix.py). The base
across regions and partitions and every setting at once are synthesized once each, for an account and a
region as ``cdk deploy`` does, and must pass cdk-nag, CDK's template rules and cfn-lint without an error;
the mixes (a few settings each) are test_deploy_matrix_settings.py's (validations) and ``make
template-check``'s (cfn-lint and checkov on all 10 templates). Names that AWS keeps account-wide
(CloudFront policies and functions, S3 buckets, IAM names) must differ between regions, so one account can
run the stack in two regions.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from tests.infra.deploy_matrix import (
    ACCOUNT,
    GLOBAL_REGION,
    HOME_REGION,
    MAX_STACK_RESOURCES,
    PARTITION_REGIONS,
    STACK,
    WHOLE_TARGETS,
    LintFindings,
    Synthesis,
    Target,
    lint,
    synthesize,
)

synthesized = cache(synthesize)


@cache
def linted(target: Target) -> LintFindings:
    """cfn-lint's findings on ``target``'s template, once per test process (about 6 s a template)."""
    return lint(synthesized(target).template, target.region)


class TestBaseAndAllTogether:
    """The base across regions and partitions, and every setting at once in two regions."""

    @pytest.mark.parametrize("target", WHOLE_TARGETS, ids=str)
    def test_synth_validations_pass_with_account_and_region(self, target: Target) -> None:
        # cdk-nag, and CDK's own CloudFormation rules where cdk.json turns them into errors: the synth raised.
        # In aws-cn and aws-us-gov only the console's missing resource types may stop it.
        failures = target.unexpected(synthesized(target).validation_failures)
        assert not failures, f"{target}: " + "\n".join(failures)

    # cfn-lint takes about 6 s a template: the region twins (us-east-1) are make template-check's alone.
    @pytest.mark.parametrize("target", [t for t in WHOLE_TARGETS if t.region != GLOBAL_REGION], ids=str)
    def test_cfn_lint_finds_no_errors(self, target: Target) -> None:
        errors = target.unexpected(linted(target).errors)
        assert not errors, f"{target}: cfn-lint errors:\n" + "\n".join(errors)

    @pytest.mark.parametrize("target", WHOLE_TARGETS, ids=str)
    def test_the_stack_keeps_room_under_cloudformations_resource_limit(self, target: Target) -> None:
        # every setting on ("all-together") is the largest template of the matrix
        assert synthesized(target).resource_count <= MAX_STACK_RESOURCES

    @pytest.mark.parametrize("entry", ["base", "all-together"])
    def test_global_names_differ_between_regions_of_one_account(self, entry: str) -> None:
        here, there = (synthesized(Target(entry, region)) for region in (HOME_REGION, GLOBAL_REGION))
        found = clashes(here, there)
        assert not found, f"{entry}: named alike in {HOME_REGION} and {GLOBAL_REGION} of one account:\n" + (
            "\n".join(found)
        )


@pytest.mark.parametrize("region", sorted(PARTITION_REGIONS.values()))
def test_outside_the_aws_partition_the_synth_stops_naming_each_missing_console_type(region: str) -> None:
    target = Target("base", region)
    assert target.missing_types
    synthesis = synthesized(target)
    # The synth is refused (cdk deploy stops there), for exactly the types the partition lacks: no cdk-nag
    # finding, no wrong ARN, nothing else.
    assert synthesis.validation_failures and not target.unexpected(synthesis.validation_failures)
    named = {kind for kind in target.missing_types for f in synthesis.validation_failures if f"'{kind}'" in f}
    assert named == set(target.missing_types)
    assert not target.unexpected(linted(target).errors)
    # The chat functions' Lambda Web Adapter layer is named in the partition, never in aws's.
    assert '"arn:aws:' not in json.dumps(synthesis.template)


# Names AWS keeps unique across the regions of an account (or of all accounts): (resource type, property path).
GLOBAL_NAMES = (
    ("AWS::CloudFront::ResponseHeadersPolicy", ("ResponseHeadersPolicyConfig", "Name")),
    ("AWS::CloudFront::OriginAccessControl", ("OriginAccessControlConfig", "Name")),
    ("AWS::CloudFront::CachePolicy", ("CachePolicyConfig", "Name")),
    ("AWS::CloudFront::OriginRequestPolicy", ("OriginRequestPolicyConfig", "Name")),
    ("AWS::CloudFront::Function", ("Name",)),
    ("AWS::CloudFront::KeyValueStore", ("Name",)),
    ("AWS::S3::Bucket", ("BucketName",)),
    ("AWS::IAM::Role", ("RoleName",)),
    ("AWS::IAM::ManagedPolicy", ("ManagedPolicyName",)),
    ("AWS::IAM::InstanceProfile", ("InstanceProfileName",)),
    ("AWS::IAM::User", ("UserName",)),
    ("AWS::IAM::Group", ("GroupName",)),
)


def test_a_name_without_the_region_is_a_clash() -> None:
    def headers_policy(name: Any) -> dict[str, Any]:
        properties = {"ResponseHeadersPolicyConfig": {"Name": name}}
        return {"Resources": {"Headers": {"Type": "AWS::CloudFront::ResponseHeadersPolicy", "Properties": properties}}}

    def synthesis(region: str, template: dict[str, Any]) -> Synthesis:
        return Synthesis(Target("base", region), template, (), 0.0)

    literal = headers_policy("FlowledgerConsoleHeaders9A597444")  # CDK's name when none is given
    regional = headers_policy({"Fn::Join": ["-", ["console", {"Ref": "AWS::Region"}, "headers"]]})
    assert clashes(synthesis(HOME_REGION, literal), synthesis(GLOBAL_REGION, literal)) == [
        "AWS::CloudFront::ResponseHeadersPolicy Headers: 'FlowledgerConsoleHeaders9A597444'"
    ]
    assert clashes(synthesis(HOME_REGION, regional), synthesis(GLOBAL_REGION, regional)) == []


def test_the_name_resolution_follows_pseudo_parameters() -> None:
    target = Target("base", "cn-north-1")
    joined = {"Fn::Join": ["-", ["site", {"Ref": "AWS::Region"}, {"Ref": "AWS::AccountId"}]]}
    assert resolve(joined, target) == f"site-cn-north-1-{ACCOUNT}"
    assert resolve({"Fn::Sub": "a-${AWS::Partition}-${AWS::Region}"}, target) == "a-aws-cn-cn-north-1"
    assert resolve({"Fn::Sub": ["${X}-${AWS::Region}", {"X": "x"}]}, target) == "x-cn-north-1"
    stack_id = {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}
    assert resolve(stack_id, target) != resolve(stack_id, Target("base", HOME_REGION))
    assert resolve({"Ref": "SomeResource"}, target) == '<{"Ref": "SomeResource"}>'


def clashes(here: Synthesis, there: Synthesis) -> list[str]:
    """The global names ``here`` sets that ``there`` sets too, for a resource of the same type."""
    names_there = {(kind, name) for (kind, _), name in global_names(there).items()}
    return sorted(
        f"{kind} {logical_id}: {name!r}"
        for (kind, logical_id), name in global_names(here).items()
        if (kind, name) in names_there
    )


def global_names(synthesis: Synthesis) -> dict[tuple[str, str], str]:
    """Every name of :data:`GLOBAL_NAMES` the template sets, resolved for its region; unset ones are left out
    (CloudFormation then makes a name of its own, unique per stack)."""
    names = {}
    for logical_id, resource in synthesis.template["Resources"].items():
        for kind, path in GLOBAL_NAMES:
            if resource["Type"] != kind:
                continue
            value: Any = resource.get("Properties", {})
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None:
                names[(kind, logical_id)] = resolve(value, synthesis.target)
    return names


def resolve(value: Any, target: Target) -> str:
    """``value`` as CloudFormation would make it in ``target``'s region: pseudo parameters, Fn::Join, Fn::Sub,
    Fn::Select and Fn::Split resolved. Anything else (a resource's Ref or attribute) stays as its JSON in
    angle brackets, the same in every region, so a name built only from it counts as a clash."""
    resolved = _evaluate(value, target)
    return resolved if isinstance(resolved, str) else ",".join(resolved)


def _evaluate(value: Any, target: Target) -> str | list[str]:
    pseudo = {
        "AWS::Region": target.region,
        "AWS::AccountId": ACCOUNT,
        "AWS::Partition": target.partition,
        "AWS::URLSuffix": "amazonaws.com.cn" if target.partition == "aws-cn" else "amazonaws.com",
        "AWS::StackName": STACK,
        # A stack's id ends in a UUID of its own: a name made from it differs between the two stacks.
        "AWS::StackId": f"arn:{target.partition}:cloudformation:{target.region}:{ACCOUNT}:stack/{STACK}/"
        f"uuid-of-the-stack-in-{target.region}",
    }
    if isinstance(value, str | int):
        return str(value)
    if isinstance(value, list):
        return [resolve(item, target) for item in value]
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Ref" and argument in pseudo:
            return pseudo[argument]
        if function == "Fn::Join":
            separator, parts = argument
            listed = _evaluate(parts, target)
            return str(separator).join([listed] if isinstance(listed, str) else listed)
        if function == "Fn::Split":
            separator, text = argument
            return resolve(text, target).split(separator)
        if function == "Fn::Select":
            index, items = argument
            listed = _evaluate(items, target)
            return listed[int(index)] if isinstance(listed, list) else listed
        if function == "Fn::Sub":
            text, variables = (argument, {}) if isinstance(argument, str) else argument
            for name, variable in {**pseudo, **variables}.items():
                text = text.replace("${" + name + "}", resolve(variable, target))
            return str(text)
    return f"<{json.dumps(value, sort_keys=True)}>"
