"""Each documented setting alone (tests/infra/deploy_matrix.py) synthesizes for an account and a region with
every validation passing (cdk-nag and CDK's template rules). cfn-lint and checkov on each of these templates
are ``make template-check``'s (a CI phase): here, cfn-lint runs on the base and all-together templates
(test_deploy_matrix.py), which hold every setting at once. A module of its own, so a parallel worker takes
it while another takes those."""

from __future__ import annotations

import pytest

from tests.infra.deploy_matrix import SETTING_TARGETS, Target
from tests.infra.test_deploy_matrix import synthesized


@pytest.mark.parametrize("target", SETTING_TARGETS, ids=str)
def test_synth_validations_pass_with_account_and_region(target: Target) -> None:
    failures = target.unexpected(synthesized(target).validation_failures)
    assert not failures, f"{target}: " + "\n".join(failures)
