"""Provisioned moto states, made once per test process and put back into each test's fresh moto."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

from flowledger.local import moto_state
from flowledger.services import Services
from flowledger.store.provision import provision_all

T = TypeVar("T")


class ProvisionedStates:
    """What ``provision_all`` makes, made once per set of resource names in this test process and put
    back into each test's fresh moto from a state file, as ``flowledger serve`` restores its store.

    Provisioning through the API costs about 100 ms (13 tables, 3 buckets, a KMS key); loading the
    saved result about 1 ms (the file is read and checksummed each time), over some 1,500 tests.
    """

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._files: dict[tuple[str, ...], tuple[Path, object]] = {}  # the state file and what ``make`` returned

    def provision(self, services: Services) -> None:
        """Every declared table, bucket and key, as ``provision_all`` makes them."""
        self._made(services, (), lambda: provision_all(services.aws, services.settings))

    def seeded(self, services: Services, name: str, seed: Callable[[], T]) -> T:
        """The provisioned store as ``seed`` leaves it (documents a module's every test starts from, say), made
        once and put back as :meth:`provision` is; what ``seed`` returned that once (the ids it made, say).
        ``seed`` must write the same whenever it runs: nothing that depends on the time a test starts."""
        self.provision(services)
        return cast(T, self._made(services, (name,), seed))

    def _made(self, services: Services, what: tuple[str, ...], make: Callable[[], object]) -> object:
        settings = services.settings
        names = (settings.resource_prefix, settings.bucket_suffix, settings.aws_region, settings.data_key_id, *what)
        saved = self._files.get(names)
        if saved is not None and moto_state.load_state(saved[0]) is not None:
            return saved[1]
        returned = make()
        state = self._folder / f"provisioned-{len(self._files)}.state"
        moto_state.write_state_file(state, moto_state.dump_state())
        self._files[names] = (state, returned)
        return returned
