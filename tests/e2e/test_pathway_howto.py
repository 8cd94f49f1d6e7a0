"""The documentation's "Make one locally" (docs/pathways.md), run as it is written against a real
`flowledger serve`: three runbooks indexed, one research run, and the library holds its pathway, which the
signed match route ranks first for the documented trigger."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import FLOWLEDGER, clean_env
from tests.e2e.test_concurrency import Signer

pytestmark = pytest.mark.e2e
DOC = Path(__file__).resolve().parents[2] / "docs" / "pathways.md"
MARKER = "<!-- tests/e2e/test_pathway_howto.py runs this block as it is, against a real flowledger serve. -->"


def documented_steps() -> str:
    """The shell block right after the marker: what the page tells a reader to paste."""
    text = DOC.read_text()
    assert MARKER in text, "docs/pathways.md lost its tested block"
    found = re.match(r"\s*```sh\n(.*?)\n```\n", text.split(MARKER, 1)[1], re.S)
    assert found is not None, "the marker must sit right above a ```sh block"
    return found.group(1)


@pytest.fixture(scope="module")
def howto_server(tmp_path_factory: pytest.TempPathFactory, launch: Callable[..., Any]) -> Iterator[Any]:
    running = launch(tmp_path_factory.mktemp("howto") / "data")
    yield running
    running.stop()


def test_the_documented_steps_put_a_pathway_in_the_library(howto_server: Any, tmp_path: Path) -> None:
    # The reader's checkout: the steps name the default data directory, here the test server's.
    (tmp_path / ".flowledger").symlink_to(howto_server.data_dir.path)
    bin_dir = str(Path(sys.executable).parent)  # the venv's `flowledger`, as `make install` puts it there
    env = {**clean_env(), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", documented_steps()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    score = re.search(r"^composite_k\s+([0-9.]+)$", ran.stdout, re.M)
    flow = re.search(r"^flow\s+(fl_\w+)$", ran.stdout, re.M)
    assert score is not None and flow is not None, ran.stdout
    assert float(score.group(1)) >= 0.9  # what extraction asks of every step and the outcome
    assert re.search(r"^\s+payments_ops\s+1\s+growing$", ran.stdout, re.M), ran.stdout

    stats = howto_server.cli("pathways", "inspect", "--json", "--data-dir", str(howto_server.data_dir.path))
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["by_trigger_type"] == {"payments_ops": 1}

    # The operator's view: the research console's match ranks it first for the documented trigger.
    path = "/admin/v1/reasoning/pathways/match?trigger_type=payments_ops&trigger_ref=runbook/drain-payments-queue"
    with httpx.Client(base_url=howto_server.base_url, timeout=60) as client:
        answer = client.get(path, headers=Signer(howto_server).headers("GET", path))
    assert answer.status_code == 200, answer.text
    top = answer.json()["candidates"][0]
    assert (top["pathway"]["seed_flow_id"], top["reason"]) == (flow.group(1), "exact_ref")


def test_the_demo_documents_alone_make_no_pathway(howto_server: Any) -> None:
    """The page's account of why a fresh store's library is empty: the demo question scores under 0.9."""
    documented = re.search(r'--trigger-ref ops/audit-ledger "([^"]+)"', DOC.read_text())
    assert documented is not None
    ran = subprocess.run(
        [
            *FLOWLEDGER,
            "research",
            "run",
            "--trigger-type",
            "user_question",
            "--trigger-ref",
            "ops/audit-ledger",
            documented.group(1),
            "--json",
            "--data-dir",
            str(howto_server.data_dir.path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**clean_env(), "REASONING_FLOW_CAPTURE_ENABLED": "true"},
    )
    assert ran.returncode == 0, ran.stderr
    finding = json.loads(ran.stdout)
    assert finding["outcome"] == "recommendation_delivered"
    assert 0.6 <= finding["composite_k"] < 0.9
