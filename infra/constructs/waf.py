"""AWS WAF in front of the API stage and the console's distribution (``flowledger:waf``, off by default).

``cdk deploy -c flowledger:waf=true``, or an object (a JSON string from ``cdk -c``):
``{"rateLimit": 2000, "cloudFrontWebAclArn": "arn:aws:wafv2:us-east-1:ACCOUNT:global/webacl/NAME/ID"}``.

Both web ACLs allow by default and carry the same rules: a rate limit per client IP, then AWS's managed
IP reputation list, core rule set and known bad inputs. The API's is a REGIONAL web ACL made here and
associated with the ``v1`` stage. The distribution's must be a CLOUDFRONT web ACL, which AWS keeps in
us-east-1 whatever the region of the stack: made here when the stack deploys to us-east-1, otherwise
``cloudFrontWebAclArn`` names one made there (the same rules, by hand or by a stack in us-east-1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aws_cdk import Aws, Stack, Token
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudfront as cloudfront
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct, Node

from infra.constructs.context import json_context

WAF_CONTEXT = "flowledger:waf"
CLOUDFRONT_REGION = "us-east-1"  # a CLOUDFRONT-scope web ACL exists in this region only
DEFAULT_RATE_LIMIT = 1000  # requests from one IP in RATE_WINDOW_SECONDS: a busy console session stays far below
RATE_WINDOW_SECONDS = 300
MIN_RATE_LIMIT, MAX_RATE_LIMIT = 10, 2_000_000_000  # what WAF accepts
MANAGED_RULE_GROUPS = (
    "AWSManagedRulesAmazonIpReputationList",
    "AWSManagedRulesCommonRuleSet",
    "AWSManagedRulesKnownBadInputsRuleSet",
)
# The core rule set blocks any body over 8 KB (WAF inspects no further), but the API takes larger JSON
# bodies on purpose: an inline document upload (base64) and a batch of steps, up to the functions' own
# FLOWLEDGER_MAX_BODY_BYTES (256 KB by default), which they enforce themselves. Counted, not blocked,
# so its metric still shows how often it happens.
COUNTED_RULES = {"AWSManagedRulesCommonRuleSet": ("SizeRestrictions_BODY",)}
_KEYS = {"rateLimit", "cloudFrontWebAclArn"}
_CLOUDFRONT_WEB_ACL_ARN = re.compile(
    rf"^arn:aws[a-z-]*:wafv2:{CLOUDFRONT_REGION}:\d{{12}}:global/webacl/[\w-]{{1,128}}/[\w-]{{1,128}}$"
)


@dataclass(frozen=True)
class WafSettings:
    """The rate limit per client IP, and the distribution's web ACL when it cannot be made in this stack."""

    rate_limit: int = DEFAULT_RATE_LIMIT
    cloudfront_web_acl_arn: str | None = None

    @classmethod
    def from_context(cls, node: Node) -> WafSettings | None:
        """The settings from ``flowledger:waf`` (``true`` or an object), ``None`` when unset or ``false``;
        a bad value fails the synth naming the key."""
        # `-c flowledger:waf=true` is the JSON true, as cdk.json's true is.
        value = json_context(node, WAF_CONTEXT, expected="true, false or a JSON object")
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if not isinstance(value, dict) or not set(value) <= _KEYS:
            raise ValueError(f"{WAF_CONTEXT} must be true or an object with only {', '.join(sorted(_KEYS))}")
        rate = value.get("rateLimit", DEFAULT_RATE_LIMIT)
        if not isinstance(rate, int) or isinstance(rate, bool) or not MIN_RATE_LIMIT <= rate <= MAX_RATE_LIMIT:
            raise ValueError(
                f"{WAF_CONTEXT}: rateLimit must be an integer from {MIN_RATE_LIMIT} to {MAX_RATE_LIMIT} "
                f"(requests per IP in {RATE_WINDOW_SECONDS} seconds)"
            )
        arn = value.get("cloudFrontWebAclArn")
        if arn is not None and not (isinstance(arn, str) and _CLOUDFRONT_WEB_ACL_ARN.match(arn)):
            raise ValueError(
                f"{WAF_CONTEXT}: cloudFrontWebAclArn must be the ARN of a CLOUDFRONT web ACL, which lives in "
                f"{CLOUDFRONT_REGION}: arn:aws:wafv2:{CLOUDFRONT_REGION}:ACCOUNT:global/webacl/NAME/ID, not {arn!r}"
            )
        return cls(rate_limit=rate, cloudfront_web_acl_arn=arn)


class Waf(Construct):
    """The API stage's REGIONAL web ACL, and the distribution's CLOUDFRONT web ACL (made or named)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: WafSettings,
        prefix: str,
        rest_api: apigw.RestApi,
        distribution: cloudfront.Distribution,
    ) -> None:
        super().__init__(scope, construct_id)
        self._settings = settings
        self._prefix = prefix
        self.api_web_acl = self._web_acl("Api", scope="REGIONAL")
        stage = rest_api.deployment_stage
        wafv2.CfnWebACLAssociation(
            self,
            "ApiAssociation",
            resource_arn=f"arn:{Aws.PARTITION}:apigateway:{Aws.REGION}::/restapis/{rest_api.rest_api_id}"
            f"/stages/{stage.stage_name}",
            web_acl_arn=self.api_web_acl.attr_arn,
        )
        self.distribution_web_acl_arn = self._distribution_web_acl_arn()
        distribution.attach_web_acl_id(self.distribution_web_acl_arn)

    def _distribution_web_acl_arn(self) -> str:
        """The named web ACL, else one made here when the stack is in us-east-1; elsewhere the synth fails."""
        if self._settings.cloudfront_web_acl_arn:
            return self._settings.cloudfront_web_acl_arn
        region = Stack.of(self).region
        if not Token.is_unresolved(region) and region == CLOUDFRONT_REGION:
            return self._web_acl("Console", scope="CLOUDFRONT").attr_arn
        where = "an unknown region (no CDK_DEFAULT_REGION)" if Token.is_unresolved(region) else region
        raise ValueError(
            f"{WAF_CONTEXT}: the console's distribution needs a CLOUDFRONT web ACL, which AWS keeps in "
            f"{CLOUDFRONT_REGION}, and this stack deploys to {where}. Create one there (the same rules) and pass "
            f'its ARN: -c {WAF_CONTEXT}=\'{{"cloudFrontWebAclArn": "arn:aws:wafv2:{CLOUDFRONT_REGION}:ACCOUNT:'
            f"global/webacl/NAME/ID\"}}', or deploy the stack to {CLOUDFRONT_REGION}."
        )

    def _web_acl(self, name: str, *, scope: str) -> wafv2.CfnWebACL:
        metric = f"{self._prefix}-{name.lower()}"
        return wafv2.CfnWebACL(
            self,
            name,
            name=metric,
            description=f"Flowledger {name.lower()}: a rate limit per IP and AWS managed rules",
            scope=scope,
            default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
            visibility_config=_visibility(metric),
            rules=self._rules(metric),
        )

    def _rules(self, metric: str) -> list[wafv2.CfnWebACL.RuleProperty]:
        # First, so it counts every request of an IP, even those a later rule blocks.
        rate = wafv2.CfnWebACL.RuleProperty(
            name="RateLimitPerIp",
            priority=0,
            statement=wafv2.CfnWebACL.StatementProperty(
                rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(
                    limit=self._settings.rate_limit,
                    aggregate_key_type="IP",
                    evaluation_window_sec=RATE_WINDOW_SECONDS,
                )
            ),
            action=wafv2.CfnWebACL.RuleActionProperty(block={}),
            visibility_config=_visibility(f"{metric}-rate-limit"),
        )
        managed = [
            wafv2.CfnWebACL.RuleProperty(
                name=group,
                priority=priority,
                statement=wafv2.CfnWebACL.StatementProperty(
                    managed_rule_group_statement=wafv2.CfnWebACL.ManagedRuleGroupStatementProperty(
                        vendor_name="AWS",
                        name=group,
                        rule_action_overrides=[
                            wafv2.CfnWebACL.RuleActionOverrideProperty(
                                name=rule, action_to_use=wafv2.CfnWebACL.RuleActionProperty(count={})
                            )
                            for rule in COUNTED_RULES.get(group, ())
                        ]
                        or None,
                    )
                ),
                override_action=wafv2.CfnWebACL.OverrideActionProperty(none={}),  # the group's own actions
                visibility_config=_visibility(f"{metric}-{group}"),
            )
            for priority, group in enumerate(MANAGED_RULE_GROUPS, start=1)
        ]
        return [rate, *managed]


def _visibility(metric: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
    """CloudWatch metrics and sampled requests for a web ACL or one of its rules."""
    return wafv2.CfnWebACL.VisibilityConfigProperty(
        cloud_watch_metrics_enabled=True, metric_name=metric, sampled_requests_enabled=True
    )
