"""The layering rule, read from the source with ``ast``: the domain never reaches the HTTP or local layers.

Every import counts, wherever it is written (module level, inside a function, under
``TYPE_CHECKING``), and so does every module it leads to: a domain module that imports
``flowledger.services``, which imports ``flowledger.api``, breaks the rule as surely as a direct import.
"""

from __future__ import annotations

import ast
from collections import deque
from functools import cache
from pathlib import Path

import flowledger

PACKAGE_ROOT = Path(flowledger.__file__).parent
DOMAIN = (
    "chat",
    "diagnosis",
    "tabular",
    "continuity",
    "workspaces",
    "reasoning",
    "ledger",
    "research",
    "pathways",
    "knowledge",
    "llm",
    "store",
)
OUTER_LAYERS = ("flowledger.api", "flowledger.local")
# The audit ledger sits below the features whose events it records.
ABOVE_LEDGER = ("flowledger.reasoning", "flowledger.chat", "flowledger.research", "flowledger.pathways")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(source: str, package: str) -> set[str]:
    """Every dotted name the import statements of ``source`` (a module of ``package``) may load."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            names.add(base)
            # `from flowledger.api import principals` imports a module, not a name.
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


@cache
def import_graph() -> dict[str, frozenset[str]]:
    """Each flowledger module and the flowledger modules it imports, with the packages whose ``__init__`` runs."""
    sources = {_module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}
    graph: dict[str, frozenset[str]] = {}
    for name, path in sources.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for target in imported_names(path.read_text(), package):
            parts = target.split(".")
            edges.update(prefix for i in range(1, len(parts) + 1) if (prefix := ".".join(parts[:i])) in sources)
        graph[name] = frozenset(edges - {name})
    return graph


def path_to(start: str, forbidden: tuple[str, ...]) -> list[str] | None:
    """The shortest import chain from ``start`` to a module under one of ``forbidden``, if any."""
    graph = import_graph()
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        if module != start and any(module == f or module.startswith(f"{f}.") for f in forbidden):
            chain = [module]
            while (previous := came_from[chain[-1]]) is not None:
                chain.append(previous)
            return chain[::-1]
        for imported in sorted(graph[module], key=lambda m: (-m.count("."), m)):  # modules before packages
            if imported not in came_from:
                came_from[imported] = module
                queue.append(imported)
    return None


def _violations(packages: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    modules = [
        m for m in import_graph() if any(m == f"flowledger.{p}" or m.startswith(f"flowledger.{p}.") for p in packages)
    ]
    return [" -> ".join(chain) for m in sorted(modules) if (chain := path_to(m, forbidden))]


def test_graph_sees_imports_written_every_way() -> None:
    graph = import_graph()
    assert "flowledger.identity" in graph["flowledger.api.principals"]  # absolute `from x import Name`
    assert "flowledger.store.envelope" in graph["flowledger.services"]
    assert "flowledger.llm.embeddings" in graph["flowledger.services"]  # under TYPE_CHECKING and in a method


def test_relative_and_function_level_imports_count() -> None:
    source = "def f():\n    from ..api import principals\n    from . import chain\n"
    names = imported_names(source, "flowledger.ledger")
    assert {"flowledger.api.principals", "flowledger.ledger.chain"} <= names


def test_domain_never_imports_the_http_or_local_layer() -> None:
    violations = _violations(DOMAIN, OUTER_LAYERS)
    assert not violations, "\n".join(violations)


def test_ledger_never_imports_the_features_it_audits() -> None:
    violations = _violations(("ledger",), ABOVE_LEDGER)
    assert not violations, "\n".join(violations)


def test_path_to_reports_the_whole_chain() -> None:
    assert path_to("flowledger.api.chat_app", ("flowledger.identity",)) is not None
    chain = path_to("flowledger.ledger.audit", ("flowledger.store.envelope",))
    assert chain == ["flowledger.ledger.audit", "flowledger.services", "flowledger.store.envelope"]
