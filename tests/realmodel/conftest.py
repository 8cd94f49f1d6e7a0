"""Fixtures for tests against real model servers (see servers.py): one of each per session, on free ports.

``llama_server`` and ``llama_cpp_server`` yield a ``ModelServer``: ``base_url`` (ending in ``/v1``), ``model``
(``"smollm2"``), ``log()`` / ``log_mark()`` / ``refusals()`` over the server's own output, and ``ready_seconds``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# The in-process moto store and a qualifying flow, for the real-model tests that record what a model made.
from tests.integration.conftest import (  # noqa: F401 (fixtures)
    moto_services,
    provisioned_states,
    qualifying_flow,
    services,
)
from tests.realmodel.servers import ModelServer, start_llama_cpp_server, start_llama_server


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    """llama.cpp's llama-server (--jinja, 2 slots, 1 thread) on SmolLM2-135M."""
    server = start_llama_server(tmp_path_factory.mktemp("llama-server"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gemma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    """llama-server as above on Gemma 3 270M (the base model): the model report card's second family."""
    server = start_llama_server(tmp_path_factory.mktemp("gemma-server"), gemma=True)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def llama_cpp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    """llama-cpp-python's server (chatml-function-calling, 1 thread) on SmolLM2-135M."""
    server = start_llama_cpp_server(tmp_path_factory.mktemp("llama-cpp-server"))
    yield server
    server.stop()
