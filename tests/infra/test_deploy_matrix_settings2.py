"""The second third of the documented settings, each alone (tests/infra/deploy_matrix.py), through the matrix's
checks (test_deploy_matrix.py): a module of its own, so a parallel worker takes it while others take the rest."""

from __future__ import annotations

from tests.infra.deploy_matrix import SETTING_SHARES
from tests.infra.test_deploy_matrix import MatrixChecks


class TestSettingsAlone(MatrixChecks):
    targets = SETTING_SHARES[1]
