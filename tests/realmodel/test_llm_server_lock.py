"""The real-model servers' venv comes from a hashed lock (requirements/llm-server.lock, made by `make lock`)."""

from __future__ import annotations

import hashlib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.realmodel.servers import ROOT, SHARED_LLM, require
from tests.unit.test_locks import locked

SOURCE = ROOT / "requirements" / "llm-server.in"
LOCK = ROOT / "requirements" / "llm-server.lock"
WHEEL = SHARED_LLM / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"


def test_the_lock_pins_every_input_at_its_version_with_hashes() -> None:
    packages = locked(LOCK)
    pins = [Requirement(line) for line in SOURCE.read_text().splitlines() if line and not line.startswith("#")]
    for pin in pins:
        assert canonicalize_name(pin.name) in packages, f"{LOCK.name} lacks {pin.name}: run `make lock`"
        assert pin.specifier.contains(packages[canonicalize_name(pin.name)][0]), f"{pin}: run `make lock`"
    assert [name for name, (_, hashes) in packages.items() if hashes == 0] == []


def test_llama_cpp_python_is_only_ever_the_prebuilt_wheel() -> None:
    # Never the sdist, which would build llama.cpp: pip takes it as a binary, and the one hash is the wheel's.
    assert "--only-binary llama-cpp-python" in LOCK.read_text().splitlines()
    assert locked(LOCK)["llama-cpp-python"][1] == 1
    require(WHEEL.is_file(), f"no {WHEEL} (../shared/llm)")
    assert f"--hash=sha256:{hashlib.sha256(WHEEL.read_bytes()).hexdigest()}" in LOCK.read_text()
