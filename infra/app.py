"""CDK app entry (``cdk.json``: ``python infra/app.py``). Runs cdk-nag AwsSolutions on every synth."""

from __future__ import annotations

import json
import os
from pathlib import Path

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks

from infra.constructs.witnesses import WitnessSettings
from infra.deps_layer import build_dependency_layers, placeholder_layers
from infra.stack import FlowledgerStack, StackSettings
from infra.witness_stack import WitnessStack

ROOT = Path(__file__).resolve().parents[1]


def build_app(skip_dependencies_layer: bool | None = None, outdir: Path | None = None) -> App:
    """The app with its one stack; ``skip_dependencies_layer`` is for synths that never deploy, ``outdir``
    for synths that must not share ``cdk.out`` (tests running in parallel)."""
    # The `cdk` CLI passes cdk.json's context and an output folder itself; `python infra/app.py`
    # reads the context here (the CLI's values win) and writes to cdk.out like the CLI would.
    if outdir is None and "CDK_OUTDIR" not in os.environ:
        outdir = ROOT / "cdk.out"
    app = App(
        context=json.loads((ROOT / "cdk.json").read_text())["context"],
        outdir=None if outdir is None else str(outdir),
    )
    context = app.node.try_get_context
    if skip_dependencies_layer is None:
        skip_dependencies_layer = str(context("flowledger:skipDependenciesLayerBuild")).lower() == "true"
    # One folder holding every dependency layer (<name>/python), built from requirements/runtime.lock.
    dependencies = placeholder_layers(ROOT) if skip_dependencies_layer else build_dependency_layers(ROOT)
    settings = StackSettings(
        prefix=context("flowledger:resourcePrefix") or "flowledger",
        jwks_url=context("flowledger:jwksUrl"),
        jwt_issuer=context("flowledger:jwtIssuer"),
        jwt_audience=context("flowledger:jwtAudience") or "flowledger",
        dependencies_folder=dependencies,
        lwa_layer_version=int(context("flowledger:lwaLayerVersion") or 27),
        cors_origins=str(context("flowledger:corsOrigins") or ""),
    )
    env = Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION"))
    FlowledgerStack(app, "Flowledger", settings=settings, env=env)
    # flowledger:witness: a witness of Flowledger logs in a second stack (`cdk deploy FlowledgerWitness`).
    witness = WitnessSettings.from_context(app.node)
    if witness is not None:
        WitnessStack(
            app,
            "FlowledgerWitness",
            prefix=settings.prefix,
            settings=witness,
            dependencies_folder=dependencies,
            env=env,
        )
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


if __name__ == "__main__":
    build_app().synth()
