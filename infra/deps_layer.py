"""Builds the dependencies layer with pip for the Lambda platform, without Docker.

pip downloads manylinux wheels for the runtime's Python and architecture (``--only-binary``
so nothing is compiled for the wrong platform) into a folder named by the hash of its inputs;
an unchanged dependency list reuses the folder.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

LAMBDA_PYTHON = "3.14"
LAMBDA_PLATFORM = "manylinux2014_aarch64"  # arm64 (Graviton) functions


def runtime_requirements(pyproject: Path) -> list[str]:
    """The runtime dependencies declared in pyproject.toml: exactly what the layer ships."""
    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def build_dependencies_layer(root: Path, requirements: list[str]) -> Path:
    """The folder of a built layer (``python/`` inside), built now unless already cached."""
    key = hashlib.sha256(json.dumps([requirements, LAMBDA_PLATFORM, LAMBDA_PYTHON]).encode()).hexdigest()[:16]
    target = root / ".build" / "deps-layer" / key
    if (target / ".complete").exists():
        return target
    staging = target.with_name(key + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run(  # noqa: S603 - fixed argv, no shell
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
            str(staging / "python"),
            "--platform",
            LAMBDA_PLATFORM,
            "--python-version",
            LAMBDA_PYTHON,
            "--implementation",
            "cp",
            "--only-binary=:all:",
            *requirements,
        ],
        check=True,
    )
    for cache in (staging / "python").rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / ".complete").write_text("\n".join(requirements) + "\n")
    return target


def placeholder_layer(root: Path) -> Path:
    """An empty layer for synths that never deploy (infra tests)."""
    target = root / ".build" / "deps-layer" / "placeholder"
    (target / "python").mkdir(parents=True, exist_ok=True)
    return target
