"""The REST API: JWT Lambda authorizer on client routes, IAM on admin routes, one function per capability."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from flowledger.api.access import CORS_ALLOWED_HEADERS, Access
from flowledger.api.registry import RouteSpec
from infra.constructs.functions import LOG_RETENTION, FunctionDefaults, python_function

STAGE = "v1"


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
    ) -> None:
        super().__init__(scope, construct_id)
        access_logs = logs.LogGroup(self, "AccessLogs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.RETAIN)
        self.rest_api = apigw.RestApi(
            self,
            "RestApi",
            rest_api_name=f"{prefix}-api",
            endpoint_types=[apigw.EndpointType.REGIONAL],
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
                metrics_enabled=True,
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # request bodies may hold PHI: never log them
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
        Validations.of(self.rest_api).acknowledge(
            Acknowledgment(
                id="AwsSolutions-APIG3",
                reason="WAF is attached per environment by the operator; the API has no public write "
                "route without a token or SigV4 signature.",
            ),
            Acknowledgment(
                id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AmazonAPIGatewayPushToCloudWatchLogs]",
                reason="API Gateway's account-level logging role is the AWS-managed push-to-logs policy.",
            ),
            Acknowledgment(
                id="AwsSolutions-COG4",
                reason="Client routes use a JWT Lambda authorizer for an external OIDC issuer; admin "
                "routes use IAM. Cognito is not the identity provider.",
            ),
        )

    def add_routes(self, routes: list[RouteSpec], function: lambda_.IFunction, stream: bool = False) -> None:
        """Expose each route on the API, integrated with ``function`` and guarded by its access.

        ``stream`` sends the response through as the function writes it (response streaming), with
        the longer integration timeout streaming allows.
        """
        integration = (
            apigw.LambdaIntegration(
                function, response_transfer_mode=apigw.ResponseTransferMode.STREAM, timeout=Duration.minutes(5)
            )
            if stream
            else apigw.LambdaIntegration(function)
        )
        for route in routes:
            resource = self.rest_api.root.resource_for_path(route.path)
            method = resource.add_method(
                route.method, integration, request_validator=self._validator, **self._auth(route.access)
            )
            if route.access is Access.PUBLIC:
                Validations.of(method).acknowledge(
                    Acknowledgment(id="AwsSolutions-APIG4", reason=f"{route.path} is deliberately public.")
                )

    def _auth(self, access: Access) -> dict[str, object]:
        if access is Access.JWT:
            return {"authorization_type": apigw.AuthorizationType.CUSTOM, "authorizer": self.authorizer}
        if access is Access.IAM:
            return {"authorization_type": apigw.AuthorizationType.IAM}
        return {"authorization_type": apigw.AuthorizationType.NONE}
