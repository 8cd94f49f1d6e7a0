"""The witness stack (``-c flowledger:witness='{"name": ..., "logs": [...]}'``): a witness of Flowledger logs,
deployable apart from the ledger it witnesses (another account, the auditor's)."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Environment, Stack
from constructs import Construct

from infra.constructs.functions import FunctionDefaults
from infra.constructs.layers import Layers
from infra.constructs.nag import acknowledge_basic_execution_role
from infra.constructs.stage import StagePolicy
from infra.constructs.witness import Witness
from infra.constructs.witnesses import WitnessSettings
from infra.deps_layer import FUNCTION_LAYERS


class WitnessStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        settings: WitnessSettings,
        dependencies_folder: Path,
        env: Environment,
    ) -> None:
        super().__init__(scope, construct_id, env=env, description=f"Flowledger witness {settings.name}")
        stage = StagePolicy.from_context(self.node)
        layers = Layers(self, "Layers", dependencies_folder=dependencies_folder, only=FUNCTION_LAYERS["witness"])
        defaults = FunctionDefaults(
            layers=layers.all,
            environment={"FLOWLEDGER_RESOURCE_PREFIX": prefix, "POWERTOOLS_METRICS_NAMESPACE": "Flowledger"},
            log_removal=stage.removal,
        )
        self.witness = Witness(self, "Witness", prefix=prefix, settings=settings, defaults=defaults, stage=stage)
        acknowledge_basic_execution_role(self)
