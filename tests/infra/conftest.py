"""One synthesis of the real app (dependencies layer build skipped, a test model named) shared by the infra tests."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from tests.infra.synth import app_with


@pytest.fixture(scope="session")
def app() -> App:
    app = app_with({})
    app.synth()  # runs cdk-nag: raises on any unacknowledged finding
    return app


@pytest.fixture(scope="session")
def stack(app: App) -> Stack:
    child = app.node.find_child("Flowledger")
    assert isinstance(child, Stack)
    return child


@pytest.fixture(scope="session")
def template(stack: Stack) -> Template:
    return Template.from_stack(stack)


@pytest.fixture(scope="session")
def resources(template: Template) -> dict[str, Any]:
    return template.to_json()["Resources"]
