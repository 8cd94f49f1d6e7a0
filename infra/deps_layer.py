"""Builds the dependency layers with pip for the Lambda platform, without Docker.

Every package comes from the hashed lock (``requirements/runtime.lock``), installed with
``--require-hashes --no-deps`` for the runtime's Python, architecture and glibc (``--only-binary``
so nothing is compiled for the wrong platform). The lock is split by package name into layers, so
each function carries only what it imports: a base layer every function has, and one extra layer
for the functions that embed, convert documents or serve the chat app. The built layers live in a
folder named by the hash of the lock, the platform and the plan; an unchanged lock reuses it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

LAMBDA_PYTHON = "3.11"
LAMBDA_ARCHITECTURE = "x86_64"
# python3.11 functions run on Amazon Linux 2, whose glibc is 2.26: a wheel tagged for a newer glibc
# installs fine and then fails to import on Lambda, so pip may pick manylinux tags up to 2_26 only.
LAMBDA_GLIBC_MINOR = 26
PLATFORM_TAGS: tuple[str, ...] = (
    f"manylinux2014_{LAMBDA_ARCHITECTURE}",
    *(f"manylinux_2_{minor}_{LAMBDA_ARCHITECTURE}" for minor in range(17, LAMBDA_GLIBC_MINOR + 1)),
)
RUNTIME_LOCK = Path("requirements") / "runtime.lock"

# Each layer names the packages its functions import; their locked dependencies come along.
# boto3 is shipped, not taken from the runtime, so the deployed SDK is the one the tests ran.
LAYER_ROOTS: dict[str, tuple[str, ...]] = {
    "base": ("aws-lambda-powertools", "aws-xray-sdk", "boto3", "pydantic", "pydantic-settings", "pyjwt", "rfc8785"),
    # pathway embeddings and matching (the reasoning routes and the jobs); httpx for Voyage's API (openai
    # itself speaks through its own fork, httpx2); the OTLP receiver's messages (a reasoning route), here
    # rather than in a layer of their own: the stack's resources are counted (CloudFormation takes 500)
    "pathways": ("openai", "numpy", "httpx", "opentelemetry-proto"),
    # document conversion (PDF, XLSX, Parquet through DuckDB) and knowledge embeddings
    "documents": ("openai", "duckdb", "openpyxl", "pypdf"),
    # the chat app: its server, the model, grounding on documents and pathways, the diagnosis agent
    "chat": (
        "openai",
        "numpy",
        "duckdb",
        "openpyxl",
        "pypdf",
        "httpx",
        "starlette",
        "uvicorn",
        "sqlglot",
        "pymysql",
    ),
}
BASE_LAYER = "base"
# In the lock (the CLI uses them) but in no layer.
NOT_SHIPPED = frozenset({"tqdm"})
# function folder -> its dependency layers (besides the flowledger package's own layer)
FUNCTION_LAYERS: dict[str, tuple[str, ...]] = {
    "authorizer": ("base",),
    "token_claims": ("base",),  # the console pool's pre token generation trigger
    "core": ("base",),
    "audit": ("base",),
    "research": ("base",),
    "subjects": ("base", "pathways"),  # it deletes pathways and their snapshots (pathways/ imports numpy)
    "reasoning": ("base", "pathways"),
    "jobs": ("base", "pathways"),
    "documents": ("base", "documents"),
    "chat": ("base", "chat"),
    # a trial stage's custom resource: boto3 only (from the base layer: the SDK the tests ran)
    "locked_bucket_emptier": ("base",),
    # the ledger witness, deployed in a stack of its own (infra/witness_stack.py)
    "witness": ("base",),
}

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==\S+")
_VIA = re.compile(r"^\s*#\s+(?:via\s+)?([A-Za-z0-9][A-Za-z0-9._-]*)")


class LayerBuildError(RuntimeError):
    """pip could not install a layer for the Lambda platform (usually: no compatible wheel)."""


def canonical(name: str) -> str:
    """A distribution name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class LockedPackage:
    """One pinned package of a pip-compile lock: its requirement lines (hashes included) and who needs it."""

    name: str
    requirement: str
    needed_by: frozenset[str]


def read_lock(lock: Path) -> dict[str, LockedPackage]:
    """The packages of a pip-compile ``--generate-hashes`` lock, keyed by canonical name."""
    packages: dict[str, LockedPackage] = {}
    name, lines, needed_by = "", [], set[str]()

    def flush() -> None:
        if name:
            packages[name] = LockedPackage(name, "\n".join(lines) + "\n", frozenset(needed_by))

    for line in lock.read_text().splitlines():
        pin = _PIN.match(line)
        if pin:
            flush()
            name, lines, needed_by = canonical(pin.group(1)), [line], set()
        elif name and line.startswith("    --hash"):
            lines.append(line)
        elif name and (via := _VIA.match(line)) and via.group(1) != "via":
            needed_by.add(canonical(via.group(1)))
    flush()
    return packages


def dependency_closure(lock: Mapping[str, LockedPackage], roots: Iterable[str]) -> set[str]:
    """The roots and every locked package they need, directly or not (from the lock's ``via`` notes)."""
    needs: dict[str, set[str]] = {}
    for package in lock.values():
        for parent in package.needed_by:
            needs.setdefault(parent, set()).add(package.name)
    found: set[str] = set()
    todo = [canonical(root) for root in roots]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        if name not in lock:
            raise ValueError(f"{name} is in a layer but not in the lock; run `make lock`")
        found.add(name)
        todo.extend(needs.get(name, ()))
    return found


def layer_packages(lock: Mapping[str, LockedPackage]) -> dict[str, set[str]]:
    """The packages each layer installs: the base closure, and each other layer's closure minus the base."""
    base = dependency_closure(lock, LAYER_ROOTS[BASE_LAYER])
    return {
        layer: base if layer == BASE_LAYER else dependency_closure(lock, roots) - base
        for layer, roots in LAYER_ROOTS.items()
    }


def layers_key(lock_text: str) -> str:
    """The build folder's name: the lock's content, the target platform and the layer plan."""
    inputs = [lock_text, LAMBDA_PYTHON, PLATFORM_TAGS, LAYER_ROOTS, sorted(NOT_SHIPPED)]
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def pip_install_argv(requirements: Path, target: Path) -> list[str]:
    """The pip command that installs one layer's locked requirements for the Lambda platform."""
    platforms = [arg for tag in PLATFORM_TAGS for arg in ("--platform", tag)]
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--target",
        str(target),
        *platforms,
        "--python-version",
        LAMBDA_PYTHON,
        "--implementation",
        "cp",
        "--only-binary=:all:",
        "--require-hashes",
        "--no-deps",  # the lock is already resolved; each layer holds its share of it
        "--requirement",
        str(requirements),
    ]


def build_dependency_layers(root: Path, lock: Path | None = None) -> Path:
    """A folder with one built layer per name in LAYER_ROOTS (``<name>/python``), built now unless cached."""
    lock = lock or root / RUNTIME_LOCK
    lock_text = lock.read_text()
    locked = read_lock(lock)
    key = layers_key(lock_text)
    target = root / ".build" / "deps-layers" / key
    if (target / ".complete").exists():
        return target
    staging = target.with_name(key + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    for layer, names in layer_packages(locked).items():
        requirements = staging / f"{layer}.txt"
        requirements.parent.mkdir(parents=True, exist_ok=True)
        requirements.write_text("".join(locked[name].requirement for name in sorted(names)))
        result = subprocess.run(pip_install_argv(requirements, staging / layer / "python"), check=False)  # noqa: S603
        if result.returncode != 0:
            raise LayerBuildError(
                f"pip could not install layer {layer!r} from {lock} for CPython {LAMBDA_PYTHON} on "
                f"{LAMBDA_ARCHITECTURE} with glibc <= 2.{LAMBDA_GLIBC_MINOR} (Amazon Linux 2); pip's message is "
                "above: a package pinned there publishes no wheel for this platform, so pin one that does"
            )
        shutil.rmtree(staging / layer / "python" / "bin", ignore_errors=True)  # console scripts: unused on Lambda
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / ".complete").write_text(key + "\n")
    return target


def placeholder_layers(root: Path) -> Path:
    """Empty layers for synths that never deploy (infra tests)."""
    target = root / ".build" / "deps-layers" / "placeholder"
    for layer in LAYER_ROOTS:
        (target / layer / "python").mkdir(parents=True, exist_ok=True)
    return target
