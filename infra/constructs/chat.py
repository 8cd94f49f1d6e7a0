"""The streaming chat function: the ASGI app under Lambda Web Adapter, behind streaming API routes."""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from flowledger.api.access import access_for
from flowledger.api.chat_app import CHAT_ROUTES, STREAMING_ROUTES
from flowledger.api.registry import RouteSpec
from infra.constructs.api import Api
from infra.constructs.functions import FunctionDefaults, python_function

LWA_ACCOUNT = "753240598075"  # the account that publishes the Lambda Web Adapter layers
# The adapter is a native binary: its layer must match the functions' architecture (x86_64).
APP_PORT = "8080"


class Chat(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, defaults: FunctionDefaults, api: Api, lwa_layer_version: int
    ) -> None:
        super().__init__(scope, construct_id)
        region = Stack.of(self).region
        adapter = lambda_.LayerVersion.from_layer_version_arn(
            self,
            "WebAdapter",
            f"arn:aws:lambda:{region}:{LWA_ACCOUNT}:layer:LambdaAdapterLayerX86:{lwa_layer_version}",
        )
        self.function = python_function(
            self,
            "Function",
            name="chat",
            defaults=defaults,
            handler="run.sh",
            extra_layers=[adapter],
            description="Streaming chat: the ASGI app under Lambda Web Adapter",
            timeout=Duration.minutes(5),
            memory_size=1024,
            environment={
                "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
                "AWS_LWA_INVOKE_MODE": "response_stream",
                "AWS_LWA_PORT": APP_PORT,
                "AWS_LWA_READINESS_CHECK_PATH": "/api/chat",
            },
        )
        routes = [RouteSpec(path, method, access_for(path)) for path, method in CHAT_ROUTES]
        api.add_routes([r for r in routes if (r.path, r.method) not in STREAMING_ROUTES], self.function)
        api.add_routes([r for r in routes if (r.path, r.method) in STREAMING_ROUTES], self.function, stream=True)
