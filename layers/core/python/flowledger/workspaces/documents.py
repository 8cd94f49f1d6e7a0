"""Documents in a workspace or a conversation: revision families, versions, uploads, the index.

The document id is the revision family's id: every replacement is a new version under it, so a
reference by id always resolves to the current version. Narrative kinds are indexed in the scoped
knowledge index under the document's scope with ``document_id`` = the family id; tabular kinds are
converted once to Parquet (stored next to the original) with typed columns and a row count.

Writes: every check (kind, size, text, the table's limits) runs before anything is stored; then the
bodies go to S3 under keys no item names yet, then the index, then one DynamoDB transaction with
the audit event, conditional on the caller's role (or session ownership), the family's version and
the scope's document count. If that transaction fails, the index is put back as it was; the only
residue is an unreferenced object in S3. Deleting a document removes it from the index and from
listings; its version items and bodies are kept as the record of what was uploaded. A family created
by a patient (a principal with a ``patient_id``) carries their ``subject_id``, so erasing the patient
finds it and removes it for good, versions and bodies too (``erasure.py``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from flowledger.errors import ConditionFailed, Conflict, InvalidInput, NotFound, PayloadTooLarge
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.knowledge.documents import MAX_DOCUMENT_BYTES
from flowledger.ledger.events import AuditEntry, timestamp
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.cursors import decode_cursor, encode_cursor
from flowledger.store.decoding import decoded
from flowledger.tabular.limits import DEFAULT_LIMITS, TabularLimits
from flowledger.workspaces.models import (
    DOCUMENT_PATTERN,
    EXTENSIONS,
    NARRATIVE_KINDS,
    TABULAR_KINDS,
    Conversion,
    Deleted,
    DocumentCreate,
    DocumentPage,
    DocumentView,
    PresignedUpload,
    UploadAnswer,
    VersionCreate,
    VersionPage,
    VersionView,
)
from flowledger.workspaces.service import WorkspaceService
from flowledger.workspaces.store import (
    FAMILY,
    claim_session,
    conversation_scope,
    count_update,
    document_key,
    session_owner,
    version_sk,
    workspace_scope,
)

logger = logging.getLogger("flowledger.workspaces")


@dataclass(frozen=True)
class DocumentLimits:
    """The bounds of uploads; each one broken is a 4xx before anything is stored."""

    max_narrative_bytes: int = MAX_DOCUMENT_BYTES  # what the knowledge index accepts
    max_documents_per_scope: int = 500
    presign_seconds: int = 900
    tabular: TabularLimits = field(default_factory=lambda: DEFAULT_LIMITS)

    def max_bytes(self, kind: str) -> int:
        return self.tabular.max_bytes if kind in TABULAR_KINDS else self.max_narrative_bytes


DEFAULT_DOCUMENT_LIMITS = DocumentLimits()


@dataclass(frozen=True)
class _Prepared:
    """A body that passed every check: what to store beside it and what the version records."""

    body: bytes
    conversion: Conversion
    parquet: bytes | None = None


class DocumentService:
    """Uploads, replacements, completion of presigned uploads, reads and deletion."""

    def __init__(self, services: Services, limits: DocumentLimits = DEFAULT_DOCUMENT_LIMITS, index: Any = None) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._table = services.aws.table_name("documents")
        self._bucket = services.aws.bucket_name("documents")
        self._limits = limits
        self._workspaces = WorkspaceService(services)
        self._index_instance = index

    @property
    def _index(self) -> Any:
        if self._index_instance is None:
            from flowledger.knowledge.index import KnowledgeIndex  # embeddings load only when a narrative is indexed

            self._index_instance = KnowledgeIndex(self._s)
        return self._index_instance

    # ---- writes ----------------------------------------------------------------------------------

    def create(self, principal: Principal, body: DocumentCreate) -> UploadAnswer:
        """A new document: its first version inline, or a presigned PUT for it (``documents.document.created``)."""
        now = timestamp(self._s.clock())
        if body.workspace_id is not None:
            scope = workspace_scope(body.workspace_id)
            self._workspaces.require(principal, body.workspace_id, "editor")
            guard = self._workspaces.member_guard(body.workspace_id, principal.id, "editor")
        else:
            assert body.session_id is not None
            scope = conversation_scope(body.session_id)
            owner = session_owner(self._s, body.session_id)
            if owner is not None and owner != principal.id:
                raise NotFound(f"no session {body.session_id}")
            guard = claim_session(self._s, body.session_id, principal.id, now)
        _check_file_name(body.file_name, body.kind)
        document_id = new_id("dc_")
        family = DocumentView(
            document_id=document_id,
            scope=scope,
            workspace_id=body.workspace_id,
            session_id=body.session_id,
            file_name=body.file_name,
            kind=body.kind,
            title=body.title,
            current_version=None,
            latest_version=1,
            created_by=principal.id,
            created_at=now,
            updated_at=now,
        )
        prepared = self._inline(body.kind, body.content_base64, body.file_name)
        version = self._version(family, 1, principal, now, prepared, body.size_bytes, body.sha256)
        if prepared is not None:
            family = family.model_copy(update={"current_version": 1})
        family_item = {**family.model_dump(), "sk": FAMILY, "live_scope": scope}
        fence = []
        if principal.patient_id:
            # A patient's upload is theirs to erase: the sparse by_subject index finds it (workspaces/erasure.py).
            # An erased patient uploads nothing (410 before the body is stored), nor one whose erasure begins now.
            subject_id = self._s.subject_keys.require_live_patient(principal.patient_id)
            self._s.subject_keys.key(subject_id, create=True)  # a subject with a key: retention finds their uploads
            family_item["subject_id"] = subject_id
            fence = [self._s.subject_keys.fence(subject_id)]
        write = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": items.to_item(family_item),
                    "ConditionExpression": "attribute_not_exists(document_id)",
                }
            },
            self._put_version(version),
            self._count(scope, +1),
            guard,
            *fence,
        ]
        messages = ["", "", f"this scope holds {self._limits.max_documents_per_scope} documents already", ""]
        messages[3] = "your role in the workspace changed" if body.workspace_id else "this session is another user's"
        messages.append("your data is being erased")
        self._store(family, version, prepared)
        self._audit("documents.document.created", principal, family, version, write, messages, restore_to=None)
        return self._answer(family, version)

    def add_version(self, principal: Principal, document_id: str, body: VersionCreate) -> UploadAnswer:
        """A replacement: a new version in the same family (``documents.version.created``)."""
        family = self._writable(principal, document_id)
        if body.kind != family.kind:
            raise InvalidInput(f"this document is {family.kind}; a replacement keeps its kind")
        file_name = body.file_name or family.file_name
        _check_file_name(file_name, body.kind)
        now = timestamp(self._s.clock())
        n = family.latest_version + 1
        prepared = self._inline(body.kind, body.content_base64, file_name)
        updated = family.model_copy(
            update={
                "latest_version": n,
                "file_name": file_name,
                "title": body.title or family.title,
                "updated_at": now,
                "current_version": n if prepared is not None else family.current_version,
            }
        )
        version = self._version(updated, n, principal, now, prepared, body.size_bytes, body.sha256)
        write = [
            self._update_family(updated, "latest_version = :seen", {":seen": family.latest_version}),
            self._put_version(version),
            self._guard(principal, family),
        ]
        messages = ["another version was added meanwhile; read the document again", "", "your access changed"]
        self._store(updated, version, prepared)
        self._audit("documents.version.created", principal, updated, version, write, messages, restore_to=family)
        return self._answer(updated, version)

    def complete(self, principal: Principal, document_id: str, n: int) -> UploadAnswer:
        """Verify a presigned upload (size, SHA-256), convert or index it, make it current (``.version.completed``)."""
        family = self._writable(principal, document_id)
        version = self._version_view(document_id, n)
        if version.status != "awaiting_upload":
            raise Conflict(f"version {n} is complete already")
        key = _original_key(document_id, n)
        try:
            body = self._s.aws.s3.get_object(Bucket=self._bucket, Key=key)["Body"].read(version.size_bytes + 1)
        except self._s.aws.s3.exceptions.NoSuchKey:
            raise Conflict(f"nothing was uploaded for version {n} yet; PUT the body to its URL first") from None
        if len(body) != version.size_bytes or hashlib.sha256(body).hexdigest() != version.sha256:
            raise InvalidInput("the uploaded object does not match the declared size_bytes and sha256")
        prepared = self._prepare(version.kind, body, version.file_name)
        now = timestamp(self._s.clock())
        becomes_current = family.current_version is None or family.current_version < n
        completed = version.model_copy(
            update={"status": "ready", "completed_at": now, "conversion": prepared.conversion}
        )
        completed = completed.model_copy(update={"indexed": becomes_current and version.kind in NARRATIVE_KINDS})
        updated = family.model_copy(update={"current_version": n, "updated_at": now} if becomes_current else {})
        seen = family.current_version
        family_condition = "attribute_not_exists(current_version)" if seen is None else "current_version = :seen"
        write = [
            self._update_family(updated, family_condition, {} if seen is None else {":seen": seen}),
            {
                "Put": {
                    "TableName": self._table,
                    "Item": items.to_item({**completed.model_dump(), "sk": version_sk(n)}),
                    "ConditionExpression": "#s = :awaiting",
                    "ExpressionAttributeNames": {"#s": "status"},
                    "ExpressionAttributeValues": {":awaiting": {"S": "awaiting_upload"}},
                }
            },
            self._guard(principal, family),
        ]
        messages = ["the document changed meanwhile; read it again", f"version {n} was completed meanwhile", ""]
        messages[2] = "your access changed"
        if prepared.parquet is not None:
            self._put_object(_parquet_key(document_id, n), prepared.parquet)
        if completed.indexed:
            self._index_version(updated, prepared.body, updated.file_name)
        self._audit(
            "documents.version.completed",
            principal,
            updated,
            completed,
            write,
            messages,
            restore_to=family if completed.indexed else None,
            indexed=completed.indexed,
        )
        return self._answer(updated, completed)

    def delete(self, principal: Principal, document_id: str) -> Deleted:
        """Remove a document from the index and from listings (``documents.document.deleted``); versions are kept."""
        family = self._writable(principal, document_id)
        now = timestamp(self._s.clock())
        narrative = family.kind in NARRATIVE_KINDS and family.current_version is not None
        if narrative:
            # NotFound: never indexed, or removed by an earlier attempt: nothing to take out.
            with contextlib.suppress(NotFound):
                self._index.remove_document(document_id, scope=family.scope)
        write = [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": document_key(document_id),
                    "UpdateExpression": "SET deleted_at = :now, updated_at = :now REMOVE live_scope",
                    "ConditionExpression": "attribute_exists(live_scope)",
                    "ExpressionAttributeValues": {":now": {"S": now}},
                }
            },
            self._count(family.scope, -1),
            self._guard(principal, family),
        ]
        try:
            self._s.ledger.append(
                AuditEntry(
                    action="documents.document.deleted",
                    actor=principal.actor,
                    subject=f"document:{document_id}",
                    refs={"scope": family.scope},
                    payload={"kind": family.kind, "versions": family.latest_version},
                ),
                write,
            )
        except Exception as exc:
            if narrative:
                self._restore_index(family)
            if isinstance(exc, ConditionFailed):
                raise Conflict("the document changed or was deleted meanwhile") from None
            raise
        return Deleted(document_id=document_id)

    # ---- reads -----------------------------------------------------------------------------------

    def get(self, principal: Principal, document_id: str) -> DocumentView:
        """A document the caller may read (its family: the current version's number and name)."""
        return self._readable(principal, document_id)

    def table(self, principal: Principal, document_id: str) -> tuple[DocumentView, VersionView, bytes]:
        """The current version of a readable tabular document: its family, its version, its Parquet bytes.

        404 when the caller may not read it; 422 when it is not a converted table.
        """
        family = self._readable(principal, document_id)
        if family.kind not in TABULAR_KINDS or family.current_version is None:
            raise InvalidInput(f"document {document_id} is not a table with a completed version")
        version = self._version_view(document_id, family.current_version)
        if version.conversion.status != "converted":
            raise InvalidInput(f"document {document_id} has no converted table")
        key = _parquet_key(document_id, version.version)
        body = self._s.aws.s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        return family, version, body

    def versions(self, principal: Principal, document_id: str) -> VersionPage:
        """Every version of a readable document, oldest first."""
        self._readable(principal, document_id)
        response = self._db.query(
            TableName=self._table,
            KeyConditionExpression="document_id = :d AND begins_with(sk, :v)",
            ExpressionAttributeValues={":d": {"S": document_id}, ":v": {"S": "v#"}},
            ConsistentRead=True,
        )
        return VersionPage(versions=[_version_of(item) for item in response.get("Items", [])])

    def page(
        self, principal: Principal, workspace_id: str | None, session_id: str | None, limit: int, cursor: str | None
    ) -> DocumentPage:
        """The live documents of one workspace or conversation the caller may read, newest first."""
        if (workspace_id is None) == (session_id is None):
            raise InvalidInput("give exactly one of workspace_id and session_id")
        scope = workspace_scope(workspace_id) if workspace_id else conversation_scope(str(session_id))
        if not self._workspaces.may_read(principal, scope):
            raise NotFound(f"no {'workspace' if workspace_id else 'session'} {workspace_id or session_id}")
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "by_scope",
            "KeyConditionExpression": "live_scope = :s",
            "ExpressionAttributeValues": {":s": {"S": scope}},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if cursor is not None:
            created_at, document_id = _document_position(cursor)
            request["ExclusiveStartKey"] = {
                "live_scope": {"S": scope},
                "created_at": {"S": created_at},
                **document_key(document_id),
            }
        response = self._db.query(**request)
        found = response.get("Items", [])
        views = [_family_of(item) for item in found]
        next_cursor = None
        if "LastEvaluatedKey" in response and views:
            next_cursor = encode_cursor([views[-1].created_at, views[-1].document_id])
        return DocumentPage(documents=views, next_cursor=next_cursor)

    # ---- helpers ---------------------------------------------------------------------------------

    def _family(self, document_id: str) -> dict[str, Any] | None:
        item = self._db.get_item(TableName=self._table, ConsistentRead=True, Key=document_key(document_id)).get("Item")
        return item if item and "live_scope" in item else None

    def _readable(self, principal: Principal, document_id: str) -> DocumentView:
        item = self._family(document_id)
        if item is None:
            raise NotFound(f"no document {document_id}")
        family = _family_of(item)
        if not self._workspaces.may_read(principal, family.scope):
            raise NotFound(f"no document {document_id}")  # another's document does not exist for this caller
        return family

    def _writable(self, principal: Principal, document_id: str) -> DocumentView:
        family = self._readable(principal, document_id)
        if family.workspace_id is not None:
            self._workspaces.require(principal, family.workspace_id, "editor")
        return family

    def _guard(self, principal: Principal, family: DocumentView) -> dict[str, Any]:
        if family.workspace_id is not None:
            return self._workspaces.member_guard(family.workspace_id, principal.id, "editor")
        return claim_session(self._s, str(family.session_id), principal.id, family.created_at)

    def _inline(self, kind: str, content_base64: str | None, file_name: str) -> _Prepared | None:
        if content_base64 is None:
            return None
        try:
            body = base64.b64decode(content_base64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput("content_base64 is not valid base64") from None
        return self._prepare(kind, body, file_name)

    def _prepare(self, kind: str, body: bytes, file_name: str) -> _Prepared:
        """Every check on a body, before anything is stored: size, then text or table (and its limits)."""
        if len(body) > self._limits.max_bytes(kind):
            raise PayloadTooLarge(f"{file_name}: larger than {self._limits.max_bytes(kind)} bytes for {kind}")
        if not body:
            raise InvalidInput(f"{file_name}: the file is empty")
        if kind in TABULAR_KINDS:
            table = convert_tabular_version(body, kind, self._limits.tabular)
            columns = [{"name": c.name, "type": c.type} for c in table.columns]
            conversion = Conversion(status="converted", row_count=table.row_count, columns=columns)
            return _Prepared(body, conversion, table.parquet)
        from flowledger.knowledge.documents import prepare_document

        prepare_document(file_name, body)  # the index's own checks (UTF-8 text, a readable PDF), run first
        return _Prepared(body, Conversion(status="not_tabular"))

    def _version(
        self,
        family: DocumentView,
        n: int,
        principal: Principal,
        now: str,
        prepared: _Prepared | None,
        size_bytes: int | None,
        sha256: str | None,
    ) -> VersionView:
        if prepared is None:
            assert size_bytes is not None and sha256 is not None
            if size_bytes > self._limits.max_bytes(family.kind):
                raise PayloadTooLarge(f"larger than {self._limits.max_bytes(family.kind)} bytes for {family.kind}")
        return VersionView(
            document_id=family.document_id,
            version=n,
            status="ready" if prepared else "awaiting_upload",
            file_name=family.file_name,
            kind=family.kind,
            size_bytes=len(prepared.body) if prepared else int(size_bytes or 0),
            sha256=hashlib.sha256(prepared.body).hexdigest() if prepared else str(sha256),
            created_at=now,
            created_by=principal.id,
            completed_at=now if prepared else None,
            indexed=bool(prepared) and family.kind in NARRATIVE_KINDS,
            conversion=prepared.conversion if prepared else Conversion(status="not_converted"),
        )

    def _store(self, family: DocumentView, version: VersionView, prepared: _Prepared | None) -> None:
        """Bodies to S3, then the index: under keys and an id no committed item names yet."""
        if prepared is None:
            return
        self._put_object(_original_key(family.document_id, version.version), prepared.body)
        if prepared.parquet is not None:
            self._put_object(_parquet_key(family.document_id, version.version), prepared.parquet)
        if version.indexed:
            self._index_version(family, prepared.body, version.file_name)

    def _index_version(self, family: DocumentView, body: bytes, file_name: str) -> None:
        self._index.add_document(
            file_name, body, scope=family.scope, document_id=family.document_id, title=family.title
        )

    def _restore_index(self, family: DocumentView) -> None:
        """Put the index back to the family's committed state after a write that did not commit."""
        try:
            if family.current_version is None or family.kind not in NARRATIVE_KINDS:
                self._index.remove_document(family.document_id, scope=family.scope)
                return
            key = _original_key(family.document_id, family.current_version)
            body = self._s.aws.s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
            self._index_version(family, body, family.file_name)
        except NotFound:
            pass
        except Exception:  # the write's own error is what the caller must see; this one is logged
            logger.exception("could not restore the index of document %s", family.document_id)

    def _audit(
        self,
        action: str,
        principal: Principal,
        family: DocumentView,
        version: VersionView,
        write: list[dict[str, Any]],
        messages: list[str],
        restore_to: DocumentView | None,
        indexed: bool | None = None,
    ) -> None:
        try:
            self._s.ledger.append(
                AuditEntry(
                    action=action,
                    actor=principal.actor,
                    subject=f"document:{family.document_id}",
                    refs={"scope": family.scope},
                    payload={
                        "kind": family.kind,
                        "version": version.version,
                        "status": version.status,
                        "size_bytes": version.size_bytes,
                        "indexed": version.indexed,
                        "conversion": version.conversion.status,
                    },
                ),
                write,
            )
        except Exception as exc:
            if indexed if indexed is not None else version.indexed:
                self._restore_index(restore_to or family.model_copy(update={"current_version": None}))
            if isinstance(exc, ConditionFailed):
                raise Conflict(messages[exc.index] or "the document changed meanwhile; retry") from None
            raise

    def _answer(self, family: DocumentView, version: VersionView) -> UploadAnswer:
        upload = None
        if version.status == "awaiting_upload":
            url = self._s.aws.s3.generate_presigned_url(
                "put_object",
                Params={"Bucket": self._bucket, "Key": _original_key(family.document_id, version.version)},
                ExpiresIn=self._limits.presign_seconds,
            )
            upload = PresignedUpload(
                url=url,
                expires_in=self._limits.presign_seconds,
                complete_path=f"/api/documents/{family.document_id}/versions/{version.version}/complete",
            )
        return UploadAnswer(document=family, version=version, upload=upload)

    def _put_object(self, key: str, body: bytes) -> None:
        self._s.aws.s3.put_object(Bucket=self._bucket, Key=key, Body=body)

    def _put_version(self, version: VersionView) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self._table,
                "Item": items.to_item({**version.model_dump(), "sk": version_sk(version.version)}),
                "ConditionExpression": "attribute_not_exists(document_id)",
            }
        }

    def _update_family(self, family: DocumentView, condition: str, seen: dict[str, int]) -> dict[str, Any]:
        values = items.to_item(
            {
                ":latest": family.latest_version,
                ":name": family.file_name,
                ":updated": family.updated_at,
                ":current": family.current_version,
                ":title": family.title,
                **seen,
            }
        )
        update = "SET latest_version = :latest, file_name = :name, updated_at = :updated"
        if family.current_version is not None:
            update += ", current_version = :current"
        if family.title is not None:
            update += ", title = :title"
        used = {k: v for k, v in values.items() if k in update or k in condition}
        return {
            "Update": {
                "TableName": self._table,
                "Key": document_key(family.document_id),
                "UpdateExpression": update,
                "ConditionExpression": f"attribute_exists(live_scope) AND {condition}",
                "ExpressionAttributeValues": used,
            }
        }

    def _count(self, scope: str, delta: int) -> dict[str, Any]:
        return count_update(self._s, scope, delta, self._limits.max_documents_per_scope if delta > 0 else None)

    def _version_view(self, document_id: str, n: int) -> VersionView:
        item = self._db.get_item(
            TableName=self._table, ConsistentRead=True, Key=document_key(document_id, version_sk(n))
        ).get("Item")
        if item is None:
            raise NotFound(f"document {document_id} has no version {n}")
        return _version_of(item)


def convert_tabular_version(body: bytes, kind: str, limits: TabularLimits) -> Any:
    """A tabular version converted once by the tabular engine: Parquet, typed columns, row count.

    Raises the engine's 413 (a limit) or 422 (not a table) before anything is stored.
    """
    from flowledger.tabular.convert import convert_table  # DuckDB loads only when a table is uploaded

    return convert_table(body, kind, limits)  # type: ignore[arg-type]


def _check_file_name(file_name: str, kind: str) -> None:
    if PurePath(file_name).suffix.lower() not in EXTENSIONS[kind]:
        raise InvalidInput(f"a {kind} document's file name ends in {' or '.join(EXTENSIONS[kind])}")


def _original_key(document_id: str, n: int) -> str:
    return f"files/{document_id}/v{n}/original"


def _parquet_key(document_id: str, n: int) -> str:
    return f"files/{document_id}/v{n}/table.parquet"


def _family_of(item: dict[str, Any]) -> DocumentView:
    document_id = item.get("document_id", {}).get("S", "?")
    return decoded(
        item,
        lambda v: DocumentView.model_validate({k: v[k] for k in DocumentView.model_fields if k in v}),
        "document",
        document_id,
    )


def _version_of(item: dict[str, Any]) -> VersionView:
    document_id = item.get("document_id", {}).get("S", "?")
    return decoded(
        item,
        lambda v: VersionView.model_validate({k: v[k] for k in VersionView.model_fields if k in v}),
        "document version",
        document_id,
    )


def _document_position(cursor: str) -> tuple[str, str]:
    position = decode_cursor(cursor)
    if (
        isinstance(position, list)
        and len(position) == 2
        and all(isinstance(p, str) for p in position)
        and re.fullmatch(DOCUMENT_PATTERN, position[1])
    ):
        return position[0], position[1]
    raise InvalidInput("cursor is not one this API returned")
