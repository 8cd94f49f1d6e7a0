"""Hypothesis profiles: the same properties everywhere, as many examples as the run affords.

``ci`` (the default; ``make test`` and CI run it) bounds the examples; ``HYPOTHESIS_PROFILE=thorough``
searches twenty times deeper for a local deep run. Neither has a deadline: on a shared machine, with a
test on every core, a slow example is noise, never a finding.
"""

from __future__ import annotations

import os

from hypothesis import settings

HYPOTHESIS_DEFAULT_EXAMPLES = 100  # hypothesis's own default, which examples() scales from

settings.register_profile("ci", max_examples=50, deadline=None, print_blob=True)
settings.register_profile("thorough", max_examples=1000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def examples(count: int) -> int:
    """``count`` examples, as a test asks for them on hypothesis's default run, scaled to the loaded profile."""
    return max(10, count * settings.default.max_examples // HYPOTHESIS_DEFAULT_EXAMPLES)
