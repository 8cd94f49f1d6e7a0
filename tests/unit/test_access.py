from __future__ import annotations

import pytest

from flowledger.api.access import Access, access_for


@pytest.mark.parametrize(
    ("path", "access"),
    [
        ("/health", Access.PUBLIC),
        ("/openapi.json", Access.PUBLIC),
        ("/api/me", Access.JWT),
        ("/api/reasoning/flows/f1", Access.JWT),
        ("/admin/v1/me", Access.IAM),
        ("/admin/v1/reasoning/flows", Access.IAM),
        ("/admin/v10/me", Access.PUBLIC),  # not the admin prefix: no such route, so the resolver 404s
        ("/apix", Access.PUBLIC),
    ],
)
def test_each_path_prefix_gets_its_authentication(path: str, access: Access) -> None:
    assert access_for(path) is access
