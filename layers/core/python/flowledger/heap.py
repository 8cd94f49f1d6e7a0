"""What lives as long as the process: kept out of the cyclic garbage collector's full passes.

A function's process imports botocore's models, pydantic's validators and the routes once, and keeps
them for its whole life; so does the embedded store with the items it restored. Python's full (oldest
generation) collection walks every one of them each time it runs, which on this machine is 100-250 ms
in the middle of whichever request triggered it: a third of a 500-step flow page read, at random.
``gc.freeze`` moves what is alive now into a generation the collector never walks (as Instagram's
prefork servers do). There is no collection first (a full one is that same pause, in the start): what is
frozen is still freed when its last reference goes, and only a cycle among frozen objects, garbage or
not, stays until the process ends, bounded by what was alive at the freeze.
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Leave everything alive now out of later collections (call once the start's work is done)."""
    gc.freeze()
