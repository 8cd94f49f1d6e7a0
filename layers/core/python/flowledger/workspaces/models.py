"""Bodies and views of the workspace and document routes.

Strict where a scalar is meant (a boolean is only ``true``/``false``); every free text is checked
storable (``store/storable.py``) before anything is written, so a value DynamoDB could not hold is a
422 naming its field, never a half-written upload.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_validator,
)

from flowledger.store.storable import require_storable
from flowledger.workspaces.schema_rules import (
    BASE64_PATTERN,
    HIDDEN_KIND_SHOWN,
    NEITHER_INLINE_NOR_PRESIGNED,
    NOT_ONE_SCOPE,
    NOTHING_CHANGES,
    file_name_not_of_kind,
)

WORKSPACE_PATTERN = r"^ws_[0-9A-Z]{26}$"
DOCUMENT_PATTERN = r"^dc_[0-9A-Z]{26}$"
SESSION_PATTERN = r"^ses_[0-9A-Z]{26}$"
# A user id as tokens carry it (the ``sub``); the same shape the audit ledger accepts as a token.
USER_PATTERN = r"^[A-Za-z0-9_.:@+=-]{1,128}$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"

WorkspaceKind = Literal["personal", "group", "public"]
Role = Literal["viewer", "editor", "owner"]
DocumentKind = Literal["text", "markdown", "pdf", "csv", "xlsx"]
NARRATIVE_KINDS: frozenset[str] = frozenset({"text", "markdown", "pdf"})
TABULAR_KINDS: frozenset[str] = frozenset({"csv", "xlsx"})
# The file name's extension must say what the kind says: the index and the engines read it.
EXTENSIONS: dict[str, tuple[str, ...]] = {
    "text": (".txt",),
    "markdown": (".md", ".markdown"),
    "pdf": (".pdf",),
    "csv": (".csv",),
    "xlsx": (".xlsx",),
}
RANK: dict[str, int] = {"viewer": 1, "editor": 2, "owner": 3}

# What str.strip() strips (str.isspace), so the document can say a name is not all whitespace.
_NOT_SPACE = "[^\\t-\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
Name = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=120, strip_whitespace=True),
    AfterValidator(require_storable),
    Field(json_schema_extra={"allOf": [{"pattern": _NOT_SPACE}]}),
]
# No path separators or control characters: a file name is a name, not a path.
FileName = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=255, pattern=r"^[^/\\\x00-\x1f\x7f]+$"),
    AfterValidator(require_storable),
]
Title = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=200), AfterValidator(require_storable)]
WorkspaceId = Annotated[str, StringConstraints(strict=True, pattern=WORKSPACE_PATTERN)]
SessionId = Annotated[str, StringConstraints(strict=True, pattern=SESSION_PATTERN)]
Sha256 = Annotated[str, StringConstraints(strict=True, pattern=SHA256_PATTERN)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- workspaces ----------------------------------------------------------------------------------


class WorkspaceCreate(_Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"not": HIDDEN_KIND_SHOWN})

    kind: WorkspaceKind
    name: Name
    visible: StrictBool | None = Field(None, description="public only: anyone with the documents scope may read")
    listed: StrictBool | None = Field(None, description="public only: appears in everyone's listing (needs visible)")

    @model_validator(mode="after")
    def _visibility_is_for_public_workspaces(self) -> WorkspaceCreate:
        if self.kind != "public" and (self.visible or self.listed):
            raise ValueError("only a public workspace can be visible or listed")
        if self.kind == "public" and self.listed and self.visible is False:
            raise ValueError("a listed workspace must be visible")
        return self


class VisibilityChange(_Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"not": NOTHING_CHANGES})

    visible: StrictBool | None = None
    listed: StrictBool | None = None

    @model_validator(mode="after")
    def _something_changes(self) -> VisibilityChange:
        if self.visible is None and self.listed is None:
            raise ValueError("send visible, listed or both")
        return self


class MemberChange(_Strict):
    role: Role


class WorkspaceView(BaseModel):
    workspace_id: str
    kind: WorkspaceKind
    name: str
    owner: str = Field(description="the user who created it")
    visible: bool
    listed: bool
    created_at: str
    role: Role | None = Field(None, description="the caller's role; none when they read a public workspace")


class WorkspacePage(BaseModel):
    workspaces: list[WorkspaceView]
    next_cursor: str | None = None


class MemberView(BaseModel):
    workspace_id: str
    user_id: str
    role: Role
    added_at: str
    added_by: str


class Revoked(BaseModel):
    workspace_id: str
    user_id: str
    revoked: bool = True


# ---- documents -----------------------------------------------------------------------------------


class _Upload(_Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"not": NEITHER_INLINE_NOR_PRESIGNED})

    kind: DocumentKind
    content_base64: StrictStr | None = Field(
        None,
        description="the whole body, base64, for small files; omit it to get a presigned S3 PUT URL",
        json_schema_extra={"minLength": 4, "pattern": BASE64_PATTERN},
    )
    size_bytes: StrictInt | None = Field(None, ge=1, description="presigned uploads: the body's exact size")
    sha256: Sha256 | None = Field(None, description="presigned uploads: the body's SHA-256, lowercase hex")
    title: Title | None = None

    @model_validator(mode="after")
    def _inline_or_declared(self) -> _Upload:
        if self.content_base64 is None and (self.size_bytes is None or self.sha256 is None):
            raise ValueError("a presigned upload (no content_base64) declares size_bytes and sha256")
        if self.content_base64 is not None and (self.size_bytes is not None or self.sha256 is not None):
            raise ValueError("size_bytes and sha256 are for presigned uploads; content_base64 carries its own")
        return self


class DocumentCreate(_Upload):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "not": {"anyOf": [NEITHER_INLINE_NOR_PRESIGNED, NOT_ONE_SCOPE, file_name_not_of_kind(EXTENSIONS)]}
        },
    )

    workspace_id: WorkspaceId | None = None
    session_id: SessionId | None = Field(None, description="a conversation upload: scoped to that chat session")
    file_name: FileName

    @model_validator(mode="after")
    def _one_scope(self) -> DocumentCreate:
        if (self.workspace_id is None) == (self.session_id is None):
            raise ValueError("send exactly one of workspace_id and session_id")
        return self


class VersionCreate(_Upload):
    file_name: FileName | None = Field(None, description="defaults to the document's current file name")


class Conversion(BaseModel):
    """What the tabular engine made of a version; ``not_tabular`` for narrative kinds."""

    status: Literal["converted", "not_converted", "not_tabular"]
    row_count: int | None = None
    columns: list[dict[str, str]] = Field(default_factory=list, description="name and type of each column")


class VersionView(BaseModel):
    document_id: str
    version: int
    status: Literal["awaiting_upload", "ready"]
    file_name: str
    kind: DocumentKind
    size_bytes: int
    sha256: str
    created_at: str
    created_by: str
    completed_at: str | None = None
    indexed: bool = Field(description="narrative kinds: searchable in the document's scope")
    conversion: Conversion


class DocumentView(BaseModel):
    document_id: str = Field(description="the revision family: a reference by this id resolves to the current version")
    scope: str = Field(description="workspace:<id> or conversation:<session id>")
    workspace_id: str | None = None
    session_id: str | None = None
    file_name: str
    kind: DocumentKind
    title: str | None = None
    current_version: int | None = Field(None, description="none until the first upload completes")
    latest_version: int
    created_by: str
    created_at: str
    updated_at: str


class DocumentPage(BaseModel):
    documents: list[DocumentView]
    next_cursor: str | None = None


class VersionPage(BaseModel):
    versions: list[VersionView]


class PresignedUpload(BaseModel):
    url: str
    method: Literal["PUT"] = "PUT"
    expires_in: int
    complete_path: str = Field(description="POST here once the PUT succeeded")


class UploadAnswer(BaseModel):
    document: DocumentView
    version: VersionView
    upload: PresignedUpload | None = Field(None, description="present when the body is to be PUT to S3")


class Deleted(BaseModel):
    document_id: str
    deleted: bool = True
