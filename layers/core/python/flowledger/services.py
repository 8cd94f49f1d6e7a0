"""The collaborators a function needs, built once per process from the settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache, cached_property
from typing import TYPE_CHECKING

from flowledger.config import Settings, load_settings
from flowledger.ledger.checkpoint_notes import CheckpointSigner
from flowledger.ledger.leases import ChainLeases
from flowledger.ledger.store import Ledger
from flowledger.metrics import EmfMetrics, MetricsSink
from flowledger.store.aws import AwsClients
from flowledger.store.envelope import FieldSealer

if TYPE_CHECKING:
    from flowledger.llm.embeddings import EmbeddingModel
    from flowledger.subjects.keys import SubjectKeys
    from flowledger.subjects.sealing import SubjectSealer


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Services:
    """Per-process collaborators; the stateful ones (head cache, data keys) are made once, on first use."""

    settings: Settings
    aws: AwsClients
    clock: Callable[[], datetime] = field(default=utc_now)
    metrics: MetricsSink = field(default_factory=EmfMetrics)

    @cached_property
    def ledger(self) -> Ledger:
        settings = self.settings
        dynamodb, leases = self.aws.dynamodb, None
        if settings.ledger_lease_seconds:
            leases = ChainLeases(dynamodb, self.aws.table_name("ledger_leases"), settings.ledger_lease_seconds)
        table = self.aws.table_name("ledger")
        return Ledger(dynamodb, table, settings.ledger_shards, lambda: self.clock(), leases=leases)

    @cached_property
    def pathway_embeddings(self) -> EmbeddingModel:
        from flowledger.llm.embeddings import pathway_embeddings_for  # only the pathway routes and jobs embed

        return pathway_embeddings_for(self.settings)

    @cached_property
    def checkpoint_signer(self) -> CheckpointSigner:
        """Signs checkpoints as notes; its verifier key is read from KMS once per process."""
        settings = self.settings
        return CheckpointSigner(self.aws.kms, settings.ledger_signing_key_id, settings.ledger_origin)

    @cached_property
    def subject_keys(self) -> SubjectKeys:
        """Subjects' data keys and pseudonyms, and the fence an erasure raises."""
        from flowledger.subjects.keys import SubjectKeys

        aws = self.aws
        return SubjectKeys(
            aws.dynamodb, aws.kms, aws.table_name("subjects"), self.settings.data_key_id, lambda: self.clock()
        )

    @cached_property
    def sealer(self) -> SubjectSealer:
        """Seals step fields: under the flow's patient's own key (erasable), else under a data key per flow."""
        from flowledger.subjects.sealing import SubjectSealer

        fields = FieldSealer(self.aws.kms, self.settings.data_key_id)
        return SubjectSealer(self.aws.dynamodb, self.aws.table_name("flows"), fields, self.subject_keys)


def build_services(settings: Settings, static_credentials: tuple[str, str] | None = None) -> Services:
    """Wire the services for one process; nothing touches the network until first use."""
    return Services(settings=settings, aws=AwsClients(settings, static_credentials))


@cache
def bootstrap() -> Services:
    """The services of a Lambda function: built on the first invocation, reused while warm."""
    return build_services(load_settings())
