"""The two layers every function carries: the flowledger package and its dependencies."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.constructs.functions import ARCHITECTURE, RUNTIME, core_layer_code


class Layers(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, dependencies_folder: Path) -> None:
        super().__init__(scope, construct_id)
        self.core = lambda_.LayerVersion(
            self,
            "Core",
            code=core_layer_code(),
            description="The flowledger package",
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
        )
        self.dependencies = lambda_.LayerVersion(
            self,
            "Dependencies",
            code=lambda_.Code.from_asset(str(dependencies_folder), exclude=[".complete"]),
            description="Runtime dependencies from pyproject.toml, built by pip for the Lambda platform",
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
        )

    @property
    def all(self) -> list[lambda_.ILayerVersion]:
        return [self.dependencies, self.core]
