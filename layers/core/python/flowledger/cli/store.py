"""The store a command works on: a running dev server's embedded one (``--data-dir``), or AWS.

Commands call these through the module (``store.services(...)``), so a test can put its own in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowledger.cli.failures import CommandFailed

if TYPE_CHECKING:
    from flowledger.local.datadir import LocalEndpoints
    from flowledger.services import Services


def services(data_dir: str | None) -> Services:
    """Services bound to a local server's embedded store, or to AWS when no data dir is given."""
    from flowledger.config import load_settings
    from flowledger.services import build_services

    if data_dir is None:
        return build_services(load_settings())
    from flowledger.local.datadir import EMBEDDED_CREDENTIALS

    endpoints = local_endpoints(data_dir)
    settings = load_settings(
        aws_endpoint_url=endpoints.aws_endpoint_url,
        aws_region=endpoints.region,
        resource_prefix=endpoints.resource_prefix,
        bucket_suffix=endpoints.bucket_suffix,
    )
    return build_services(settings, EMBEDDED_CREDENTIALS)


def local_endpoints(data_dir: str) -> LocalEndpoints:
    """Where the server running on ``data_dir`` listens (its ``local.json``); one line when unreadable."""
    from flowledger.local.datadir import DataDir

    directory = DataDir(Path(data_dir))
    try:
        return directory.endpoints()
    except (OSError, ValueError, TypeError) as exc:  # unreadable, not JSON, or not the fields serve writes
        raise CommandFailed(
            f"{directory.path / 'local.json'} is unreadable ({type(exc).__name__}); restart `flowledger serve`"
        ) from None


class _NoMetrics:
    """The console's stdout is the command's output: EMF records there are for CloudWatch in a Lambda."""

    def emit(self, name: str, value: float, unit: str, dimensions: Any) -> None:
        pass


def agent_services(data_dir: str | None) -> Services:
    """The store's services, with the metrics a write or a job emits kept off stdout (the table or the JSON)."""
    bound = services(data_dir)
    bound.metrics = _NoMetrics()
    return bound


def agent_model(bound: Services) -> Any:
    """The chat model the settings configure (the offline model without a key or server)."""
    from flowledger.llm.factory import chat_model_for

    return chat_model_for(bound.settings)
