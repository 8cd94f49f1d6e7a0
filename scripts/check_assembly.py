"""Checks a synthesized cloud assembly (``cdk.out``) before it is deployed.

For every Python Lambda function of every stack (CDK's own Node.js ones are skipped): each of its
layers and all of them together with its code stay under Lambda's 250 MB unzipped limit, and its
handler imports on the target Python from its own code folder and layers alone (a subprocess with
``-I -S``: no site-packages, no venv), as do the top-level packages its layers ship (the handlers
import most of them lazily). Prints the sizes.
Exit status 1 with one line per failure; cdk-nag already ran in the synth.

    python scripts/check_assembly.py [--assembly cdk.out] [--python python3.11]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LIMIT_MB = 250.0  # Lambda: function code plus all its layers, unzipped
_SKIPPED_ENTRIES = {"bin", "__pycache__"}
# Shipped inside a wheel but importable only with an optional extra nothing here uses.
OPTIONAL_MODULES = {"adbc_driver_duckdb": "duckdb's ADBC driver, needs the optional adbc-driver-manager"}


@dataclass
class Layer:
    logical_id: str
    folder: Path

    @property
    def size_mb(self) -> float:
        return folder_mb(self.folder)


@dataclass
class Function:
    stack: str
    logical_id: str
    service: str
    handler: str
    code: Path
    layers: list[Layer] = field(default_factory=list)
    external_layers: int = 0
    environment: dict[str, str] = field(default_factory=dict)
    runtime: str = ""


def folder_mb(folder: Path) -> float:
    """Unzipped size of a folder in MB (what Lambda counts against its limit)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1_000_000


def _asset_folders(assembly: Path, assets_file: str) -> dict[str, Path]:
    """asset object key (``<hash>.zip``) -> the unzipped folder in the assembly."""
    manifest = json.loads((assembly / assets_file).read_text())
    folders = {}
    for asset in manifest.get("files", {}).values():
        if asset["source"].get("packaging") != "zip":
            continue
        for destination in asset["destinations"].values():
            folders[destination["objectKey"]] = assembly / asset["source"]["path"]
    return folders


def _code_key(code: dict[str, Any]) -> str:
    key = code.get("S3Key")
    if not isinstance(key, str):
        raise ValueError(f"code without a literal asset key: {code}")
    return key


def functions_of(assembly: Path) -> Iterator[Function]:
    """Every Lambda function in the assembly's stacks, with the folders of its code and layers."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    artifacts = manifest["artifacts"]
    for name, artifact in artifacts.items():
        if artifact["type"] != "aws:cloudformation:stack":
            continue
        assets_file = next(
            artifacts[dep]["properties"]["file"]
            for dep in artifact.get("dependencies", [])
            if artifacts[dep]["type"] == "cdk:asset-manifest"
        )
        folders = _asset_folders(assembly, assets_file)
        resources = json.loads((assembly / artifact["properties"]["templateFile"]).read_text())["Resources"]
        layers = {
            logical_id: Layer(logical_id, folders[_code_key(r["Properties"]["Content"])])
            for logical_id, r in resources.items()
            # CDK's awscli layer (the console's BucketDeployment) is a prebuilt zip, not a folder of ours.
            if r["Type"] == "AWS::Lambda::LayerVersion" and _code_key(r["Properties"]["Content"]) in folders
        }
        for logical_id, resource in resources.items():
            # CDK's own BucketDeployment handler runs on CDK's runtime with the runtime's boto3.
            if resource["Type"] != "AWS::Lambda::Function" or logical_id.startswith("CustomCDKBucketDeployment"):
                continue
            props = resource["Properties"]
            variables = props.get("Environment", {}).get("Variables", {})
            function = Function(
                stack=name,
                logical_id=logical_id,
                service=str(variables.get("POWERTOOLS_SERVICE_NAME", logical_id)),
                handler=props["Handler"],
                runtime=str(props.get("Runtime", "")),
                code=folders[_code_key(props["Code"])],
                environment={k: v for k, v in variables.items() if isinstance(v, str)},
            )
            for ref in props.get("Layers", []):
                if isinstance(ref, dict) and ref.get("Ref") in layers:
                    function.layers.append(layers[ref["Ref"]])
                else:
                    function.external_layers += 1  # a published layer (Lambda Web Adapter): not in the assembly
            yield function


def entry_imports(function: Function) -> str:
    """Python that imports the function's entry point the way Lambda (or its run script) does."""
    module, _, attribute = function.handler.rpartition(".")
    if (function.code / f"{module}.py").exists():
        return f"import {module}\nassert callable({module}.{attribute}), '{function.handler} is not callable'\n"
    script = (function.code / function.handler).read_text()  # a Lambda Web Adapter run script
    runner = re.search(r"python3?\s+-m\s+([\w.]+)", script)
    factory = re.search(r"--factory\s+([\w.]+):(\w+)", script)
    if not runner or not factory:
        raise ValueError(f"{function.handler}: neither a Python handler nor a `python -m ... --factory` run script")
    return (
        f"import importlib, {runner.group(1)}\n"
        f"assert callable(getattr(importlib.import_module({factory.group(1)!r}), {factory.group(2)!r}))\n"
    )


def shipped_modules(layer: Layer) -> list[str]:
    """The top-level modules and packages a layer puts on ``sys.path``."""
    python = layer.folder / "python"
    names = set()
    for entry in python.iterdir() if python.is_dir() else ():
        if entry.name in _SKIPPED_ENTRIES or entry.name.endswith((".dist-info", ".libs", ".pth")):
            continue
        if entry.name.split(".")[0] in OPTIONAL_MODULES:
            continue
        if entry.is_dir() and (entry / "__init__.py").exists():
            names.add(entry.name)
        elif entry.suffix in {".py", ".so"}:
            names.add(entry.name.split(".")[0])
    return sorted(names)


def import_failure(function: Function, python: str) -> str | None:
    """None when the entry point and every shipped package import; else the error's last line."""
    path = [str(function.code), *(str(layer.folder / "python") for layer in function.layers)]
    modules = [m for layer in function.layers for m in shipped_modules(layer)]
    code = (
        f"import sys\nsys.path[:0] = {path!r}\n"
        + entry_imports(function)
        + f"import importlib\nfor name in {modules!r}:\n"
        + "    try:\n        importlib.import_module(name)\n"
        + "    except Exception as error:\n        raise SystemExit(f'{name}: {type(error).__name__}: {error}')\n"
    )
    environment = {"PATH": "/usr/bin:/bin", "POWERTOOLS_TRACE_DISABLED": "1", "AWS_DEFAULT_REGION": "us-east-1"}
    result = subprocess.run(  # noqa: S603 - our own interpreter choice, no shell
        [python, "-I", "-S", "-B", "-c", code],  # -B: leave the assembly unchanged
        cwd=function.code,
        env={**function.environment, **environment},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode == 0:
        return None
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {result.returncode}"


def interpreter(python: str) -> tuple[str, str]:
    """The interpreter's real executable (not a pyenv shim, which needs the caller's PATH) and its X.Y."""
    result = subprocess.run(  # noqa: S603
        [python, "-I", "-S", "-c", "import sys; print(sys.executable); print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    executable, version = result.stdout.split()
    return executable, version


def check(assembly: Path, python: str, limit_mb: float = LIMIT_MB) -> list[str]:
    """Every failure found in the assembly, one line each; prints the sizes as it goes."""
    failures = []
    executable, version = interpreter(python)
    # Absolute: each import runs with the function's code folder as its working directory.
    found = list(functions_of(assembly.resolve()))
    # CDK's own handlers (a dev stage's bucket auto-delete runs on Node.js) are CDK's to test.
    functions = [function for function in found if function.runtime.startswith("python")]
    for other in sorted({function.runtime for function in found} - {function.runtime for function in functions}):
        print(f"skipped: {sum(f.runtime == other for f in found)} {other} function(s) of CDK's own")
    if not functions:
        return [f"{assembly}: no Python Lambda function in any stack"]
    runtimes = sorted({function.runtime for function in functions})
    if runtimes != [f"python{version}"]:
        return [f"{python} is Python {version}; the functions run {', '.join(runtimes)}"]
    seen = {layer.logical_id: layer for fn in functions for layer in fn.layers}
    print(f"{'layer':<60} {'MB unzipped':>12}")
    for layer in sorted(seen.values(), key=lambda layer: layer.logical_id):
        print(f"{layer.logical_id:<60} {layer.size_mb:>12.1f}")
        if layer.size_mb > limit_mb:
            failures.append(f"layer {layer.logical_id}: {layer.size_mb:.1f} MB unzipped, over {limit_mb:.0f} MB")
    print(f"\n{'function':<24} {'code + layers MB':>16}  layers")
    for function in functions:
        total = folder_mb(function.code) + sum(layer.size_mb for layer in function.layers)
        names = ", ".join(layer.logical_id for layer in function.layers)
        external = f" + {function.external_layers} published" if function.external_layers else ""
        print(f"{function.service:<24} {total:>16.1f}  {names}{external}")
        if total > limit_mb:
            failures.append(
                f"function {function.service}: code and layers {total:.1f} MB unzipped, over {limit_mb:.0f} MB"
            )
        error = import_failure(function, executable)
        if error:
            failures.append(f"function {function.service}: {function.handler} does not import from its layers: {error}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assembly", type=Path, default=Path("cdk.out"))
    parser.add_argument("--python", default="python3.11", help="an interpreter of the functions' runtime")
    parser.add_argument("--limit-mb", type=float, default=LIMIT_MB)
    args = parser.parse_args(argv)
    failures = check(args.assembly, args.python, args.limit_mb)
    for failure in failures:
        print(f"FAIL {failure}", file=sys.stderr)
    if not failures:
        print("\nassembly OK: sizes under the limit, every handler imports on the target Python")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
