"""``flowledger serve``: every route, the embedded AWS endpoint and the scheduler in one process."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_lambda_powertools.event_handler import content_types
from aws_lambda_powertools.event_handler.api_gateway import Response

from flowledger import __version__
from flowledger.api.app import build_resolver
from flowledger.api.chat_app import create_app
from flowledger.api.registry import REST_CAPABILITIES
from flowledger.api.tokens import SCOPES, TokenVerifier, mint_token
from flowledger.config import Settings, load_settings
from flowledger.errors import ConfigurationError
from flowledger.jobs import JOBS
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.local.datadir import LOCAL_AUDIENCE, LOCAL_ISSUER, DataDir, LocalEndpoints
from flowledger.local.gateway import GatewayResolver, LocalGateway
from flowledger.local.moto_server import LockedMotoServer
from flowledger.local.scheduler import LocalScheduler
from flowledger.local.sigv4 import SigV4Verifier
from flowledger.services import Services, build_services
from flowledger.store.provision import provision_all
from flowledger.store.tables import BUCKETS, TABLES

# moto accepts any credentials; fixed ones keep the embedded store independent of ~/.aws.
EMBEDDED_CREDENTIALS = ("flowledger-local", "flowledger-local-secret")
DEMO_DOCUMENTS = Path(__file__).parent / "demo_documents"
DEV_TOKEN_TTL_SECONDS = 12 * 3600


@dataclass
class LocalStack:
    """Everything ``serve`` started, so it can be stopped in one call."""

    app: LocalGateway
    services: Services
    moto: LockedMotoServer
    scheduler: LocalScheduler
    endpoints: LocalEndpoints

    def stop(self) -> None:
        self.scheduler.stop()
        self.moto.stop()


def ensure_port_free(host: str, port: int) -> None:
    """Fail with one clear line before anything starts when the port is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            raise ConfigurationError(f"port {port} on {host} is already in use; pick another with --port") from None


def start_local_stack(data_dir: Path, host: str, port: int, **settings_overrides: Any) -> LocalStack:
    """Start the embedded AWS endpoint, create the declared resources and build the ASGI app."""
    base_url = f"http://{host}:{port}"
    moto = LockedMotoServer(host="127.0.0.1")
    aws_endpoint = moto.start()
    try:
        settings = load_settings(
            **{
                "aws_endpoint_url": aws_endpoint,
                "jwks_url": f"{base_url}/.well-known/jwks.json",
                "jwt_issuer": LOCAL_ISSUER,
                "jwt_audience": LOCAL_AUDIENCE,
                **settings_overrides,
            }
        )
        directory = DataDir(data_dir)
        directory.ensure(settings.aws_region)
        services = build_services(settings, EMBEDDED_CREDENTIALS)
        provision_all(services.aws, settings.aws_region, settings.data_key_id)
        seed_demo_documents(services)
        endpoints = LocalEndpoints(
            base_url=base_url,
            aws_endpoint_url=aws_endpoint,
            region=settings.aws_region,
            resource_prefix=settings.resource_prefix,
            bucket_suffix=settings.bucket_suffix,
            tables={t.name: services.aws.table_name(t.name) for t in TABLES},
            buckets={b.name: services.aws.bucket_name(b.name) for b in BUCKETS},
        )
        directory.write_endpoints(endpoints)
        app = _gateway(settings, services, directory)
        scheduler = LocalScheduler(JOBS, services)
    except BaseException:
        moto.stop()
        raise
    return LocalStack(app=app, services=services, moto=moto, scheduler=scheduler, endpoints=endpoints)


def _gateway(settings: Settings, services: Services, directory: DataDir) -> LocalGateway:
    rest = build_resolver([r for routers in REST_CAPABILITIES.values() for r in routers], GatewayResolver)
    rest.enable_swagger(path="/docs", title="Flowledger", version=__version__)

    @rest.get("/openapi.json", include_in_schema=False)
    def openapi() -> Response[str]:
        return Response(
            200, content_types.APPLICATION_JSON, rest.get_openapi_json_schema(title="Flowledger", version=__version__)
        )

    # Startup context is copied into every request's context by HttpResolverLocal.
    rest.append_context(services=services)
    assert settings.jwks_url and settings.jwt_issuer
    tokens = TokenVerifier(settings.jwks_url, settings.jwt_issuer, settings.jwt_audience)
    sigv4 = SigV4Verifier(directory.admin_credentials())
    jwks = directory.jwks()
    gateway = LocalGateway(rest, tokens, sigv4, public_routes={"/.well-known/jwks.json": lambda: jwks})
    gateway.mount("/api/chat", create_app(lambda: services))
    return gateway


def seed_demo_documents(services: Services) -> int:
    """Index the demo documents shipped with the package (a fresh store starts empty)."""
    index = KnowledgeIndex(services)
    documents = sorted(DEMO_DOCUMENTS.glob("*.md"))
    for path in documents:
        index.add_document(path.name, path.read_bytes())
    return len(documents)


def development_token(directory: DataDir) -> str:
    """A token with every scope for the local developer (printed by ``serve``)."""
    return mint_token(
        private_key_pem=directory.private_key_pem(),
        kid=directory.key_id(),
        issuer=LOCAL_ISSUER,
        audience=LOCAL_AUDIENCE,
        sub="dev-user",
        scopes=sorted(SCOPES),
        ttl_seconds=DEV_TOKEN_TTL_SECONDS,
    )


def serve(data_dir: Path, host: str, port: int) -> None:
    """Run the dev server until Ctrl-C."""
    import uvicorn  # a dev dependency: never imported by a Lambda function

    ensure_port_free(host, port)
    stack = start_local_stack(data_dir, host, port)
    try:
        _print_banner(stack, DataDir(data_dir))
        stack.scheduler.start()
        config = uvicorn.Config(stack.app, host=host, port=port, lifespan="off", log_level="warning")
        uvicorn.Server(config).run()
    finally:
        stack.stop()
        print("flowledger: stopped", flush=True)


def _print_banner(stack: LocalStack, directory: DataDir) -> None:
    settings = stack.services.settings
    credentials = directory.admin_credentials()
    model = (
        "offline model (deterministic, no network): set OPENAI_API_KEY or OPENAI_BASE_URL to use a real one"
        if settings.uses_offline_model
        else f"{settings.chat_model} via the OpenAI API"
    )
    lines = [
        f"flowledger {__version__} serving on {stack.endpoints.base_url}",
        f"  docs             {stack.endpoints.base_url}/docs  (OpenAPI: /openapi.json)",
        f"  embedded AWS     {stack.endpoints.aws_endpoint_url}  (tables and buckets in {directory.path}/local.json)",
        f"  model            {model}",
        f"  scheduler        {', '.join(f'{j.name} {j.schedule}' for j in JOBS)}",
        f"  admin (SigV4)    access key {credentials.access_key_id}, region {credentials.region},"
        f" service execute-api  ({directory.path}/admin-credentials.json)",
        "  dev token (all scopes, 12 h):",
        f"    {development_token(directory)}",
        "Ctrl-C stops everything.",
    ]
    print("\n".join(lines), flush=True)
