"""Every documented setting is in the matrix (tests/infra/deploy_matrix.py), and the mixes, each a few
settings that touch different resources, synthesize for an account and a region with every validation
passing (cdk-nag and CDK's template rules). cfn-lint and checkov on these templates are ``make
template-check``'s (a CI phase): here, cfn-lint runs on the base and all-together templates
(test_deploy_matrix.py). A module of its own, so a parallel worker takes it while another takes those.

A setting added to docs/deployment.md's table fails test_every_documented_setting_has_its_forms until it
is in :data:`DOCUMENTED_FORMS` (or :data:`NOT_IN_MATRIX`, saying what checks it), and each form listed there
fails test_each_documented_value_form_is_in_a_template until an entry of the matrix gives it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.infra.deploy_matrix import (
    DOCUMENTED_FORMS,
    MATRIX,
    NOT_IN_MATRIX,
    SETTING_TARGETS,
    TARGETS,
    WHOLE_TARGETS,
    Target,
    effective_value,
)
from tests.infra.test_deploy_matrix import synthesized

DEPLOYMENT_DOC = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"
MIXES = tuple(entry for entry in MATRIX if entry not in {t.entry for t in WHOLE_TARGETS})
# Settings all-together gives that no mix needs to: prod is every mix's default stage but dev-mix's, and the
# Lambda Web Adapter layer's version changes only the chat functions' layer ARN (cdk.json's in every other).
ALL_TOGETHER_ONLY = ("flowledger:stage", "flowledger:lwaLayerVersion")


def documented_settings() -> list[str]:
    """The keys of docs/deployment.md's "Every -c setting" table, in its order."""
    text = DEPLOYMENT_DOC.read_text()
    table = text[text.index("## Every `-c` setting") :].split("\n## ", 1)[0]
    keys = []
    for line in table.splitlines():
        if line.startswith("| `flowledger:"):
            keys += re.findall(r"`(flowledger:[A-Za-z]+)`", line.split("|")[1])
    return keys


@pytest.mark.parametrize("target", SETTING_TARGETS, ids=str)
def test_synth_validations_pass_with_account_and_region(target: Target) -> None:
    failures = target.unexpected(synthesized(target).validation_failures)
    assert not failures, f"{target}: " + "\n".join(failures)


def test_every_documented_setting_has_its_forms() -> None:
    documented = documented_settings()
    assert len(documented) >= 20, documented  # the table was found and read
    assert not set(DOCUMENTED_FORMS) & set(NOT_IN_MATRIX)
    assert sorted(documented) == sorted({*DOCUMENTED_FORMS, *NOT_IN_MATRIX}), (
        "docs/deployment.md's settings and deploy_matrix.DOCUMENTED_FORMS/NOT_IN_MATRIX differ"
    )


@pytest.mark.parametrize(
    ("key", "form"),
    [pytest.param(key, form, id=f"{key}={form}") for key, forms in DOCUMENTED_FORMS.items() for form in forms],
)
def test_each_documented_value_form_is_in_a_template(key: str, form: str) -> None:
    synthesized_entries = {target.entry for target in TARGETS}
    giving = [entry for entry in synthesized_entries if DOCUMENTED_FORMS[key][form](effective_value(entry, key))]
    assert giving, f"no entry of the matrix gives {key} its documented form {form!r}"


@pytest.mark.parametrize("key", [key for key in MATRIX["all-together"] if key not in ALL_TOGETHER_ONLY])
def test_each_setting_of_all_together_is_in_a_mix_too(key: str) -> None:
    # Each setting is checked without the others as well: in a mix of settings on other resources.
    assert any(key in MATRIX[entry] for entry in MIXES), f"{key} is in all-together alone"
