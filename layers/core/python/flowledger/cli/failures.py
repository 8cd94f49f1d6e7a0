"""How a command fails: one line on stderr, ``flowledger: error: ...``, and its exit status.

Exit 2 when the command could not run (bad input, a missing file, no server, no credentials), 1 when a
check or an answer failed. :func:`flowledger.cli.app.main` turns the exceptions below into that line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from flowledger.errors import FlowledgerError

if TYPE_CHECKING:
    from botocore.exceptions import ClientError


class CommandFailed(FlowledgerError):
    """The command cannot go on for a reason outside the domain: a file, a connection, a data dir."""

    code = "command_failed"


def error_line(message: str) -> None:
    """Print ``flowledger: error: MESSAGE`` on stderr, on one line whatever the message holds."""
    print(f"flowledger: error: {' '.join(message.split())}", file=sys.stderr)


def fail(message: str, status: int = 2) -> int:
    """Print the error line and give the exit status (2: the command could not run; 1: it ran and failed)."""
    error_line(message)
    return status


def read_file(name: str) -> bytes:
    """The bytes of a file the user named; a one-line :class:`CommandFailed` when it cannot be read."""
    try:
        return Path(name).read_bytes()
    except OSError as exc:
        raise CommandFailed(f"{name}: {exc.strerror or type(exc).__name__}") from None


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, or ``CommandFailed`` naming the file and why (no traceback)."""
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise CommandFailed(f"{path}: {exc.strerror or type(exc).__name__}") from None


def aws_refusal(exc: ClientError, data_dir: str | None) -> str:
    """One line for an AWS error response, with the likely fix when a table or bucket is missing."""
    error = exc.response.get("Error", {})
    code, message = error.get("Code", "unknown"), error.get("Message", "")
    if code not in ("ResourceNotFoundException", "NoSuchBucket"):
        return f"AWS refused {exc.operation_name}: {code}: {message}"
    if data_dir is not None:
        return f"the store has no such table or bucket ({code} on {exc.operation_name}): restart `flowledger serve`"
    return (
        f"a table or bucket is missing ({code} on {exc.operation_name}): deploy the stack,"
        " or check AWS_REGION and FLOWLEDGER_RESOURCE_PREFIX"
    )
