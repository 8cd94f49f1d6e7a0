"""The web console in AWS: its files in S3 behind CloudFront, and the Cognito pools its people sign in to.

Built in two steps, because the API and the console each need the other: the API's CORS must allow
the distribution's origin, and the console's CSP and ``config.json`` must name the API. The stack
makes the ``Console`` first (bucket, distribution, user pool) and takes ``origin`` for the API's
CORS, then calls ``serve(api)``, which adds what depends on the API (the identity pool, the operator
role, the deployed files). No CloudFormation cycle: the CSP names the API by its RestApi id only,
never by its stage (whose deployment depends on every method, and so on the CORS origin).

People: operators and patients sign in to one user pool (one sign-in form, one set of endpoints);
membership of the ``operators`` group is what the identity pool maps to the role that may call
``/admin/v1``. Anyone else gets no AWS credentials at all (no default role, ambiguity denied).

Bearer tokens: the pool's pre token generation trigger (``functions/token_claims``) writes into each
id token the ``scope`` its groups give (``flowledger.api.group_scopes``) and the user's ``patient_id``
(the ``custom:patient_id`` attribute, which operators set and the app client cannot write). With
``flowledger:tokenIssuer`` = ``console-pool`` the API's authorizer trusts this pool's id tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import Acknowledgment, Aws, CfnOutput, Duration, IStableStringProducer, Lazy, Stack, Validations
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_cloudfront as cloudfront
from aws_cdk import aws_cloudfront_origins as origins
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct, Node

from flowledger.api.group_scopes import (
    ERASURE_OFFICERS_GROUP,
    GROUP_DESCRIPTIONS,
    OPERATORS_GROUP,
    PATIENT_ID_ATTRIBUTE,
)
from flowledger.local.console import SECURITY_HEADERS
from infra.constructs.api import STAGE, Api
from infra.constructs.domain import DOMAIN_CONTEXT, DomainSettings
from infra.constructs.functions import LOG_RETENTION, FunctionDefaults, python_function
from infra.constructs.nag import NagEnvironment, checkov_skip
from infra.constructs.stage import StagePolicy
from infra.constructs.waf import WAF_CONTEXT

CONSOLE_ROOT = Path(__file__).resolve().parents[2] / "console"
KEY_PREFIX = "console/"
ADMIN_PATHS = "/admin/v1/*"
ERASURE_PATH = "/admin/v1/subjects/*/erasure"  # erasing a subject: the erasure officers' role alone
LOCAL_CONNECT_SRC = "connect-src 'self'"
ISSUER_CONTEXT = "flowledger:tokenIssuer"
CONSOLE_POOL_ISSUER = "console-pool"  # the authorizer trusts this stack's console user pool
EXTERNAL_ISSUER = "external"  # the issuer named by flowledger:jwksUrl, jwtIssuer and jwtAudience
CLAIMS_FUNCTION = "token_claims"
PATIENT_ID = PATIENT_ID_ATTRIBUTE.removeprefix("custom:")
# A viewer-request function: an address under /console/ that is no file (its last segment has no
# extension) gets the page shell, as the dev server does; the bare host goes to the console.
SHELL_REWRITE = """function handler(event) {
  var request = event.request;
  var uri = request.uri;
  if (uri === "/" || uri === "") {
    return { statusCode: 302, statusDescription: "Found", headers: { location: { value: "/console/" } } };
  }
  if (uri === "/console" || uri.indexOf("/console/") === 0) {
    var last = uri.substring(uri.lastIndexOf("/") + 1);
    if (last.indexOf(".") === -1) {
      request.uri = "/console/index.html";
    }
  }
  return request;
}
"""


@dataclass(frozen=True)
class TokenIssuer:
    """Whose bearer tokens the API's authorizer trusts: the issuer's JWKS address, ``iss`` and ``aud``."""

    jwks_url: str
    issuer: str
    audience: str


@jsii.implements(IStableStringProducer)
class _Later:
    """A string known only once ``serve(api)`` has run (the CSP names the API made after the console)."""

    def __init__(self, console: Console) -> None:
        self._console = console

    def produce(self) -> str:
        return self._console.content_security_policy()


# CDK's BucketDeployment grants its (stack-wide, CDK-owned) handler the invalidation actions on every
# distribution; the stack has one, the console's.
_INVALIDATION_ON_ANY = (
    "CDK's BucketDeployment handler may create and read invalidations of any distribution (CDK grants them on *); "
    "this stack has one, the console's."
)


class Console(Construct):
    """The console's bucket, distribution and user pool; ``serve(api)`` adds the parts that name the API."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        stage: StagePolicy,
        log_bucket: s3.IBucket | None,
        log_key: kms.IKey,
        waf: bool = False,
        domain: DomainSettings | None = None,
    ) -> None:
        """``waf``: a web ACL will be attached to the distribution (``infra/constructs/waf.py``); ``domain``:
        the console's and the API's custom names (``infra/constructs/domain.py``)."""
        super().__init__(scope, construct_id)
        self._waf = waf
        self._domain = domain
        self._prefix = prefix
        self._stage = stage
        self._log_key = log_key
        self._api_origin: str | None = None
        self._upload_origins: tuple[str, ...] = ()
        self.idp_endpoint = f"https://cognito-idp.{Aws.REGION}.{Aws.URL_SUFFIX}/"
        self.identity_endpoint = f"https://cognito-identity.{Aws.REGION}.{Aws.URL_SUFFIX}/"
        self.bucket = s3.Bucket(
            self,
            "Site",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=log_bucket,
            server_access_logs_prefix="console-site/" if log_bucket else None,
            removal_policy=stage.removal,
            auto_delete_objects=stage.auto_delete_objects,
        )
        self.distribution = self._distribution(log_bucket)
        self.origin = f"https://{self.distribution.distribution_domain_name}"
        CfnOutput(Stack.of(self), "ConsoleUrl", value=f"{self.origin}/console/")
        self._users()

    def _distribution(self, log_bucket: s3.IBucket | None) -> cloudfront.Distribution:
        # flowledger:domain: the console's own name and its certificate (ACM, us-east-1), when it gives them.
        name = self._domain.console if self._domain else None
        certificate_arn = self._domain.console_certificate_arn if self._domain else None
        # CloudFront's names are global: the region keeps a second region's stack of the same prefix apart.
        region_unique = f"{self._prefix}-console-{Aws.REGION}"
        headers = cloudfront.ResponseHeadersPolicy(
            self,
            "Headers",
            response_headers_policy_name=f"{region_unique}-headers",
            comment="The console's CSP (as the dev server's, plus the API and Cognito) and security headers",
            security_headers_behavior=cloudfront.ResponseSecurityHeadersBehavior(
                content_security_policy=cloudfront.ResponseHeadersContentSecurityPolicy(
                    content_security_policy=Lazy.string(_Later(self)), override=True
                ),
                content_type_options=cloudfront.ResponseHeadersContentTypeOptions(override=True),
                frame_options=cloudfront.ResponseHeadersFrameOptions(
                    frame_option=cloudfront.HeadersFrameOption.DENY, override=True
                ),
                referrer_policy=cloudfront.ResponseHeadersReferrerPolicy(
                    referrer_policy=cloudfront.HeadersReferrerPolicy.NO_REFERRER, override=True
                ),
                strict_transport_security=cloudfront.ResponseHeadersStrictTransportSecurity(
                    access_control_max_age=Duration.days(730), include_subdomains=True, override=True
                ),
            ),
            # As locally: the browser revalidates, so a deployment shows at the next load.
            custom_headers_behavior=cloudfront.ResponseCustomHeadersBehavior(
                custom_headers=[
                    cloudfront.ResponseCustomHeader(header="Cache-Control", value="no-cache", override=False)
                ]
            ),
        )
        shell = cloudfront.Function(
            self,
            "ShellRewrite",
            code=cloudfront.FunctionCode.from_inline(SHELL_REWRITE),
            runtime=cloudfront.FunctionRuntime.JS_2_0,
            comment="Console addresses that are no file get the page shell",
            function_name=f"{region_unique}-shell",
        )
        access = cloudfront.S3OriginAccessControl(
            self, "OriginAccess", origin_access_control_name=f"{region_unique}-site", description="The console's files"
        )
        distribution = cloudfront.Distribution(
            self,
            "Distribution",
            comment=f"{self._prefix} console",
            default_behavior=cloudfront.BehaviorOptions(
                origin=origins.S3BucketOrigin.with_origin_access_control(self.bucket, origin_access_control=access),
                viewer_protocol_policy=cloudfront.ViewerProtocolPolicy.REDIRECT_TO_HTTPS,
                allowed_methods=cloudfront.AllowedMethods.ALLOW_GET_HEAD,
                compress=True,
                cache_policy=cloudfront.CachePolicy.CACHING_OPTIMIZED,
                response_headers_policy=headers,
                function_associations=[
                    cloudfront.FunctionAssociation(
                        function=shell, event_type=cloudfront.FunctionEventType.VIEWER_REQUEST
                    )
                ],
            ),
            domain_names=[name] if name else None,
            certificate=acm.Certificate.from_certificate_arn(self, "Certificate", certificate_arn)
            if certificate_arn
            else None,
            # Only a custom certificate takes a security policy; the default one's is fixed (CDK warns otherwise).
            minimum_protocol_version=cloudfront.SecurityPolicyProtocol.TLS_V1_2_2021 if certificate_arn else None,
            http_version=cloudfront.HttpVersion.HTTP2_AND_3,
            enable_logging=log_bucket is not None,
            log_bucket=log_bucket,
            log_file_prefix="console-cdn/" if log_bucket else None,
        )
        Validations.of(distribution).acknowledge(
            Acknowledgment(
                id="AwsSolutions-CFR1", reason="The console serves static files only; who may act is the API's concern."
            ),
        )
        if not self._waf:
            no_waf = f"No web ACL: {WAF_CONTEXT} is off in this deployment."
            Validations.of(distribution).acknowledge(Acknowledgment(id="AwsSolutions-CFR2", reason=no_waf))
            checkov_skip(distribution, "CKV_AWS_68", no_waf)
        if not name:
            default_certificate = (
                "The default *.cloudfront.net certificate: no console name in "
                f"{DOMAIN_CONTEXT}, which gives a certificate and TLS 1.2 at least."
            )
            Validations.of(distribution).acknowledge(Acknowledgment(id="AwsSolutions-CFR4", reason=default_certificate))
            checkov_skip(distribution, "CKV_AWS_174", default_certificate)
        if log_bucket is None:
            Validations.of(distribution).acknowledge(
                Acknowledgment(id="AwsSolutions-CFR3", reason="The stack has no log bucket to write to.")
            )
            Validations.of(self.bucket).acknowledge(
                Acknowledgment(id="AwsSolutions-S1", reason="The stack has no log bucket to write to.")
            )
        return distribution

    def _users(self) -> None:
        self.user_pool = cognito.UserPool(
            self,
            "Users",
            user_pool_name=f"{self._prefix}-console",
            self_sign_up_enabled=False,  # operators and patients are invited, never self-registered
            sign_in_aliases=cognito.SignInAliases(username=True, email=True),
            password_policy=cognito.PasswordPolicy(
                min_length=12,
                require_lowercase=True,
                require_uppercase=True,
                require_digits=True,
                require_symbols=True,
                temp_password_validity=Duration.days(3),
            ),
            mfa=cognito.Mfa.OPTIONAL,
            mfa_second_factor=cognito.MfaSecondFactor(otp=True, sms=False),
            account_recovery=cognito.AccountRecovery.EMAIL_ONLY,
            feature_plan=cognito.FeaturePlan.PLUS,
            standard_threat_protection_mode=cognito.StandardThreatProtectionMode.FULL_FUNCTION,
            # Mutable for operators (admin-update-user-attributes can correct it); the client cannot write it.
            custom_attributes={PATIENT_ID: cognito.StringAttribute(min_len=1, max_len=128, mutable=True)},
            removal_policy=self._stage.removal,
            deletion_protection=not self._stage.is_trial,
        )
        Validations.of(self.user_pool).acknowledge(
            Acknowledgment(
                id="AwsSolutions-COG2",
                reason="MFA is optional (TOTP): the console's sign-in answers the TOTP challenge but cannot yet "
                "enrol a device, and threat protection (full function) asks risky sign-ins for more.",
            )
        )
        # The browser holds no secret: USER_PASSWORD_AUTH over TLS, refresh tokens for renewal, no OAuth.
        # Operators set a patient's id when they invite them; the client may read it, never write it,
        # so a patient cannot make their token name someone else's flows.
        readable = cognito.ClientAttributes().with_standard_attributes(email=True, email_verified=True)
        self.client = self.user_pool.add_client(
            "ConsoleClient",
            user_pool_client_name=f"{self._prefix}-console",
            generate_secret=False,
            auth_flows=cognito.AuthFlow(user_password=True),
            disable_o_auth=True,
            prevent_user_existence_errors=True,
            enable_token_revocation=True,
            id_token_validity=Duration.hours(1),
            access_token_validity=Duration.hours(1),
            refresh_token_validity=Duration.hours(12),
            read_attributes=readable.with_custom_attributes(PATIENT_ID),
            write_attributes=cognito.ClientAttributes().with_standard_attributes(email=True),
        )
        for group, description in GROUP_DESCRIPTIONS.items():
            # "operators" → OperatorsGroup: the logical id the operators group was first deployed with.
            construct_id = "".join(part.capitalize() for part in group.split("-")) + "Group"
            cognito.CfnUserPoolGroup(
                self,
                construct_id,
                user_pool_id=self.user_pool.user_pool_id,
                group_name=group,
                description=description,
            )

    def add_token_claims(self, defaults: FunctionDefaults) -> lambda_.Function:
        """The pre token generation trigger (V1: the id token, on every pool tier) that adds scope and patient_id."""
        self.token_claims_function = python_function(
            self,
            "TokenClaims",
            name=CLAIMS_FUNCTION,
            defaults=defaults,
            description="Console user pool: adds the scope of the user's groups and their patient_id to id tokens",
            timeout=Duration.seconds(5),  # Cognito waits 5 seconds for a trigger, whatever the function's timeout
        )
        # Adds the permission for cognito-idp to invoke it, from this pool only.
        self.user_pool.add_trigger(cognito.UserPoolOperation.PRE_TOKEN_GENERATION, self.token_claims_function)
        return self.token_claims_function

    def token_issuer(self, node: Node, *, external: TokenIssuer) -> TokenIssuer:
        """Whom the authorizer trusts, from ``flowledger:tokenIssuer``: ``console-pool`` (this pool's id tokens,
        whose ``aud`` is the app client) or, unset or ``external``, ``external`` as today; anything else fails."""
        value = node.try_get_context(ISSUER_CONTEXT)
        if value is None or value == "" or value == EXTERNAL_ISSUER:
            return external
        if value != CONSOLE_POOL_ISSUER:
            raise ValueError(f"{ISSUER_CONTEXT} must be {CONSOLE_POOL_ISSUER!r} or {EXTERNAL_ISSUER!r}, not {value!r}")
        issuer = f"{self.idp_endpoint}{self.user_pool.user_pool_id}"
        return TokenIssuer(
            jwks_url=f"{issuer}/.well-known/jwks.json", issuer=issuer, audience=self.client.user_pool_client_id
        )

    def content_security_policy(self) -> str:
        """The dev server's CSP, with ``connect-src`` widened to the API's origin, Cognito's endpoints and the
        documents bucket (a large upload's presigned PUT goes straight to it)."""
        if self._api_origin is None:
            raise ValueError("Console.serve(api) was never called: the console's CSP cannot name the API")
        local = SECURITY_HEADERS["content-security-policy"]
        if LOCAL_CONNECT_SRC not in local:
            raise ValueError(f"the dev server's CSP lost {LOCAL_CONNECT_SRC!r}; keep the two in step")
        origins = (self._api_origin, self.idp_endpoint, self.identity_endpoint, *self._upload_origins)
        origins += self._custom_api_origin()
        endpoints = " ".join(e.rstrip("/") for e in origins)
        return local.replace(LOCAL_CONNECT_SRC, f"{LOCAL_CONNECT_SRC} {endpoints}")

    def serve(self, api: Api, uploads_bucket_name: str) -> None:
        """Add what names the API and the uploads bucket: the identity pool and operator role, the files.

        ``uploads_bucket_name`` is the bucket's name as a plain string (made of pseudo parameters), never
        its ``Ref``: the bucket's CORS rule names the distribution when no origin is configured, so a
        reference from the distribution's CSP back to the bucket would be a cycle.
        """
        rest_api = api.rest_api
        # boto3 presigns for the global name in us-east-1 and the regional one elsewhere: allow both.
        self._upload_origins = (
            f"https://{uploads_bucket_name}.s3.{Aws.URL_SUFFIX}",
            f"https://{uploads_bucket_name}.s3.{Aws.REGION}.{Aws.URL_SUFFIX}",
        )
        self._api_origin = f"https://{rest_api.rest_api_id}.execute-api.{Aws.REGION}.{Aws.URL_SUFFIX}"
        self.identity_pool = cognito.CfnIdentityPool(
            self,
            "Operators",
            identity_pool_name=f"{self._prefix.replace('-', '_')}_console",
            allow_unauthenticated_identities=False,
            allow_classic_flow=False,
            cognito_identity_providers=[
                cognito.CfnIdentityPool.CognitoIdentityProviderProperty(
                    client_id=self.client.user_pool_client_id,
                    provider_name=self.user_pool.user_pool_provider_name,
                    server_side_token_check=True,  # a signed-out (revoked) token gets no credentials
                )
            ],
        )
        signed_in = iam.FederatedPrincipal(
            "cognito-identity.amazonaws.com",
            conditions={
                "StringEquals": {"cognito-identity.amazonaws.com:aud": self.identity_pool.ref},
                "ForAnyValue:StringLike": {"cognito-identity.amazonaws.com:amr": "authenticated"},
            },
            assume_role_action="sts:AssumeRoleWithWebIdentity",
        )
        self.operator_role = iam.Role(
            self,
            "OperatorRole",
            description="Console operators (Cognito group operators): the /admin/v1 routes but erasure",
            max_session_duration=Duration.hours(1),
            assumed_by=signed_in,
        )
        admin_routes = rest_api.arn_for_execute_api("*", ADMIN_PATHS, STAGE)
        self.operator_role.add_to_policy(iam.PolicyStatement(actions=["execute-api:Invoke"], resources=[admin_routes]))
        erasure_route = rest_api.arn_for_execute_api("POST", ERASURE_PATH, STAGE)
        self.operator_role.add_to_policy(
            iam.PolicyStatement(effect=iam.Effect.DENY, actions=["execute-api:Invoke"], resources=[erasure_route])
        )
        self.erasure_officer_role = iam.Role(
            self,
            "ErasureOfficerRole",
            description="Erasure officers (Cognito group erasure-officers): the /admin/v1 routes, erasure included",
            max_session_duration=Duration.hours(1),
            assumed_by=signed_in,
        )
        self.erasure_officer_role.add_to_policy(
            iam.PolicyStatement(actions=["execute-api:Invoke"], resources=[admin_routes])
        )
        api_id = Stack.of(self).get_logical_id(rest_api.node.default_child)  # type: ignore[arg-type]
        admin_finding = NagEnvironment.of(self).arn("execute-api", f"<{api_id}>/{STAGE}/*{ADMIN_PATHS}")
        for role in (self.operator_role, self.erasure_officer_role):
            Validations.of(role).acknowledge(
                Acknowledgment(
                    id=f"AwsSolutions-IAM5[Resource::{admin_finding}]",
                    reason="Every method of this API's /admin/v1 routes on its one stage, and no other route.",
                )
            )
        provider = f"{self.user_pool.user_pool_provider_name}:{self.client.user_pool_client_id}"
        cognito.CfnIdentityPoolRoleAttachment(
            self,
            "RoleMapping",
            identity_pool_id=self.identity_pool.ref,
            roles={},  # no default role: only the mapped group gets credentials
            role_mappings={
                "console": cognito.CfnIdentityPoolRoleAttachment.RoleMappingProperty(
                    type="Rules",
                    identity_provider=provider,
                    ambiguous_role_resolution="Deny",
                    rules_configuration=cognito.CfnIdentityPoolRoleAttachment.RulesConfigurationTypeProperty(
                        rules=[  # the first that matches: an erasure officer is often an operator too
                            cognito.CfnIdentityPoolRoleAttachment.MappingRuleProperty(
                                claim="cognito:groups",
                                match_type="Contains",
                                value=group,
                                role_arn=role.role_arn,
                            )
                            for group, role in (
                                (ERASURE_OFFICERS_GROUP, self.erasure_officer_role),
                                (OPERATORS_GROUP, self.operator_role),
                            )
                        ]
                    ),
                )
            },
        )
        self._deploy((self._domain and self._domain.api_url) or rest_api.url)

    def _custom_api_origin(self) -> tuple[str, ...]:
        """flowledger:domain's API name (``infra/constructs/domain.py``): the console calls the API there
        (config.json's ``api_base``), so the CSP allows it beside the execute-api origin."""
        origin = self._domain.api_origin if self._domain else None
        return (origin,) if origin else ()

    def site_config(self, api_base: str) -> dict[str, Any]:
        """``/console/config.json`` in AWS: where the API is and which pools to sign in to."""
        return {
            "mode": "cognito",
            "api_base": api_base,
            "region": Aws.REGION,
            "cognito": {
                "user_pool_id": self.user_pool.user_pool_id,
                "client_id": self.client.user_pool_client_id,
                "identity_pool_id": self.identity_pool.ref,
                "idp_endpoint": self.idp_endpoint,
                "identity_endpoint": self.identity_endpoint,
            },
        }

    def _deploy(self, api_base: str) -> None:
        log_group = logs.LogGroup(
            self,
            "DeployLogs",
            retention=LOG_RETENTION,
            encryption_key=self._log_key,
            removal_policy=self._stage.removal,
        )
        deployment = s3deploy.BucketDeployment(
            self,
            "Files",
            sources=[
                s3deploy.Source.asset(str(CONSOLE_ROOT), exclude=["*.map"]),
                s3deploy.Source.json_data("config.json", self.site_config(api_base)),
            ],
            destination_bucket=self.bucket,
            destination_key_prefix=KEY_PREFIX,
            distribution=self.distribution,
            distribution_paths=[f"/{KEY_PREFIX}*"],
            memory_limit=256,
            log_group=log_group,
        )
        self.deploy_function = self._deployment_handler(deployment)

    def _deployment_handler(self, deployment: s3deploy.BucketDeployment) -> lambda_.IFunction:
        """CDK's BucketDeployment handler (a stack-level singleton), its grants acknowledged, to be watched."""
        stack = Stack.of(self)
        handler = next(c for c in stack.node.children if c.node.id.startswith("Custom::CDKBucketDeployment"))
        site = stack.get_logical_id(self.bucket.node.default_child)  # type: ignore[arg-type]
        env = NagEnvironment.of(self)
        # The bootstrap's file-assets bucket (default qualifier), as the deployment handler's policy names it.
        assets = env.arn("s3", f"cdk-hnb659fds-assets-{env.account}-{env.region}/*", region=False, account=False)
        reason = "CDK's BucketDeployment handler: reads the console's asset, replaces this bucket's files."
        findings = [
            "Action::s3:GetObject*",
            "Action::s3:GetBucket*",
            "Action::s3:List*",
            "Action::s3:DeleteObject*",
            "Action::s3:Abort*",
            f"Resource::{assets}",
            f"Resource::<{site}.Arn>/*",
        ]
        Validations.of(handler).acknowledge(
            *(Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason) for finding in findings),
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason=_INVALIDATION_ON_ANY,
            ),
            Acknowledgment(id="AwsSolutions-L1", reason="The handler's runtime is the one CDK ships it for."),
        )
        policy = handler.node.find_child("ServiceRole").node.find_child("DefaultPolicy")
        checkov_skip(policy, "CKV_AWS_111", _INVALIDATION_ON_ANY)
        # The deployment's view of that singleton: its name is the function's own Ref, as alarms want.
        function = deployment.node.find_child("CustomResourceHandler")
        assert isinstance(function, lambda_.SingletonFunction)
        return function
