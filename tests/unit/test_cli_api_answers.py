"""The one line a refused request prints: the API's message, and each field it named with why."""

from __future__ import annotations

import json

from flowledger.cli.api_answers import refusal_line


def body(**fields: object) -> bytes:
    return json.dumps(
        {"error": "validation_error", "message": "the request does not match the schema", **fields}
    ).encode()


def test_each_field_is_shown_by_its_path_with_the_apis_message() -> None:
    fields = [
        {"loc": ["session_id"], "type": "string_pattern_mismatch", "msg": "String should match pattern '^ses_'"},
        {
            "loc": ["body", "document_ids", 2],
            "type": "string_too_short",
            "msg": "String should have at least 1 character",
        },
    ]
    assert refusal_line(422, body(fields=fields), "Unprocessable Entity") == (
        "the server answered 422: the request does not match the schema: session_id: String should match pattern"
        " '^ses_'; body.document_ids[2]: String should have at least 1 character"
    )


def test_past_three_fields_the_rest_are_counted() -> None:
    fields = [{"loc": [f"f{n}"], "msg": "Field required"} for n in range(5)]
    line = refusal_line(422, body(fields=fields), "Unprocessable Entity")
    assert line.endswith("f0: Field required; f1: Field required; f2: Field required; and 2 more")


def test_an_answer_without_fields_or_json_keeps_what_there_is() -> None:
    assert refusal_line(401, b'{"error": "unauthorized", "message": "the token has expired"}', "Unauthorized") == (
        "the server answered 401: the token has expired"
    )
    assert (
        refusal_line(502, b"<html>Bad Gateway</html>", "Bad Gateway")
        == "the server answered 502: <html>Bad Gateway</html>"
    )
    assert refusal_line(503, b"", "Service Unavailable") == "the server answered 503: Service Unavailable"
    # A field without a place is about the request as a whole.
    assert refusal_line(422, body(fields=[{"loc": [], "msg": "Invalid JSON"}]), "").endswith(
        "schema: the request: Invalid JSON"
    )
