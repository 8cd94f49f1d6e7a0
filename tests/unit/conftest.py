"""Unit tests run with the network switched off."""

from __future__ import annotations

from collections.abc import Iterator

import aws_xray_sdk.core  # noqa: F401 - its recorder opens a UDP socket at import; let it, before the switch-off
import pytest
from pytest_socket import disable_socket, enable_socket


@pytest.fixture(autouse=True)
def _no_network() -> Iterator[None]:
    disable_socket(allow_unix_socket=True)
    yield
    enable_socket()
