"""The dev server's worker processes: once ``grow`` returns (the banner's ready line), every worker has
built every function, so no request waits on a worker's first use of one."""

from __future__ import annotations

import pytest

from flowledger.api.registry import CAPABILITY_MODULES
from flowledger.config import load_settings
from flowledger.local.functions import FunctionPool, settings_environment

pytestmark = pytest.mark.usefixtures("clean_environment")


def test_after_grow_every_worker_has_built_every_function() -> None:
    # Nothing here reaches the store: building a function and its clients makes no call.
    pool = FunctionPool(settings_environment(load_settings(aws_endpoint_url="http://127.0.0.1:9")), workers=3)
    pool.start()
    try:
        pool.grow(wait_seconds=120)
        assert len(pool.warm) == 3  # the first worker and the two grown ones
        assert all(built == tuple(sorted(CAPABILITY_MODULES)) for built in pool.warm.values()), pool.warm
    finally:
        pool.stop()
