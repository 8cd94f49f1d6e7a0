"""Reserved concurrency per function from ``flowledger:reservedConcurrency``: each named function reserves
its number, the others none (as without the setting); an unknown name or a count that is not a positive
integer fails the synth naming the setting."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App

from infra.constructs.concurrency import RESERVED_CONCURRENCY_CONTEXT, ReservedConcurrency, service_names
from infra.constructs.functions import ROOT, function_names
from tests.infra.synth import app_with, own_functions, resources_with

# Functions the default (prod) stack makes, by the service name each reports itself as.
RESERVED = {"chat": 20, "chat-buffered": 4, "jobs": 2, "authorizer": 30, "core": 5, "token_claims": 3}


@pytest.fixture(scope="module")
def reserved() -> dict[str, Any]:
    # As `cdk -c` gives it: a JSON string.
    return resources_with({RESERVED_CONCURRENCY_CONTEXT: json.dumps(RESERVED)})


def by_name(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Our functions by their service name (python_function's ``name`` unless the function gives its own)."""
    return {
        f["Properties"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]: f["Properties"]
        for f in own_functions(resources).values()
    }


def test_without_the_setting_no_function_reserves_concurrency(resources: dict[str, Any]) -> None:
    functions = by_name(resources)
    assert set(RESERVED) <= set(functions)
    assert not [name for name, f in functions.items() if "ReservedConcurrentExecutions" in f]


def test_each_named_function_reserves_its_number_and_the_others_none(reserved: dict[str, Any]) -> None:
    # The two chat functions run one folder's code, and each reserves its own number.
    found = {name: f.get("ReservedConcurrentExecutions") for name, f in by_name(reserved).items()}
    assert found == {name: RESERVED.get(name) for name in found}
    assert set(RESERVED) <= set(found)
    assert service_names() == tuple(sorted(function_names() | {"chat-buffered"}))


def test_the_names_are_the_function_folders() -> None:
    assert function_names() == {p.name for p in (ROOT / "functions").iterdir() if p.is_dir()}
    assert {"chat", "jobs", "authorizer", "token_claims", "core", "audit", "locked_bucket_emptier"} <= function_names()


def read(value: Any) -> ReservedConcurrency:
    return ReservedConcurrency.from_context(App(context={RESERVED_CONCURRENCY_CONTEXT: value}).node)


def test_the_setting_is_read_as_cdk_json_or_the_command_line_gives_it() -> None:
    assert read({"jobs": 2}) == read('{"jobs": 2}') == ReservedConcurrency({"jobs": 2})
    assert read("") == read({}) == ReservedConcurrency.from_context(App().node) == ReservedConcurrency()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"chats": 2}, "unknown key 'chats'"),
        ('{"jobs": 2, "cron": 1}', "unknown key 'cron'"),
        ({"jobs": 0}, "jobs must be a positive integer"),
        ({"jobs": -1}, "jobs must be a positive integer"),
        ({"jobs": 2.5}, "jobs must be a positive integer"),
        ({"jobs": "2"}, "jobs must be a positive integer"),
        ({"jobs": True}, "jobs must be a positive integer"),
        ("{not json", "must be a JSON object"),
        ("[2]", "must be an object with any of audit"),
        (5, "must be an object with any of audit"),
    ],
)
def test_a_bad_setting_fails_naming_it(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as failure:
        read(value)
    assert str(failure.value).startswith(RESERVED_CONCURRENCY_CONTEXT)


def test_a_bad_setting_fails_the_synth() -> None:
    with pytest.raises(ValueError, match="unknown key 'chats'") as failure:
        app_with({RESERVED_CONCURRENCY_CONTEXT: '{"chats": 2}'}).synth()
    assert str(failure.value).startswith(RESERVED_CONCURRENCY_CONTEXT)
