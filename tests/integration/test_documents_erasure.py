"""A patient's uploads on moto: each family a patient creates is linked to their subject (the sparse
``by_subject`` index), workspace documents and conversation uploads alike, and erasing one leaves no item,
chunk, object version or delete marker of it, touches nobody else's, and finishes a run cut short."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from flowledger.api.tokens import mint_token
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.knowledge.scopes import body_prefix, partition
from flowledger.local.datadir import LOCAL_AUDIENCE, LOCAL_ISSUER, DataDir
from flowledger.services import Services
from flowledger.subjects import subject_id_of
from flowledger.workspaces.erasure import DocumentErasure, erase_document, subject_documents
from flowledger.workspaces.store import counter_key, document_key
from tests.integration.test_documents import b64, found, upload
from tests.integration.test_workspaces import Api, make_api, workspace

PATIENT = "pat-0042"
SESSION = "ses_01JD0000000000000000000042"


@dataclass
class PatientApi(Api):
    """The gateway as in the documents tests, where a user named in ``patients`` has a token with that patient id."""

    patients: dict[str, str] = field(default_factory=dict)

    def token(self, sub: str, scopes: tuple[str, ...] = ("documents",)) -> str:
        return mint_token(
            private_key_pem=self.data_dir.private_key_pem(),
            kid=self.data_dir.key_id(),
            issuer=LOCAL_ISSUER,
            audience=LOCAL_AUDIENCE,
            sub=sub,
            scopes=list(scopes),
            patient_id=self.patients.get(sub),
        )


@pytest.fixture(name="api")
def patient_api(services: Services, data_dir: DataDir, jwks_url: str) -> PatientApi:
    made = make_api(services, data_dir, jwks_url)
    return PatientApi(made.gateway, made.data_dir, made.services, patients={"pat": PATIENT})


def family(api: Api, document_id: str) -> dict[str, Any]:
    aws = api.services.aws
    item = aws.dynamodb.get_item(TableName=aws.table_name("documents"), Key=document_key(document_id)).get("Item")
    assert item is not None
    return dict(item)


def conversation_upload(api: Api, sub: str, session_id: str, text: str) -> str:
    body = {"session_id": session_id, "file_name": "notes.txt", "kind": "text", "content_base64": b64(text.encode())}
    made = api.call(sub, "POST", "/api/documents", body)
    assert made.status_code == 201, made.text
    return str(made.json()["document"]["document_id"])


def replace(api: Api, sub: str, document_id: str, text: str) -> None:
    body = {"kind": "markdown", "content_base64": b64(text.encode())}
    response = api.call(sub, "POST", f"/api/documents/{document_id}/versions", body)
    assert response.status_code == 201, response.text


def items_of(api: Api, document_id: str) -> list[dict[str, Any]]:
    aws = api.services.aws
    return list(
        aws.dynamodb.query(
            TableName=aws.table_name("documents"),
            KeyConditionExpression="document_id = :d",
            ExpressionAttributeValues={":d": {"S": document_id}},
            ConsistentRead=True,
        )["Items"]
    )


def knowledge_of(api: Api, scope: str, document_id: str) -> list[str]:
    """The sort keys of the knowledge items of one document in one scope (chunks and metadata)."""
    aws = api.services.aws
    keys = aws.dynamodb.query(
        TableName=aws.table_name("knowledge"),
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": partition(scope)}},
        ConsistentRead=True,
    )["Items"]
    return [item["sk"]["S"] for item in keys if document_id in item["sk"]["S"]]


def stored_of(api: Api, scope: str, document_id: str) -> list[tuple[str, str]]:
    """Every object version and delete marker of one document in the documents bucket."""
    aws = api.services.aws
    found_versions: list[tuple[str, str]] = []
    for prefix in (f"files/{document_id}/", body_prefix(scope, document_id)):
        page = aws.s3.list_object_versions(Bucket=aws.bucket_name("documents"), Prefix=prefix)
        for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
            found_versions.append((entry["Key"], entry["VersionId"]))
    return found_versions


def live_count(api: Api, scope: str) -> int:
    aws = api.services.aws
    item = aws.dynamodb.get_item(TableName=aws.table_name("documents"), Key=counter_key(scope), ConsistentRead=True)
    return int(item["Item"]["documents"]["N"])


def test_a_patients_documents_are_linked_to_their_subject(api: PatientApi) -> None:
    workspace_id = workspace(api, "pat")
    answer = upload(api, "pat", workspace_id, "# Diary\n\nThe quokka dose was halved.")
    document_id = answer["document"]["document_id"]
    replace(api, "pat", document_id, "# Diary\n\nThe quokka dose was doubled.")
    upload_id = conversation_upload(api, "pat", SESSION, "My tapir allergy notes.")
    subject_id = subject_id_of(PATIENT)
    assert family(api, document_id)["subject_id"] == {"S": subject_id}
    assert family(api, upload_id)["subject_id"] == {"S": subject_id}
    assert sorted(subject_documents(api.services, subject_id)) == sorted([document_id, upload_id])
    assert "subject_id" not in answer["document"]  # the link is the erasure's, never shown
    assert subject_documents(api.services, subject_id_of("someone-else")) == []


def test_a_non_patients_upload_carries_no_subject(api: PatientApi) -> None:
    workspace_id = workspace(api, "ann")
    document_id = upload(api, "ann", workspace_id, "The ocelot rota is weekly.")["document"]["document_id"]
    upload_id = conversation_upload(api, "ann", "ses_01JD0000000000000000000043", "ocelot notes")
    assert "subject_id" not in family(api, document_id)
    assert "subject_id" not in family(api, upload_id)


def test_erasing_a_document_leaves_nothing_of_it_and_nothing_else_goes(api: PatientApi) -> None:
    aws = api.services.aws
    bucket = aws.bucket_name("documents")
    mine, theirs = workspace(api, "pat"), workspace(api, "ann")
    scope, conversation = f"workspace:{mine}", f"conversation:{SESSION}"
    document_id = upload(api, "pat", mine, "# Diary\n\nThe quokka dose was halved.")["document"]["document_id"]
    replace(api, "pat", document_id, "# Diary\n\nThe quokka dose was doubled.")
    upload_id = conversation_upload(api, "pat", SESSION, "My tapir allergy notes.")
    other_id = upload(api, "ann", theirs, "The quokka enclosure opens at nine.")["document"]["document_id"]
    # A delete marker over the first version's body, and an upload left unfinished: both must go too.
    aws.s3.delete_object(Bucket=bucket, Key=f"files/{document_id}/v1/original")
    aws.s3.create_multipart_upload(Bucket=bucket, Key=f"files/{document_id}/v3/original")
    other_before = (items_of(api, other_id), knowledge_of(api, f"workspace:{theirs}", other_id))
    other_stored = stored_of(api, f"workspace:{theirs}", other_id)
    assert len(items_of(api, document_id)) == 3 and live_count(api, scope) == 1
    stored = stored_of(api, scope, document_id)
    # Two originals and their delete marker, and the index's two scoped bodies.
    assert len(stored) == 5
    chunks = [sk for sk in knowledge_of(api, scope, document_id) if sk.startswith("chunk#")]
    assert chunks

    erased = erase_document(api.services, document_id)

    assert erased == DocumentErasure(items=3, objects=len(stored), chunks=len(chunks))
    assert items_of(api, document_id) == [] and knowledge_of(api, scope, document_id) == []
    assert stored_of(api, scope, document_id) == []
    assert aws.s3.list_multipart_uploads(Bucket=bucket, Prefix=f"files/{document_id}/").get("Uploads", []) == []
    assert live_count(api, scope) == 0
    assert found(api, "quokka dose", scope) == []
    assert subject_documents(api.services, subject_id_of(PATIENT)) == [upload_id]

    uploaded = erase_document(api.services, upload_id)
    assert uploaded.items == 2 and uploaded.objects == 2 and uploaded.chunks >= 1
    assert items_of(api, upload_id) == [] and knowledge_of(api, conversation, upload_id) == []
    assert stored_of(api, conversation, upload_id) == [] and live_count(api, conversation) == 0
    assert subject_documents(api.services, subject_id_of(PATIENT)) == []

    # Another user's document is untouched, and a second erasure finds nothing to count.
    assert (items_of(api, other_id), knowledge_of(api, f"workspace:{theirs}", other_id)) == other_before
    assert stored_of(api, f"workspace:{theirs}", other_id) == other_stored
    assert found(api, "quokka enclosure", f"workspace:{theirs}") == [other_id]
    assert erase_document(api.services, document_id) == DocumentErasure()
    assert erase_document(api.services, upload_id) == DocumentErasure()
    assert live_count(api, scope) == 0 and live_count(api, conversation) == 0


def test_a_deleted_document_is_erased_and_counted_out_once(api: PatientApi) -> None:
    mine = workspace(api, "pat")
    scope = f"workspace:{mine}"
    kept = upload(api, "pat", mine, "The ibex plan.")["document"]["document_id"]
    document_id = upload(api, "pat", mine, "The yak plan.")["document"]["document_id"]
    assert api.call("pat", "DELETE", f"/api/documents/{document_id}").status_code == 200
    assert live_count(api, scope) == 1  # deletion keeps the versions and bodies, and counts it out
    assert sorted(subject_documents(api.services, subject_id_of(PATIENT))) == sorted([kept, document_id])

    erased = erase_document(api.services, document_id)

    # The family and its version; the original (the index's scoped body went with the deletion).
    assert erased == DocumentErasure(items=2, objects=1, chunks=0)
    assert items_of(api, document_id) == [] and stored_of(api, scope, document_id) == []
    assert live_count(api, scope) == 1  # not counted out twice
    assert subject_documents(api.services, subject_id_of(PATIENT)) == [kept]


class FailingIndex:
    """A knowledge index whose removal fails: the erasure is cut short after the family was fenced."""

    def remove_document(self, document_id: str, *, scope: str) -> None:
        raise RuntimeError("injected")


def test_an_erasure_cut_short_is_finished_by_running_it_again(api: PatientApi) -> None:
    mine = workspace(api, "pat")
    scope = f"workspace:{mine}"
    document_id = upload(api, "pat", mine, "The dugong schedule.")["document"]["document_id"]
    with pytest.raises(RuntimeError, match="injected"):
        erase_document(api.services, document_id, index=FailingIndex())  # type: ignore[arg-type]
    assert "live_scope" not in family(api, document_id)  # no listing shows it, no write to it commits
    assert api.call("pat", "GET", f"/api/documents/{document_id}").status_code == 404
    assert live_count(api, scope) == 0

    erased = erase_document(api.services, document_id, index=KnowledgeIndex(api.services))

    assert erased.items == 2 and erased.objects == 2 and erased.chunks >= 1
    assert items_of(api, document_id) == [] and knowledge_of(api, scope, document_id) == []
    assert stored_of(api, scope, document_id) == [] and live_count(api, scope) == 0
