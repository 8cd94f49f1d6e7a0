"""The hashed lock files cover every pin of pyproject.toml at the same version, so they cannot drift."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LOCKS = {
    "runtime": (ROOT / "requirements" / "runtime.lock", PYPROJECT["project"]["dependencies"]),
    "dev": (
        ROOT / "requirements" / "dev.lock",
        [
            *PYPROJECT["project"]["dependencies"],
            *PYPROJECT["project"]["optional-dependencies"]["dev"],
            *PYPROJECT["project"]["optional-dependencies"]["minilm"],
        ],
    ),
}
PINNED = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+) \\$")


def locked(path: Path) -> dict[str, tuple[Version, int]]:
    """Each locked package: its version and how many hashes follow it."""
    packages: dict[str, tuple[Version, int]] = {}
    name = ""
    for line in path.read_text().splitlines():
        if match := PINNED.match(line):
            name = canonicalize_name(match["name"])
            packages[name] = (Version(match["version"]), 0)
        elif line.strip().startswith("--hash=sha256:") and name:
            version, hashes = packages[name]
            packages[name] = (version, hashes + 1)
    return packages


@pytest.mark.parametrize("lock", LOCKS)
def test_the_lock_pins_every_pyproject_pin_at_its_version(lock: str) -> None:
    path, pins = LOCKS[lock]
    packages = locked(path)
    for pin in map(Requirement, pins):
        assert pin.specifier and all(spec.operator == "==" for spec in pin.specifier), f"{pin} is not pinned"
        name = canonicalize_name(pin.name)
        assert name in packages, f"{path.name} lacks {pin.name}: run `make lock`"
        # == without a local label matches a local build (torch 2.13.0+cpu for torch==2.13.0), as pip does
        assert pin.specifier.contains(packages[name][0], prereleases=True), (
            f"{path.name} has {name}=={packages[name][0]}, pyproject.toml {pin}: run `make lock`"
        )


@pytest.mark.parametrize("lock", LOCKS)
def test_every_locked_package_has_a_hash(lock: str) -> None:
    packages = locked(LOCKS[lock][0])
    assert len(packages) > len(LOCKS[lock][1])  # the transitive dependencies are pinned too
    assert [name for name, (_, hashes) in packages.items() if hashes == 0] == []


def test_the_runtime_lock_holds_nothing_the_dev_lock_resolves_differently() -> None:
    dev = locked(LOCKS["dev"][0])
    runtime = locked(LOCKS["runtime"][0])
    assert {name: v for name, (v, _) in runtime.items() if dev.get(name, (v,))[0] != v} == {}
