"""The rules every request passes that the route models do not state, written into the OpenAPI document.

Two kinds. The text rule (``request_text.py``) is stated as JSON Schema: every string a request
body holds, and every key, matches ``TEXT_PATTERN`` (no C0 control character but tab, LF and CR);
every query parameter matches ``PARAMETER_PATTERN`` (none at all); a free-form object's keys too
(a step's ``inputs``). Its nested strings would need a recursive schema, which client generators
cannot read, so that part is a rule of the second kind.

Rules JSON Schema cannot state (a cursor must be one this API issued; a value compared with
another value of the same body; a rule across two query parameters) are listed per operation in
``x-server-rules``, with the words the 422 says, and added to the operation's description and its
422 response: a client reads them there, and the contract test accepts a 422 on schema-valid input
only when it says one of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flowledger import control_characters

TEXT_PATTERN = control_characters.schema_pattern(control_characters.IN_TEXT)
PARAMETER_PATTERN = control_characters.schema_pattern(control_characters.IN_PARAMETERS)
_KEY = {"minLength": 1, "pattern": TEXT_PATTERN}  # DynamoDB keeps no empty map key
# Patterns of the route models that cannot match a control character (anchored, with only these
# characters and no negated class): they need no second pattern.
_SAFE_PATTERN_CHARACTERS = (
    set("^$[]{}(),|?*+-_.:@=/ ") | set("abcdefghijklmnopqrstuvwxyz") | set("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
)


@dataclass(frozen=True)
class ServerRule:
    """A rule the server enforces with a 422 that JSON Schema cannot state; ``says`` is in its message."""

    name: str
    rule: str
    says: tuple[str, ...]  # the 422 names one of these (in its message or its fields' type)


CURSOR = ServerRule(
    "issued_cursor",
    "`cursor` is a `next_cursor` this API returned, for the same filters",
    ("cursor is not one this API returned",),
)
# Statable only as a recursive schema, which client generators cannot read: left to the description.
NESTED_TEXT = ServerRule(
    "nested_text",
    "strings inside free-form objects (a step's `inputs`, `outputs`) hold no C0 control character but tab, LF and "
    "CR; the recorder writes recorded tool output's control characters as `\\u001b` escapes",
    ("control_character",),
)
# JSON Schema counts 12.0 as an integer; the models read JSON strictly and take only 12.
WHOLE_NUMBER = ServerRule("whole_number", "an integer is written without a fraction (12, not 12.0)", ("int_type",))
OWN_PARENT = ServerRule(
    "not_own_parent", "`parent_step_ids` never names the step's own `step_id`", ("cannot be its own parent",)
)
KNOWN_PARENT = ServerRule(
    "known_parents", "every id in `parent_step_ids` is a step of this flow", ("unknown parent step",)
)
PII_DECLARED = ServerRule(
    "pii_fields_declared",
    "`pii_fields.inputs`/`.outputs` name only keys of `inputs`/`outputs`",
    ("names fields not in",),
)
STORABLE = ServerRule(
    "storable",
    "free-form values nest at most 31 levels and numbers have at most 38 digits, within DynamoDB's range",
    ("not_storable",),
)
CONTENT = ServerRule(
    "content_of_kind",
    "`content_base64` decodes to a file of its `kind`: UTF-8 text, a readable PDF, CSV or XLSX",
    ("not UTF-8", "not a readable", "malformed_table", "the file is empty"),
)
STEP_RULES = (OWN_PARENT, KNOWN_PARENT, PII_DECLARED, STORABLE)
SERVER_RULES: dict[tuple[str, str], tuple[ServerRule, ...]] = {
    ("get", "/api/documents"): (
        ServerRule(
            "one_scope",
            "exactly one of the query parameters `workspace_id` and `session_id`",
            ("exactly one of workspace_id and session_id",),
        ),
    ),
    ("post", "/api/documents"): (CONTENT,),
    ("post", "/api/documents/{document_id}/versions"): (CONTENT,),
    ("post", "/api/reasoning/flows/{flow_id}/steps"): STEP_RULES,
    ("post", "/api/reasoning/flows/{flow_id}/steps:batch"): (
        *STEP_RULES,
        ServerRule("acyclic_batch", "parents name earlier steps: the batch's steps form no cycle", ("cycle",)),
        ServerRule("distinct_steps", "each `step_id` once in a batch", ("twice",)),
    ),
    ("post", "/api/chat"): (
        ServerRule(
            "source_not_target",
            "a compare's `source` is not one of its `targets`",
            ("the compare source cannot also be one of its targets",),
        ),
    ),
    ("get", "/admin/v1/reasoning/flows"): (
        ServerRule(
            "calendar_date", "`from`/`to` are real calendar dates or date-times (no 2026-02-30)", ("is not a date",)
        ),
        ServerRule("trace_alone", "`trace_id` takes no other filter", ("trace_id lists one trace's flows",)),
    ),
}


def state_rules(document: dict[str, Any]) -> None:
    """Write both kinds of rule into ``document`` (in place)."""
    schemas = document["components"]["schemas"]
    for name in _request_schemas(document):
        _state_text(schemas[name])
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query":
                    _state_text(parameter["schema"], PARAMETER_PATTERN)
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            if "schema" in body:
                _state_text(body["schema"])
            _state_server_rules(method, path, operation, schemas)


def server_rules(operation: dict[str, Any]) -> list[str]:
    """The words of the 422s an operation documents in ``x-server-rules`` (for the contract test)."""
    return [says for rule in operation.get("x-server-rules", []) for says in rule["says"]]


def _state_server_rules(method: str, path: str, operation: dict[str, Any], schemas: dict[str, Any]) -> None:
    rules = list(SERVER_RULES.get((method, path), ()))
    if any(p["name"] == "cursor" for p in operation.get("parameters", [])):
        rules.insert(0, CURSOR)
    body = json.dumps(_resolved(operation.get("requestBody", {}), schemas))
    if '"additionalProperties": true' in body:
        rules.append(NESTED_TEXT)
    if '"integer"' in body:
        rules.append(WHOLE_NUMBER)
    if not rules:
        return
    operation["x-server-rules"] = [{"name": r.name, "rule": r.rule, "says": list(r.says)} for r in rules]
    listed = "; ".join(r.rule for r in rules)
    stated = f"Also enforced (422, not expressible in the schema): {listed}."
    operation["description"] = f"{operation['description']}\n\n{stated}" if operation.get("description") else stated
    response = operation.setdefault("responses", {}).get("422")
    if response is not None:
        response["description"] = f"{response['description']}, or breaks a rule stated above: {listed}"


def _resolved(schema: Any, schemas: dict[str, Any]) -> list[Any]:
    """``schema`` and every component schema it reaches."""
    found: dict[str, Any] = {}
    todo = [schema]
    while todo:
        for name in _refs(todo.pop()):
            if name not in found and name in schemas:
                found[name] = schemas[name]
                todo.append(schemas[name])
    return [schema, *found.values()]


def _request_schemas(document: dict[str, Any]) -> set[str]:
    """The component schemas a request body reaches: the text rule binds what a client sends."""
    schemas = document["components"]["schemas"]
    found: set[str] = set()
    todo = [
        media["schema"]
        for item in document["paths"].values()
        for operation in item.values()
        for media in operation.get("requestBody", {}).get("content", {}).values()
    ]
    while todo:
        for name in _refs(todo.pop()):
            if name not in found and name in schemas:
                found.add(name)
                todo.append(schemas[name])
    return found


def _refs(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            yield ref.rsplit("/", 1)[1]
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def _state_text(schema: Any, pattern: str = TEXT_PATTERN) -> None:
    """Every string under ``schema`` gets ``pattern``; every free-form object holds ``PlainJson``."""
    if isinstance(schema, list):
        for item in schema:
            _state_text(item, pattern)
        return
    if not isinstance(schema, dict) or "$ref" in schema:
        return
    if _is_string(schema) and "enum" not in schema and "const" not in schema:
        if "pattern" not in schema:
            schema["pattern"] = pattern
        elif "[^" in schema["pattern"] or not set(schema["pattern"]) <= _SAFE_PATTERN_CHARACTERS:
            schema.setdefault("allOf", []).append({"pattern": pattern})
    if schema.get("type") == "object" and schema.get("additionalProperties") is True:
        schema["propertyNames"] = _KEY  # its values: NESTED_TEXT
    for key in ("properties", "$defs"):
        for value in schema.get(key, {}).values():
            _state_text(value, pattern)
    for key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "not"):
        if key in schema:
            _state_text(schema[key], pattern)


def _is_string(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "string" or (isinstance(kind, list) and "string" in kind)
