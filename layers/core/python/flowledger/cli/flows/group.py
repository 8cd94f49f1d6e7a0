"""The ``flows`` group: each of its commands adds itself from its own module."""

from __future__ import annotations

from typing import Any

from flowledger.cli.flows import checks, export, listing, otel, replay
from flowledger.cli.options import actions, command


def add_commands(commands: Any) -> None:
    """Add `flowledger flows export|lint|signature-check|replay|otel-export|stamp-listing`."""
    flows = actions(
        command(commands, "flows", "export closed reasoning flows, check, replay and trace them"),
        "flows_command",
    )
    for module in (checks, export, replay, otel, listing):
        module.add_command(flows)
