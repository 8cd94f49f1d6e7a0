"""The Flowledger stack: composes the capability constructs and nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Aws, CfnOutput, Environment, Stack
from constructs import Construct, Node

from flowledger.api.registry import CAPABILITY_MODULES, capability_routers, route_table
from flowledger.store.provision import UPLOAD_BUCKET
from flowledger.store.tables import physical_bucket_name
from infra.constructs.api import Api, Throttle, cors_origins_from
from infra.constructs.chat import Chat
from infra.constructs.concurrency import ReservedConcurrency
from infra.constructs.console import Console, TokenIssuer
from infra.constructs.continuity import ContinuitySwitches
from infra.constructs.data import BUCKET_SUFFIX, Data, DataAccess
from infra.constructs.diagnosis import DiagnosisAccess, grant_diagnosis
from infra.constructs.domain import Domain, DomainSettings
from infra.constructs.flow_capture import FLOW_CAPTURE_CONTEXT, FlowCapture
from infra.constructs.functions import FunctionDefaults, python_function
from infra.constructs.jobs import Jobs
from infra.constructs.layers import Layers
from infra.constructs.model_config import MODEL_CONTEXT, EmbeddingModels, ModelAccess
from infra.constructs.nag import acknowledge_basic_execution_role
from infra.constructs.operations import Operations, Watched
from infra.constructs.research_loop import LOOP_CONTEXT, ResearchLoopSwitches
from infra.constructs.stage import STAGE_CONTEXT, StagePolicy
from infra.constructs.trial_cleanup import LockedBucketCleanup
from infra.constructs.waf import Waf, WafSettings
from infra.constructs.witnesses import WitnessClients

CHECKPOINT_CONTEXT = "flowledger:checkpointMinutes"
# The audit chains (FLOWLEDGER_LEDGER_SHARDS): more than the writers that append at once, so that each leases a
# chain of its own (docs/audit-ledger.md, "Scale"). It may grow over a deployment's life, never shrink.
LEDGER_CHAINS_CONTEXT = "flowledger:ledgerChains"
# What each capability's function may touch; anything not named here is denied.
CAPABILITY_ACCESS: dict[str, DataAccess] = {
    "core": DataAccess(),
    "audit": DataAccess(read_tables=("ledger", "ledger_tiles"), read_buckets=("checkpoints",), read_ledger_key=True),
    "reasoning": DataAccess(
        write_tables=("flows", "steps", "consents", "rate_limits", "ledger", "pathways", "otlp_waiting", "subjects"),
        read_buckets=("artifacts",),  # pathway snapshots
        seal_fields=True,
    ),
    "research": DataAccess(write_tables=("backlog", "backlog_tickets", "claims_review", "ledger")),
    # Subjects, legal holds and erasure: the one function that may erase what the others wrote.
    "subjects": DataAccess(
        write_tables=(
            *("subjects", "flows", "steps", "otlp_waiting", "pathways", "consents", "rate_limits", "ledger"),
            *("runs", "documents", "knowledge"),  # a patient's chat sessions and uploads
        ),
        read_buckets=("documents", "artifacts"),
        # every version of a patient's uploads, and of the pathway snapshots that name their flows' pathways
        erase_buckets=("documents", "artifacts"),
        seal_fields=True,  # reads a subject's key for its pseudonym
    ),
    # Workspaces and documents; a conversation upload claims its chat session's header (runs).
    "documents": DataAccess(
        read_tables=("subjects",),  # an erased patient uploads nothing (the erasure's fence)
        write_tables=("workspaces", "documents", "runs", "knowledge", "ledger"),
        read_buckets=("documents",),
        write_buckets=("documents",),
    ),
}
# Continuity reads workspaces and documents (and a table's Parquet) to reauthorise and ground a turn.
# It records each turn's flow in process (chat/wiring.py): a patient's under their own key (subjects).
CHAT_ACCESS = DataAccess(
    read_tables=("knowledge", "workspaces", "documents"),
    write_tables=("runs", "flows", "steps", "ledger", "pathways", "subjects"),
    read_buckets=("documents", "artifacts"),  # artifacts: the pathway snapshots a closing flow's match reads
    seal_fields=True,
)
# The buffered chat routes list a caller's sessions and runs and cancel a run: the runs table alone.
CHAT_BUFFERED_ACCESS = DataAccess(write_tables=("runs",))
# The jobs run the research agents too (the backlog consumer): they search the knowledge base and the
# listed public workspaces, and record their flows' steps.
JOBS_ACCESS = DataAccess(
    read_tables=("workspaces",),
    write_tables=(
        "knowledge",  # and retention (subject_retention) erases a patient's uploads from it, their sessions from runs
        "runs",
        "documents",
        "ledger",
        "ledger_tiles",  # the chains' trees, grown by the checkpoint job
        "flows",
        "steps",
        "backlog",
        "backlog_tickets",
        "claims_review",
        "pathways",
        "otlp_waiting",  # OTLP spans whose wait for a parent is over (otlp_release)
        "subjects",  # a patient's span is sealed under the patient's key
        "consents",  # the erasure resume job finishes an erasure: the consent and rate-limit items go
        "rate_limits",
    ),
    read_buckets=("checkpoints", "artifacts", "documents"),
    write_buckets=("checkpoints", "artifacts"),
    erase_buckets=("documents", "artifacts"),  # retention: a patient's old uploads, snapshots naming their pathways
    sign_checkpoints=True,
    seal_fields=True,  # a waiting span is sealed whole
)


@dataclass(frozen=True)
class StackSettings:
    prefix: str
    jwks_url: str
    jwt_issuer: str
    jwt_audience: str
    dependencies_folder: Path
    lwa_layer_version: int
    cors_origins: str = ""  # comma-separated browser origins; none: the console's own distribution


class FlowledgerStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, settings: StackSettings, env: Environment) -> None:
        super().__init__(
            scope, construct_id, env=env, description="Flowledger: serverless backend for auditable agent chat"
        )
        stage = StagePolicy.from_context(self.node)
        model = ModelAccess.from_context(self.node)
        if not stage.is_trial and not model.reaches_a_server:
            # The offline model is for trials: a production chat answering with it would look like a broken product.
            raise ValueError(
                f"{STAGE_CONTEXT}=prod needs {MODEL_CONTEXT} to give secretArn, baseUrl or baseUrlParameter "
                f"(or deploy a trial with -c {STAGE_CONTEXT}=dev, which may use the offline model)"
            )
        data = Data(self, "Data", prefix=settings.prefix, stage=stage)
        layers = Layers(self, "Layers", dependencies_folder=settings.dependencies_folder)
        # flowledger:waf and flowledger:domain: the distribution and the API stage are made knowing them.
        waf, domain = WafSettings.from_context(self.node), DomainSettings.from_context(self.node)
        # Made before the API, whose CORS allows the console's origin; `console.serve(api)` finishes it.
        console = Console(
            self,
            "Console",
            prefix=settings.prefix,
            stage=stage,
            log_bucket=data.access_logs,
            log_key=data.key,
            waf=waf is not None,
            domain=domain,
        )
        # None configured: the console's own address (its custom name once it has one: the gateway's own
        # error answers can name one origin only, so the *.cloudfront.net address then fails CORS).
        cors_origins = cors_origins_from(settings.cors_origins) or [
            (domain and domain.console_origin) or console.origin
        ]
        data.allow_browser_uploads(cors_origins)  # a large upload's presigned PUT from the console
        defaults = FunctionDefaults(
            layers=layers.all,
            environment={
                "FLOWLEDGER_RESOURCE_PREFIX": settings.prefix,
                "FLOWLEDGER_BUCKET_SUFFIX": BUCKET_SUFFIX,
                "FLOWLEDGER_KMS_KEY_ID": data.key.key_arn,
                "FLOWLEDGER_LEDGER_SIGNING_KEY_ID": data.ledger_key.key_arn,
                # The name the ledger signs its checkpoints under: this account, region and deployment.
                "FLOWLEDGER_LEDGER_ORIGIN": f"flowledger/{Aws.ACCOUNT_ID}/{Aws.REGION}/{settings.prefix}",
                "FLOWLEDGER_LEDGER_SHARDS": str(ledger_chains(self.node)),
                "POWERTOOLS_METRICS_NAMESPACE": "Flowledger",
                "POWERTOOLS_LOG_LEVEL": "INFO",
                "FLOWLEDGER_CORS_ORIGINS": ",".join(cors_origins),
                # /health on every function says whether the chat has a model server or the offline model.
                "FLOWLEDGER_DEPLOYED_CHAT_MODEL": "server" if model.reaches_a_server else "offline",
            },
            log_key=data.key,
            log_removal=stage.removal,
            reserved_concurrency=ReservedConcurrency.from_context(self.node).by_function,
        )
        if stage.is_trial and data.locked_buckets:
            LockedBucketCleanup(self, "TrialCleanup", buckets=data.locked_buckets, defaults=defaults)
        console.add_token_claims(defaults)
        # flowledger:tokenIssuer=console-pool: the authorizer trusts the console pool's id tokens instead.
        issuer = console.token_issuer(
            self.node, external=TokenIssuer(settings.jwks_url, settings.jwt_issuer, settings.jwt_audience)
        )
        api = Api(
            self,
            "Api",
            prefix=settings.prefix,
            defaults=defaults,
            jwks_url=issuer.jwks_url,
            jwt_issuer=issuer.issuer,
            jwt_audience=issuer.audience,
            cors_origins=cors_origins,
            throttle=Throttle.from_context(self.node),
            waf=waf is not None,
        )
        self.capability_functions = {}
        for name in CAPABILITY_MODULES:
            routers = capability_routers(name)
            function = python_function(
                self,
                f"Function-{name}",
                name=name,
                defaults=defaults,
                description=f"REST routes of the {name} capability",
            )
            api.add_routes(route_table(*routers), function)
            data.grant(function, CAPABILITY_ACCESS[name])
            self.capability_functions[name] = function
        console.serve(api, physical_bucket_name(settings.prefix, UPLOAD_BUCKET, BUCKET_SUFFIX))
        # The web ACLs (the API stage's; the distribution's, made in us-east-1 or named), the API's custom
        # domain and the DNS records (infra/constructs/waf.py, domain.py).
        if waf is not None:
            Waf(
                self,
                "Waf",
                settings=waf,
                prefix=settings.prefix,
                rest_api=api.rest_api,
                distribution=console.distribution,
            )
        if domain is not None:
            Domain(self, "Domain", settings=domain, rest_api=api.rest_api, distribution=console.distribution)
        chat = Chat(self, "Chat", defaults=defaults, api=api, lwa_layer_version=settings.lwa_layer_version)
        data.grant(chat.function, CHAT_ACCESS)
        data.grant(chat.buffered_function, CHAT_BUFFERED_ACCESS)
        # The diagnosis executor runs in the chat function: it alone reads the allowed logs and database.
        grant_diagnosis(chat.function, DiagnosisAccess.from_context(self.node))
        ContinuitySwitches.from_context(self.node).apply(chat.function)
        # flowledger:checkpointMinutes (1-60, default 5): the longest an audit event waits for a signed checkpoint.
        jobs = Jobs(
            self,
            "Jobs",
            prefix=settings.prefix,
            defaults=defaults,
            stage=stage,
            checkpoint_minutes=int(self.node.try_get_context(CHECKPOINT_CONTEXT) or 5),
        )
        data.grant(jobs.function, JOBS_ACCESS)
        # flowledger:witnesses and flowledger:witnessQuorum: where the checkpoint job submits each checkpoint.
        WitnessClients.from_context(self.node).apply(jobs.function)
        loop = ResearchLoopSwitches.from_context(self.node)
        if loop.enabled and not model.reaches_a_server:
            # The offline model would answer real rows, and its confident answers would seed pathways.
            raise ValueError(
                f"{LOOP_CONTEXT}=true needs {MODEL_CONTEXT} to give secretArn, baseUrl or baseUrlParameter"
            )
        capture = FlowCapture.from_context(self.node)
        if loop.enabled and not capture.enabled:
            # The loop's agents are judged, and pathways mined, from the flows they record.
            raise ValueError(f"{LOOP_CONTEXT}=true needs {FLOW_CAPTURE_CONTEXT} on (it is by default)")
        loop.apply(jobs.function)
        # Every agent that runs in AWS records its flows: the chat's executors and the research agents.
        capture.apply(chat.function, jobs.function)
        EmbeddingModels.from_context(self.node, model).apply(
            model,
            chat_functions=(chat.function, jobs.function),  # the chat, and the research agents in the jobs
            pathway_functions=(self.capability_functions["reasoning"], jobs.function),
            # The research agents in the jobs search the knowledge base as the chat does.
            knowledge_functions=(self.capability_functions["documents"], chat.function, jobs.function),
        )
        Operations(
            self,
            "Operations",
            prefix=settings.prefix,
            stage=stage,
            watched=Watched(
                functions={
                    "authorizer": api.authorizer_function,
                    **self.capability_functions,
                    "chat": chat.function,
                    "chat-buffered": chat.buffered_function,
                    "jobs": jobs.function,
                    "console-deploy": console.deploy_function,
                    "console-token-claims": console.token_claims_function,
                },
                rest_api=api.rest_api,
                tables=data.tables,
                dead_letters=jobs.dead_letters,
                job_failures=jobs.failures,
            ),
        )
        self.data = data
        CfnOutput(self, "ApiUrl", value=api.rest_api.url)
        acknowledge_basic_execution_role(self)


def ledger_chains(node: Node) -> int:
    """``flowledger:ledgerChains``: 1 to 4096 audit chains, 16 when unset; anything else fails the synth."""
    value = node.try_get_context(LEDGER_CHAINS_CONTEXT)
    if value is None or value == "":
        return 16
    whole = (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and value.isdigit())
    chains = int(value) if whole else 0
    if not 1 <= chains <= 4096:
        raise ValueError(f"{LEDGER_CHAINS_CONTEXT} must be a whole number from 1 to 4096, not {value!r}")
    return chains
