"""`flowledger flows ...`: placeholder until this command lands."""

from __future__ import annotations

from typing import Any


def add_command(flows: Any) -> None:
    """Add this module's command to the `flows` group (none yet)."""
