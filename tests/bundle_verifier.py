"""tools/verify_bundle.py loaded from its file, as an auditor runs it: it stands alone, outside the package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).parents[1] / "tools" / "verify_bundle.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("verify_bundle", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


verifier = _load()
