"""The real CDK app synthesized with extra context, as ``cdk -c key=value`` would give it.

The CLI's CDK_CONTEXT_JSON cannot be used in-process (the jsii runtime read its environment at start),
so the app's ``App`` is swapped for one that adds the context to cdk.json's.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from aws_cdk import App


@cache
def outdir() -> Path:
    """This test process's own cloud assembly folder: parallel workers never write one ``cdk.out`` at once."""
    folder = Path(tempfile.mkdtemp(prefix="flowledger-cdk-out-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


# A production stage needs a model server (the synth fails without one); the tests' stacks name one, and
# one console origin for CORS (the default, the console's own distribution, is synthesized where a test
# says so). A test of the offline model's stack passes ``{MODEL_CONTEXT: None}`` with a dev stage.
MODEL_CONTEXT = "flowledger:model"
TEST_MODEL = {"secretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:flowledger/openai-AbCdEf"}
TEST_CONSOLE_ORIGIN = "https://console.example.com"
TEST_CONTEXT = {MODEL_CONTEXT: TEST_MODEL, "flowledger:corsOrigins": TEST_CONSOLE_ORIGIN}


def app_with_context(context: dict[str, Any], folder: Path) -> App:
    """The real app (dependencies layer build skipped) with ``context`` on top of cdk.json's, synthesizing into
    ``folder``. No pytest here: ``scripts/check_templates.py`` builds its templates with it too."""
    from infra import app as cdk_app

    class AppWithContext(App):
        def __init__(self, *, context: dict[str, Any], **options: Any) -> None:
            super().__init__(context={**context, **extra}, **options)

    extra = context
    original = cdk_app.__dict__["App"]
    setattr(cdk_app, "App", AppWithContext)  # noqa: B010 (infra.app's own name, swapped for this build)
    try:
        return cdk_app.build_app(skip_dependencies_layer=True, outdir=folder)
    finally:
        setattr(cdk_app, "App", original)  # noqa: B010


def app_with(context: dict[str, Any]) -> App:
    """The real app with ``context`` on top of cdk.json's and ``TEST_CONTEXT``, in this process's ``outdir``."""
    return app_with_context({**TEST_CONTEXT, **context}, outdir())


def resources_with(context: dict[str, Any]) -> dict[str, Any]:
    """The Flowledger stack's resources with ``context``; the synth runs cdk-nag and raises on a finding."""
    return dict(app_with(context).synth().get_stack_by_name("Flowledger").template["Resources"])


# CDK's own BucketDeployment handler (it copies the console's files to S3) runs on CDK's runtime with the
# runtime's boto3; every other function is ours.
CDK_DEPLOYMENT_HANDLER = "CustomCDKBucketDeployment"


def own_functions(resources: dict[str, Any]) -> dict[str, Any]:
    """The template's Lambda functions that run Flowledger's code (not CDK's deployment handler)."""
    return {
        key: value
        for key, value in resources.items()
        if value["Type"] == "AWS::Lambda::Function" and not key.startswith(CDK_DEPLOYMENT_HANDLER)
    }
