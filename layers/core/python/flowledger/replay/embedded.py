"""The embedded store a real invoker runs one case against: moto in-process, every table provisioned.

This is development tooling: moto is a dev dependency (``pip install -e '.[dev]'``), so the real
invokers need the dev install, and this module is the only one of the replay package that reaches
moto or ``flowledger.local``. Each case gets a fresh store (about half a second), so no case sees
another's documents or flows. Flow capture is switched on, whatever the settings say: recording the
flow is what a replay is for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from flowledger.config import Settings
from flowledger.errors import InvalidInput
from flowledger.services import Services, build_services

# Any fixed pair: moto accepts every key, and fixed ones keep real credentials of the machine unused.
CREDENTIALS = ("flowledger-replay", "flowledger-replay-secret")


class InvokerUnavailable(InvalidInput):
    """A real invoker cannot run here: moto (the dev install) is missing."""


class _NoMetrics:
    """A replay's stdout is its report: the EMF records a flow write emits are for CloudWatch."""

    def emit(self, name: str, value: float, unit: str, dimensions: Mapping[str, str]) -> None:
        pass


def require_moto() -> None:
    """Raises :class:`InvokerUnavailable` unless moto can be imported."""
    try:
        import moto  # noqa: F401
    except ImportError:
        raise InvokerUnavailable(
            "the real invokers run the agents on an embedded store, which needs the dev install"
            " (pip install -e '.[dev]'); --invoker stub needs none"
        ) from None


@contextmanager
def embedded_services(settings: Settings, **overrides: Any) -> Iterator[Services]:
    """Services on a fresh in-process moto with every declared table, bucket and the data key."""
    require_moto()
    from moto import mock_aws

    from flowledger.local import moto_kms_ed25519, moto_transactions  # rollback as the dev server; Ed25519 keys
    from flowledger.store.provision import provision_all

    moto_transactions.install()

    moto_kms_ed25519.install()  # the ledger's Ed25519 signing key
    # A configured endpoint would send the calls past moto's patch to a real server.
    update = {"reasoning_flow_capture_enabled": True, "aws_endpoint_url": None, "kms_key_id": None, **overrides}
    with mock_aws():
        services = build_services(settings.model_copy(update=update), CREDENTIALS)
        services.metrics = _NoMetrics()
        settings = services.settings
        provision_all(services.aws, settings)
        yield services
