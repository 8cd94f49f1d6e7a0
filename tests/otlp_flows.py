"""The OTLP guide's snippets (docs/otlp.md) run as a user runs them, and what proves their flows: read back over
the admin API, `flowledger audit verify`, and the flow's evidence bundle checked by tools/verify_bundle.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.e2e.conftest import RunningServer, clean_env
from tests.e2e.test_step_batch_http import admin_get, token

ROOT = Path(__file__).parents[1]
GUIDE = ROOT / "docs" / "otlp.md"
VERIFIER = ROOT / "tools" / "verify_bundle.py"


def snippet(title: str) -> str:
    """The code of the guide's block titled ``title``."""
    found = re.search(rf'```python title="{re.escape(title)}"\n(.*?)\n```', GUIDE.read_text(), re.DOTALL)
    assert found, f"docs/otlp.md has no snippet {title}"
    return found.group(1)


def run_snippet(
    server: RunningServer, title: str, tmp_path: Path, patient: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run a snippet with the guide's variables, its trace naming ``patient`` (so the test finds its flow)."""
    script = tmp_path / title
    script.write_text(snippet(title))
    bearer = token(server, "--sub", f"snippet-{patient}", "--scopes", "reasoning.write")
    variables = {
        **clean_env(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"{server.base_url}/api/otlp",
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{bearer}",
        "OTEL_SERVICE_NAME": "order-bot",
        "OTEL_RESOURCE_ATTRIBUTES": f"flowledger.patient_id={patient}",
        **env,
    }
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=variables, check=False
    )


def flow_of(server: RunningServer, patient: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The one flow the snippet's trace became, and its steps."""
    (flow,) = admin_get(server, "/admin/v1/reasoning/flows", patient_id=patient)["flows"]
    steps = admin_get(server, f"/admin/v1/reasoning/flows/{flow['flow_id']}/steps", limit="100")["steps"]
    return flow, list(steps)


def verifies_offline(server: RunningServer, flow_id: str, tmp_path: Path) -> None:
    """The ledger verifies, and the flow's evidence bundle passes the standalone verifier."""
    data_dir = str(server.data_dir.path)
    for args in (("jobs", "run", "ledger_checkpoint"), ("audit", "verify")):
        done = server.cli(*args, "--data-dir", data_dir)
        assert done.returncode == 0, done.stdout + done.stderr
    bundle = tmp_path / "flow.bundle.json"
    made = server.cli("audit", "bundle", "--subject", f"flow:{flow_id}", "--out", str(bundle), "--data-dir", data_dir)
    assert made.returncode == 0, made.stderr
    key = server.cli("audit", "key", "--json", "--data-dir", data_dir)
    assert key.returncode == 0, key.stderr
    checked = subprocess.run(
        [sys.executable, str(VERIFIER), str(bundle), "--log-key", json.loads(key.stdout)["vkey"]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
