"""The erasure's compaction port: a no-op, asking nothing of the network, wherever no embedded store runs."""

from __future__ import annotations

import pytest

from flowledger.config import load_settings
from flowledger.store.compaction import compact_embedded_store, embedded_endpoint


@pytest.mark.parametrize(
    "endpoint",
    [
        None,  # AWS itself, or moto in this process (mock_aws)
        "https://dynamodb.eu-west-1.amazonaws.com",
        "http://10.0.0.12:4566",  # a stand-in elsewhere on the network keeps no files of ours here
        "https://127.0.0.1:4566",
    ],
)
def test_without_an_embedded_endpoint_nothing_is_asked_and_the_answer_is_false(
    endpoint: str | None, clean_environment: None
) -> None:
    settings = load_settings(aws_endpoint_url=endpoint)
    assert embedded_endpoint(settings) is None
    assert compact_embedded_store(settings) is False  # the network is off here: a request would raise


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("http://127.0.0.1:5123", "http://127.0.0.1:5123"),
        ("http://localhost:5123/", "http://localhost:5123"),
        ("http://[::1]:5123", "http://[::1]:5123"),
    ],
)
def test_a_loopback_http_endpoint_is_the_embedded_store(endpoint: str, expected: str, clean_environment: None) -> None:
    assert embedded_endpoint(load_settings(aws_endpoint_url=endpoint)) == expected
