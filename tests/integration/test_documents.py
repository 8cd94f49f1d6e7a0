"""Documents through the local gateway on moto: uploads inline and through a presigned S3 PUT, revision
families whose id always resolves to the current version, the scoped index, tabular conversion, limits
and no half-writes."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
import requests
from botocore.exceptions import ClientError

from flowledger.errors import Conflict, PayloadTooLarge
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.local.datadir import DataDir
from flowledger.services import Services, bootstrap
from flowledger.tabular.limits import TabularLimits
from flowledger.workspaces.documents import DocumentLimits, DocumentService
from flowledger.workspaces.models import DocumentCreate
from tests.integration.test_workspaces import Api, make_api, member, user, workspace


@pytest.fixture(name="api")
def documents_api(services: Services, data_dir: DataDir, jwks_url: str) -> Api:
    return make_api(services, data_dir, jwks_url)


CSV = b"region,units,price\nnorth,3,1.5\nsouth,5,2.25\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def upload(api: Api, sub: str, workspace_id: str, text: str, name: str = "ops.md") -> Any:
    response = api.call(
        sub,
        "POST",
        "/api/documents",
        {"workspace_id": workspace_id, "file_name": name, "kind": "markdown", "content_base64": b64(text.encode())},
    )
    assert response.status_code == 201, response.text
    return response.json()


def found(api: Api, query: str, scope: str) -> list[str]:
    result = KnowledgeIndex(api.services).lookup(query, 5, scopes=[scope])
    return [hit.document_id for hit in result.documents]


def test_an_upload_is_indexed_in_its_workspace_scope_only(api: Api) -> None:
    mine, other = workspace(api, "ann"), workspace(api, "ann", name="Other")
    answer = upload(api, "ann", mine, "# Runbook\n\nRestart the zebra queue when it stalls.")
    document_id = answer["document"]["document_id"]
    assert answer["version"]["status"] == "ready" and answer["version"]["indexed"] is True
    assert answer["upload"] is None
    assert found(api, "zebra queue", f"workspace:{mine}") == [document_id]
    assert found(api, "zebra queue", f"workspace:{other}") == []
    assert api.call("bob", "GET", f"/api/documents/{document_id}").status_code == 404  # not a member
    member(api, "ann", mine, "bob", "viewer")
    assert api.call("bob", "GET", f"/api/documents/{document_id}").status_code == 200
    assert upload_status(api, "bob", mine) == 403  # a viewer reads, an editor writes
    [event] = api.events("documents.document.created")
    assert (event.actor, event.subject, event.refs) == (
        "user:ann",
        f"document:{document_id}",
        {"scope": f"workspace:{mine}"},
    )


def upload_status(api: Api, sub: str, workspace_id: str) -> int:
    body = {"workspace_id": workspace_id, "file_name": "x.md", "kind": "markdown", "content_base64": b64(b"text")}
    return api.call(sub, "POST", "/api/documents", body).status_code


def test_a_replacement_is_a_new_version_under_the_same_id(api: Api) -> None:
    workspace_id = workspace(api, "ann")
    document_id = upload(api, "ann", workspace_id, "The walrus threshold is 10.")["document"]["document_id"]
    replaced = api.call(
        "ann",
        "POST",
        f"/api/documents/{document_id}/versions",
        {"kind": "markdown", "content_base64": b64(b"The narwhal threshold is 12.")},
    )
    assert replaced.status_code == 201, replaced.text
    assert replaced.json()["document"]["document_id"] == document_id
    current = api.call("ann", "GET", f"/api/documents/{document_id}").json()
    assert (current["current_version"], current["latest_version"]) == (2, 2)
    versions = api.call("ann", "GET", f"/api/documents/{document_id}/versions").json()["versions"]
    assert [v["version"] for v in versions] == [1, 2]
    # The reference by id finds the current revision; the old one's text no longer answers.
    assert found(api, "narwhal threshold", f"workspace:{workspace_id}") == [document_id]
    assert found(api, "walrus", f"workspace:{workspace_id}") == []
    wrong_kind = api.call(
        "ann", "POST", f"/api/documents/{document_id}/versions", {"kind": "csv", "content_base64": b64(CSV)}
    )
    assert wrong_kind.status_code == 422
    listing = api.call("ann", "GET", "/api/documents", workspace_id=workspace_id).json()
    assert [d["document_id"] for d in listing["documents"]] == [document_id]


def test_a_presigned_upload_is_verified_then_indexed(api: Api) -> None:
    workspace_id = workspace(api, "ann")
    text = b"# Large runbook\n\nThe okapi service restarts nightly."
    declared = {"size_bytes": len(text), "sha256": hashlib.sha256(text).hexdigest()}
    answer = api.call(
        "ann",
        "POST",
        "/api/documents",
        {"workspace_id": workspace_id, "file_name": "big.md", "kind": "markdown", **declared},
    ).json()
    document_id, upload_info = answer["document"]["document_id"], answer["upload"]
    assert answer["version"]["status"] == "awaiting_upload" and answer["document"]["current_version"] is None
    complete = upload_info["complete_path"]
    assert api.call("ann", "POST", complete).status_code == 409  # nothing PUT yet
    for wrong in (text[:-1], text[:-1] + b"?"):  # shorter; then the same size, other bytes
        assert requests.put(upload_info["url"], data=wrong, timeout=10).status_code == 200
        assert api.call("ann", "POST", complete).status_code == 422  # not the declared bytes
    assert found(api, "okapi", f"workspace:{workspace_id}") == []
    assert requests.put(upload_info["url"], data=text, timeout=10).status_code == 200
    done = api.call("ann", "POST", complete)
    assert done.status_code == 200, done.text
    assert done.json()["version"]["status"] == "ready" and done.json()["document"]["current_version"] == 1
    assert found(api, "okapi", f"workspace:{workspace_id}") == [document_id]
    assert api.call("ann", "POST", complete).status_code == 409  # once
    assert len(api.events("documents.version.completed")) == 1


def test_a_table_is_converted_once_with_typed_columns(api: Api) -> None:
    workspace_id = workspace(api, "ann")
    response = api.call(
        "ann",
        "POST",
        "/api/documents",
        {"workspace_id": workspace_id, "file_name": "sales.csv", "kind": "csv", "content_base64": b64(CSV)},
    )
    assert response.status_code == 201, response.text
    version = response.json()["version"]
    assert version["conversion"]["status"] == "converted" and version["conversion"]["row_count"] == 2
    types = {c["name"]: c["type"] for c in version["conversion"]["columns"]}
    assert types["region"] == "VARCHAR" and types["units"] != "VARCHAR" and types["price"] != "VARCHAR"
    assert version["indexed"] is False
    aws = api.services.aws
    key = f"files/{version['document_id']}/v1/table.parquet"
    assert aws.s3.get_object(Bucket=aws.bucket_name("documents"), Key=key)["Body"].read()[:4] == b"PAR1"


def test_conversation_uploads_belong_to_the_session_owner(api: Api) -> None:
    session_id = "ses_01JD0000000000000000000009"
    body = {"session_id": session_id, "file_name": "chat.txt", "kind": "text", "content_base64": b64(b"gecko notes")}
    made = api.call("ann", "POST", "/api/documents", body)
    assert made.status_code == 201, made.text
    document_id = made.json()["document"]["document_id"]
    assert made.json()["document"]["scope"] == f"conversation:{session_id}"
    assert api.call("bob", "POST", "/api/documents", body).status_code == 404  # ann's session now
    assert api.call("bob", "GET", f"/api/documents/{document_id}").status_code == 404
    assert api.call("ann", "GET", "/api/documents", session_id=session_id).json()["documents"][0]["document_id"] == (
        document_id
    )
    assert found(api, "gecko", f"conversation:{session_id}") == [document_id]


def test_limits_are_4xx_and_store_nothing(api: Api) -> None:
    workspace_id = workspace(api, "ann")
    tight = DocumentService(
        api.services,
        DocumentLimits(max_documents_per_scope=1, tabular=TabularLimits(max_rows=1, max_columns=2)),
    )

    def create(**fields: Any) -> Any:
        return DocumentCreate.model_validate({"workspace_id": workspace_id, **fields})

    with pytest.raises(PayloadTooLarge):  # rows over the bound
        tight.create(user("ann"), create(file_name="t.csv", kind="csv", content_base64=b64(CSV)))
    with pytest.raises(PayloadTooLarge):
        too_big = DocumentService(api.services, DocumentLimits(max_narrative_bytes=4))
        too_big.create(user("ann"), create(file_name="a.md", kind="markdown", content_base64=b64(b"12345")))
    tight.create(user("ann"), create(file_name="a.md", kind="markdown", content_base64=b64(b"one")))
    with pytest.raises(Conflict, match="holds 1 documents"):
        tight.create(user("ann"), create(file_name="b.md", kind="markdown", content_base64=b64(b"two")))
    assert len(api.call("ann", "GET", "/api/documents", workspace_id=workspace_id).json()["documents"]) == 1
    bad_name = api.call(
        "ann",
        "POST",
        "/api/documents",
        {"workspace_id": workspace_id, "file_name": "a.pdf", "kind": "markdown", "content_base64": b64(b"x")},
    )
    assert bad_name.status_code == 422
    assert len(api.events("documents.document.created")) == 1


def test_a_failed_commit_leaves_no_document_and_nothing_indexed(api: Api) -> None:
    workspace_id = workspace(api, "ann")

    ledger = api.services.aws.table_name("ledger")

    def refuse(params: dict[str, Any], **kwargs: Any) -> None:
        # Only the audited write fails: the index's own writes (made first) go through and must be undone.
        if any(ledger in str(entry) for entry in params.get("TransactItems", [])):
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "injected"}}, "TransactWriteItems")

    client = bootstrap().aws.dynamodb
    client.meta.events.register("before-parameter-build.dynamodb.TransactWriteItems", refuse)
    try:
        body = {"workspace_id": workspace_id, "file_name": "x.md", "kind": "markdown", "content_base64": b64(b"ibis")}
        assert api.call("ann", "POST", "/api/documents", body).status_code == 500
    finally:
        client.meta.events.unregister("before-parameter-build.dynamodb.TransactWriteItems", refuse)
    assert api.call("ann", "GET", "/api/documents", workspace_id=workspace_id).json()["documents"] == []
    assert found(api, "ibis", f"workspace:{workspace_id}") == []
    assert api.events("documents.document.created") == []


def test_a_deleted_document_leaves_the_index_and_the_listing(api: Api) -> None:
    workspace_id = workspace(api, "ann")
    document_id = upload(api, "ann", workspace_id, "The heron rota is weekly.")["document"]["document_id"]
    member(api, "ann", workspace_id, "bob", "viewer")
    assert api.call("bob", "DELETE", f"/api/documents/{document_id}").status_code == 403
    assert api.call("ann", "DELETE", f"/api/documents/{document_id}").status_code == 200
    assert api.call("ann", "GET", f"/api/documents/{document_id}").status_code == 404
    assert api.call("ann", "DELETE", f"/api/documents/{document_id}").status_code == 404
    assert found(api, "heron rota", f"workspace:{workspace_id}") == []
    assert api.call("ann", "GET", "/api/documents", workspace_id=workspace_id).json()["documents"] == []
    [event] = api.events("documents.document.deleted")
    assert event.subject == f"document:{document_id}"
