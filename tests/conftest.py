"""Fixtures shared by every test layer."""

from __future__ import annotations

import copy
import gc
import importlib.util
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import tests.hypothesis_profiles  # noqa: F401 - registers and loads the profile before any test module
from tests import library_caches

library_caches.install()

# jsii warns on every CDK import under Node 20; the CDK works on it (see ARCHITECTURE.md section 2).
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

ROOT = Path(__file__).resolve().parents[1]
EVENTS = Path(__file__).parent / "fixtures" / "events"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test gets a node id of its own, as xdist needs to tell them apart.

    schemathesis names each operation's test ``test_x[GET /path]`` but leaves the function's node id on
    all of them; xdist's module scheduling (``--dist loadscope``) keys tests by node id and would run one
    of them and silently drop the rest. Any other duplicate stops the run rather than lose tests.
    """
    for item in items:
        if "[" in item.name and "[" not in item.nodeid and item.parent is not None:
            item._id = item.parent.id.child(item.name)  # the id pytest gives any parametrized test
    seen: set[str] = set()
    duplicates = {item.nodeid for item in items if item.nodeid in seen or seen.add(item.nodeid)}
    if duplicates:
        raise pytest.UsageError(f"tests sharing a node id (xdist would drop all but one): {sorted(duplicates)[:5]}")


# The layers whose modules share a server or a synth (module-scoped fixtures): under `--dist loadscope`
# a module of these runs whole on one worker, so each is built once; every other test is scheduled on
# its own, which keeps both cores busy to the end. (xdist's own `loadgroup` marks have no effect on
# pytest 9.2, which no longer reads the node id xdist rewrites.)
SHARED_FIXTURE_LAYERS = ("tests/e2e/", "tests/browser/", "tests/infra/", "tests/realmodel/")
# Integration modules that build one store on the locked moto server for all their tests (module-scoped
# fixtures): run whole on one worker, since an in-process moto test in between would reset the backends
# the server shares with it.
SHARED_FIXTURE_MODULES = (
    "tests/integration/test_consistency_proofs.py",
    "tests/integration/test_evidence_bundles.py",
)


# The order workers take the modules in, longest first, so that no long module starts last and leaves two
# workers idle while it runs on (xdist's own order is by number of tests, which put the real-model modules,
# a few tests of a minute or more each, at the end of the run). Within a layer, modules with more tests first,
# but for the two real-model modules of a few tests of minutes each (the model cards, about 4.5 minutes of one
# worker; the llama-cpp-python turns, 2): ranked by their count they started late and ended the run alone.
LAYER_ORDER = (
    "tests/realmodel/test_model_cards.py",
    "tests/realmodel/test_chat_llama_cpp_server.py",
    "tests/realmodel/",
    "tests/e2e/",
    "tests/browser/",
    "tests/infra/",
    "tests/integration/",
    "tests/unit/",
)


def _layer_rank(nodeid: str) -> int:
    return next((rank for rank, layer in enumerate(LAYER_ORDER) if nodeid.startswith(layer)), len(LAYER_ORDER))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ServersTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module.startswith(SHARED_FIXTURE_LAYERS) or module in SHARED_FIXTURE_MODULES else nodeid

        def _assign_work_unit(self, node: Any) -> None:
            # The queue is complete by the first assignment: order it once (the workers' own collections, which
            # xdist maps its indexes through, stay as they are).
            if not getattr(self, "_longest_first", False):
                self._longest_first = True
                ordered = sorted(self.workqueue.items(), key=lambda item: (_layer_rank(item[0]), -len(item[1])))
                self.workqueue.clear()
                self.workqueue.update(ordered)
            super()._assign_work_unit(node)

    return ServersTogether(config, log)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collection leaves a large heap (CDK, hypothesis, schemathesis, every test module) that never becomes
    garbage: freeze it out of the collector and collect young objects less often. Each full collection
    walked all of it again, some 15 % of the integration layer's CPU time."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 1_000)


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / f"{name}.json").read_text())


@pytest.fixture(autouse=True)
def fresh_model_modes() -> Iterator[None]:
    """Each test starts with no remembered model-server modes (they are kept per host:port, and ports recur)."""
    from flowledger.llm.output_modes import MEMORY

    MEMORY.clear()
    yield
    MEMORY.clear()


@pytest.fixture
def load_function() -> Callable[[str], ModuleType]:
    """Import ``functions/<name>/handler.py`` as Lambda would, under a unique module name."""

    def load(name: str) -> ModuleType:
        path = ROOT / "functions" / name / "handler.py"
        spec = importlib.util.spec_from_file_location(f"function_{name}_handler", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def rest_event() -> Callable[..., dict[str, Any]]:
    """Build an API Gateway REST proxy event from the shared fixture."""

    def build(
        method: str,
        path: str,
        *,
        body: Any = None,
        authorizer: dict[str, str] | None = None,
        user_arn: str | None = None,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        event = copy.deepcopy(load_event("rest_request"))
        event.update(httpMethod=method, path=path)
        event["requestContext"].update(httpMethod=method, path=f"/v1{path}")
        if body is not None:
            event["body"] = body if isinstance(body, str) else json.dumps(body)
            event["headers"]["Content-Type"] = "application/json"
        if authorizer is not None:
            event["requestContext"]["authorizer"] = {"principalId": authorizer.get("sub", ""), **authorizer}
        if user_arn is not None:
            event["requestContext"]["identity"]["userArn"] = user_arn
        event["headers"].update(headers or {})
        if query:
            event["queryStringParameters"] = dict(query)
            event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
        return event

    return build


@pytest.fixture
def lambda_context() -> Any:
    class Context:
        function_name = "test"
        memory_limit_in_mb = 512
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:test"
        aws_request_id = "req-1"

    return Context()


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No Flowledger or seed variable leaks in from the machine running the tests."""
    from flowledger.config import Settings

    for info in Settings.model_fields.values():
        if info.validation_alias:
            monkeypatch.delenv(str(info.validation_alias), raising=False)
    yield
