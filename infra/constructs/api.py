"""The REST API: JWT Lambda authorizer on client routes, IAM on admin routes, one function per capability.

Throttling: the stage's rate and burst (``flowledger:apiThrottle`` = ``{"rateLimit": n, "burstLimit": n}``,
a JSON string from ``cdk -c``), and lower limits on the heavy routes (a chat turn, a backlog pull, a
document upload). CORS: preflights on every resource and the gateway's own error answers carry the
configured console origin (``flowledger:corsOrigins``), never ``*``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct, Node

from flowledger.api.access import CORS_ALLOWED_HEADERS, Access
from flowledger.api.registry import RouteSpec, rest_routes
from flowledger.api.routes import binary_media_types
from infra.constructs.context import json_context
from infra.constructs.functions import LOG_RETENTION, FunctionDefaults, python_function
from infra.constructs.nag import checkov_skip
from infra.constructs.waf import WAF_CONTEXT

STAGE = "v1"
THROTTLE_CONTEXT = "flowledger:apiThrottle"
CORS_CONTEXT = "flowledger:corsOrigins"
# A browser origin: scheme, host and an optional port; nothing after it, and never a wildcard.
_ORIGIN = re.compile(r"^https://[a-z0-9.-]+(:\d{1,5})?$|^http://(localhost|127\.0\.0\.1)(:\d{1,5})?$")


@dataclass(frozen=True)
class Throttle:
    """Requests per second (steady) and the burst API Gateway lets through above it."""

    rate_limit: float
    burst_limit: int

    def at_most(self, ceiling: Throttle) -> Throttle:
        """This limit, never above ``ceiling`` (a route's limit under a lowered stage limit)."""
        return Throttle(min(self.rate_limit, ceiling.rate_limit), min(self.burst_limit, ceiling.burst_limit))

    @classmethod
    def from_context(cls, node: Node) -> Throttle:
        """The stage limit from ``flowledger:apiThrottle``, or the default; a bad value fails the synth naming it."""
        value = json_context(node, THROTTLE_CONTEXT)
        if value is None:
            return STAGE_THROTTLE
        if not isinstance(value, dict) or set(value) != {"rateLimit", "burstLimit"}:
            raise ValueError(f"{THROTTLE_CONTEXT} must be an object with exactly rateLimit and burstLimit")
        rate, burst = value["rateLimit"], value["burstLimit"]
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (rate, burst))
        if not numbers or rate <= 0 or burst < 1 or burst != int(burst):
            raise ValueError(
                f"{THROTTLE_CONTEXT}: rateLimit must be a positive number and burstLimit a positive integer"
            )
        return cls(float(rate), int(burst))


STAGE_THROTTLE = Throttle(rate_limit=50, burst_limit=100)
# Routes that run a model, pull work or store a document: each far costlier than a read.
HEAVY_ROUTES: dict[tuple[str, str], Throttle] = {
    ("/api/chat", "POST"): Throttle(rate_limit=5, burst_limit=10),
    ("/admin/v1/reasoning/research/backlog/next", "POST"): Throttle(rate_limit=5, burst_limit=10),
    ("/api/documents", "POST"): Throttle(rate_limit=5, burst_limit=10),
}


def cors_origins_from(value: Any) -> list[str]:
    """The console origins from ``flowledger:corsOrigins`` (comma-separated); ``*`` or a URL with a path fails."""
    if value is None or value == "":
        return []
    if not isinstance(value, str):
        raise ValueError(f"{CORS_CONTEXT} must be a comma-separated string of origins")
    origins = list(dict.fromkeys(o.strip().rstrip("/") for o in value.split(",") if o.strip()))
    for origin in origins:
        if not _ORIGIN.match(origin):
            raise ValueError(f"{CORS_CONTEXT}: {origin!r} is not an origin (https://host[:port]; never *)")
    return origins


class Api(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        defaults: FunctionDefaults,
        jwks_url: str,
        jwt_issuer: str,
        jwt_audience: str,
        cors_origins: list[str] | None = None,
        throttle: Throttle = STAGE_THROTTLE,
        waf: bool = False,  # flowledger:waf associates a web ACL with the stage (infra/constructs/waf.py)
    ) -> None:
        super().__init__(scope, construct_id)
        access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=LOG_RETENTION,
            encryption_key=defaults.log_key,
            removal_policy=defaults.log_removal,
        )
        # A method's own settings replace the stage's for it, so each carries the logging rules too.
        method_logging = {
            "metrics_enabled": True,
            "logging_level": apigw.MethodLoggingLevel.ERROR,
            "data_trace_enabled": False,  # request bodies may hold PHI: never log them
        }
        heavy = {
            f"{path}/{method}": apigw.MethodDeploymentOptions(
                **method_logging,
                throttling_rate_limit=limit.at_most(throttle).rate_limit,
                throttling_burst_limit=limit.at_most(throttle).burst_limit,
            )
            for (path, method), limit in HEAVY_ROUTES.items()
        }
        self.rest_api = apigw.RestApi(
            self,
            "RestApi",
            rest_api_name=f"{prefix}-api",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            # bodies a route decodes itself (OTLP protobuf) reach the function as bytes, base64-encoded
            binary_media_types=binary_media_types(rest_routes()),
            cloud_watch_role=True,
            # Preflights are answered by API Gateway itself, without credentials; the functions add
            # Access-Control-Allow-Origin to their own responses for the same origins.
            default_cors_preflight_options=apigw.CorsOptions(
                allow_origins=cors_origins,
                allow_methods=apigw.Cors.ALL_METHODS,
                allow_headers=list(CORS_ALLOWED_HEADERS),
                max_age=Duration.minutes(10),
            )
            if cors_origins
            else None,
            deploy_options=apigw.StageOptions(
                stage_name=STAGE,
                tracing_enabled=True,
                **method_logging,
                throttling_rate_limit=throttle.rate_limit,
                throttling_burst_limit=throttle.burst_limit,
                method_options=heavy,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
            ),
        )
        if cors_origins:
            self._cors_on_gateway_errors(cors_origins)
        self._validator = self.rest_api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        self.authorizer_function = python_function(
            self,
            "AuthorizerFunction",
            name="authorizer",
            defaults=defaults,
            description="Verifies client bearer tokens against the issuer's JWKS",
            timeout=Duration.seconds(10),
            environment={
                "FLOWLEDGER_JWKS_URL": jwks_url,
                "FLOWLEDGER_JWT_ISSUER": jwt_issuer,
                "FLOWLEDGER_JWT_AUDIENCE": jwt_audience,
            },
        )
        self.authorizer = apigw.TokenAuthorizer(
            self, "JwtAuthorizer", handler=self.authorizer_function, results_cache_ttl=Duration.minutes(5)
        )
        if not waf:
            Validations.of(self.rest_api).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-APIG3",
                    reason=f"No web ACL: {WAF_CONTEXT} is off in this deployment; the API has no public write "
                    "route without a token or SigV4 signature.",
                )
            )
        Validations.of(self.rest_api).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AmazonAPIGatewayPushToCloudWatchLogs]",
                reason="API Gateway's account-level logging role is the AWS-managed push-to-logs policy.",
            ),
            Acknowledgment(
                id="AwsSolutions-COG4",
                reason="Client routes use a JWT Lambda authorizer (an external OIDC issuer, or the console's "
                "Cognito pool with flowledger:tokenIssuer=console-pool); admin routes use IAM.",
            ),
        )

    def add_routes(self, routes: list[RouteSpec], function: lambda_.IFunction, stream: bool = False) -> None:
        """Expose each route on the API, integrated with ``function`` and guarded by its access.

        ``stream`` sends the response through as the function writes it (response streaming), with
        the longer integration timeout streaming allows.
        """
        # One invoke permission per function, for this API's deployed stages (not two per method, one of them
        # for the console's test-invoke): CloudFormation takes 500 resources a stack, and the routes are many.
        permission = {"scope_permission_to_method": False, "allow_test_invoke": False}
        integration = (
            apigw.LambdaIntegration(
                function,
                response_transfer_mode=apigw.ResponseTransferMode.STREAM,
                timeout=Duration.minutes(5),
                **permission,
            )
            if stream
            else apigw.LambdaIntegration(function, **permission)
        )
        for route in routes:
            resource = self.rest_api.root.resource_for_path(route.path)
            method = resource.add_method(
                route.method, integration, request_validator=self._validator, **self._auth(route.access)
            )
            if route.access is Access.PUBLIC:
                public = f"{route.path} is deliberately public."
                Validations.of(method).acknowledge(Acknowledgment(id="AwsSolutions-APIG4", reason=public))
                checkov_skip(method, "CKV_AWS_59", public)

    def _cors_on_gateway_errors(self, origins: list[str]) -> None:
        """The gateway's own 4xx and 5xx (401 from the authorizer, 403, 429 from throttling) readable by the console.

        A gateway response cannot choose among origins per request, so it names the origin only when
        there is one; with several, the console still sees the functions' answers, not these.
        """
        if len(origins) != 1:
            return
        headers = {
            "Access-Control-Allow-Origin": f"'{origins[0]}'",
            "Access-Control-Allow-Headers": f"'{','.join(CORS_ALLOWED_HEADERS)}'",
            "Vary": "'Origin'",
        }
        for kind in (apigw.ResponseType.DEFAULT_4_XX, apigw.ResponseType.DEFAULT_5_XX):
            self.rest_api.add_gateway_response(f"Cors{kind.response_type}", type=kind, response_headers=headers)

    def _auth(self, access: Access) -> dict[str, object]:
        if access is Access.JWT:
            return {"authorization_type": apigw.AuthorizationType.CUSTOM, "authorizer": self.authorizer}
        if access is Access.IAM:
            return {"authorization_type": apigw.AuthorizationType.IAM}
        return {"authorization_type": apigw.AuthorizationType.NONE}
