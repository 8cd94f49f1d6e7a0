"""The layers the functions carry: the flowledger package, and the dependencies split by what each function imports."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.constructs.functions import ARCHITECTURE, RUNTIME, core_layer_code
from infra.deps_layer import FUNCTION_LAYERS, LAYER_ROOTS

_DESCRIPTIONS = {
    "base": "Dependencies every function imports: powertools, pydantic, boto3, PyJWT",
    "pathways": "Embeddings and pathway matching (openai, numpy); the OTLP receiver's messages (protobuf)",
    "documents": "Document conversion: DuckDB, openpyxl, pypdf, and openai for knowledge embeddings",
    "chat": "The chat app: uvicorn, starlette, openai, numpy, DuckDB, sqlglot, PyMySQL",
}


class Layers(Construct):
    """The core layer and one layer per entry of ``LAYER_ROOTS``, handed out per function by ``for_function``."""

    def __init__(
        self, scope: Construct, construct_id: str, *, dependencies_folder: Path, only: tuple[str, ...] | None = None
    ) -> None:
        """``dependencies_folder`` holds one built layer per name (``<name>/python``): ``build_dependency_layers``;
        ``only`` makes just those (a stack of one function)."""
        super().__init__(scope, construct_id)
        self.core = lambda_.LayerVersion(
            self,
            "Core",
            code=core_layer_code(),
            description="The flowledger package",
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
        )
        self.dependencies = {
            name: lambda_.LayerVersion(
                self,
                f"Deps-{name}",
                code=lambda_.Code.from_asset(str(dependencies_folder / name)),
                description=_DESCRIPTIONS[name],
                compatible_runtimes=[RUNTIME],
                compatible_architectures=[ARCHITECTURE],
            )
            for name in LAYER_ROOTS
            if only is None or name in only
        }

    def for_function(self, name: str) -> list[lambda_.ILayerVersion]:
        """The layers of ``functions/<name>``: its dependency layers, then the flowledger package."""
        if name not in FUNCTION_LAYERS:
            raise KeyError(f"function {name!r} has no entry in infra.deps_layer.FUNCTION_LAYERS")
        return [*(self.dependencies[layer] for layer in FUNCTION_LAYERS[name]), self.core]

    @property
    def all(self) -> Layers:
        """What ``FunctionDefaults.layers`` takes: every layer, each function picking its own."""
        return self
