"""The ``flowledger`` console script: one module per command group, the shared options in :mod:`.options`.

Commands that touch the store run against a local dev server when given ``--data-dir`` (or
``FLOWLEDGER_DATA_DIR``), and against AWS through the standard AWS environment otherwise.

Every command checks its whole input before it writes anything. An expected failure (a missing
file, no server, no AWS credentials, an unknown id) ends it with one line on stderr,
``flowledger: error: ...``, and exit status 2; a check that ran and failed exits 1.
"""

from flowledger.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
