"""``python -m flowledger.cli``: the console script, for environments without it on PATH."""

import sys

from flowledger.cli.app import main

sys.exit(main())
