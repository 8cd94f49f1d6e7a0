"""The chat functions: one ASGI app under Lambda Web Adapter, streaming on one route, buffered on the rest.

Lambda Web Adapter's ``AWS_LWA_INVOKE_MODE`` applies to every response of a function: in
``response_stream`` mode it answers each invocation as a stream (its maintainer, in
aws/aws-lambda-web-adapter issue #536: "it will affect all responses. Only use it when you need
response streaming"). API Gateway only reads a stream from an integration that asks for one
(``ResponseTransferMode.STREAM``), so the buffered routes (sessions, runs, cancel) cannot share the
streaming function: they run the same code in a second function whose adapter buffers, behind
ordinary Lambda integrations.
"""

from __future__ import annotations

from aws_cdk import Aws, CfnCondition, Duration, Fn, Token
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from flowledger.api.access import access_for
from flowledger.api.chat_app import CHAT_ROUTES, STREAMING_ROUTES
from flowledger.api.routes import RouteSpec
from infra.constructs.api import Api
from infra.constructs.functions import FunctionDefaults, python_function

# Who publishes the adapter layer (its README, "Zip Packages"): one account for every commercial region,
# and in the aws-cn partition one account per region. Nothing is published in aws-us-gov (issue #277): a
# GovCloud deployment would fail on this layer, and needs the layer copied into an account of its own.
# The buffered function reports itself apart: its logs, metrics, alarms and reserved concurrency.
BUFFERED_SERVICE = "chat-buffered"
LWA_ACCOUNT = "753240598075"
LWA_CHINA_ACCOUNTS = {"cn-north-1": "041581134020", "cn-northwest-1": "069767869989"}
# The adapter is a native binary: its layer must match the functions' architecture (x86_64).
LWA_LAYER = "LambdaAdapterLayerX86"
APP_PORT = "8080"
STREAM_MODE = "response_stream"
BUFFERED_MODE = "buffered"
# API Gateway waits 29 s for a buffered integration: a longer invocation would answer no one.
BUFFERED_TIMEOUT = Duration.seconds(29)


def adapter_layer_arn(scope: Construct, version: int) -> str:
    """The adapter layer's ARN in the deployment's partition and region, its publisher picked at deploy time.

    The region is a deploy-time value when the stack names no environment, so the China accounts are
    chosen by conditions on ``AWS::Region`` rather than here.
    """
    account = LWA_ACCOUNT
    for region, china_account in LWA_CHINA_ACCOUNTS.items():
        condition = CfnCondition(scope, f"AdapterIn-{region}", expression=Fn.condition_equals(Aws.REGION, region))
        account = Token.as_string(Fn.condition_if(condition.logical_id, china_account, account))
    return f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{account}:layer:{LWA_LAYER}:{version}"


class Chat(Construct):
    """``function`` streams ``STREAMING_ROUTES``; ``buffered_function`` answers the other chat routes whole.

    Both run ``functions/chat/run.sh`` (the same code and layers); only the adapter's invoke mode, their
    sizes and what the stack grants them differ.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, defaults: FunctionDefaults, api: Api, lwa_layer_version: int
    ) -> None:
        super().__init__(scope, construct_id)
        adapter = lambda_.LayerVersion.from_layer_version_arn(
            self, "WebAdapter", adapter_layer_arn(self, lwa_layer_version)
        )
        self.function = self._app_function(
            "Function",
            defaults,
            adapter,
            mode=STREAM_MODE,
            description="Streaming chat: the ASGI app under Lambda Web Adapter",
            timeout=Duration.minutes(5),
            memory_size=1024,
        )
        # Reads and cancels a caller's runs: no model, no grounding, no diagnosis, so less memory.
        self.buffered_function = self._app_function(
            "BufferedFunction",
            defaults,
            adapter,
            mode=BUFFERED_MODE,
            description="Chat sessions, runs and cancel: the ASGI app under Lambda Web Adapter, buffered",
            timeout=BUFFERED_TIMEOUT,
            memory_size=512,
            # Its logs and metrics apart from the streaming function's.
            service=BUFFERED_SERVICE,
        )
        routes = [RouteSpec(path, method, access_for(path)) for path, method in CHAT_ROUTES]
        buffered = [r for r in routes if (r.path, r.method) not in STREAMING_ROUTES]
        api.add_routes(buffered, self.buffered_function)
        api.add_routes([r for r in routes if (r.path, r.method) in STREAMING_ROUTES], self.function, stream=True)

    def _app_function(
        self,
        construct_id: str,
        defaults: FunctionDefaults,
        adapter: lambda_.ILayerVersion,
        *,
        mode: str,
        description: str,
        timeout: Duration,
        memory_size: int,
        service: str | None = None,
    ) -> lambda_.Function:
        # name="chat": functions/chat's code and the chat layers (infra.deps_layer.FUNCTION_LAYERS) for both.
        return python_function(
            self,
            construct_id,
            name="chat",
            defaults=defaults,
            handler="run.sh",
            extra_layers=[adapter],
            description=description,
            timeout=timeout,
            memory_size=memory_size,
            environment={
                "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
                "AWS_LWA_INVOKE_MODE": mode,
                "AWS_LWA_PORT": APP_PORT,
                "AWS_LWA_READINESS_CHECK_PATH": "/api/chat",
                **({"POWERTOOLS_SERVICE_NAME": service} if service else {}),
            },
        )
