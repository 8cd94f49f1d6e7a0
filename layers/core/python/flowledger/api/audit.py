"""Admin reads of the audit ledger (events, the latest checkpoint and its signed note) and the public ledger key."""

from __future__ import annotations

import base64
import re
from datetime import datetime
from typing import Annotated, Literal

from aws_lambda_powertools.event_handler.api_gateway import Response, Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, BeforeValidator, Field

from flowledger.api.app import services_of
from flowledger.api.principals import iam_principal
from flowledger.errors import InvalidInput, NotFound
from flowledger.ledger.audit import checkpoints_of, export_bundle
from flowledger.ledger.checkpoints import Checkpoint
from flowledger.ledger.events import AuditEvent, Token, timestamp
from flowledger.ledger.signed_note import VerifierKey
from flowledger.ledger.store import SubjectCursor
from flowledger.store.cursors import decode_cursor, encode_cursor

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ].*)?$")


def _iso_8601_only(value: object) -> object:
    """pydantic would read ``since=1700000000`` as Unix seconds; the route documents ISO 8601 only."""
    if isinstance(value, str) and not _ISO_DATE.match(value):
        raise ValueError("since must be an ISO 8601 date or date-time")
    return value


router = Router()
LEDGER_KEY_PATH = "/.well-known/flowledger/ledger-key"


class EventsPage(BaseModel):
    events: list[AuditEvent]
    next_cursor: str | None


def _chain_cursor(cursor: str | None, chains: int) -> tuple[int, int]:
    if cursor is None:
        return 0, 0
    match decode_cursor(cursor):
        case [int(chain_index), int(after_seq)] if 0 <= chain_index < chains and after_seq >= 0:
            return chain_index, after_seq
    raise InvalidInput("cursor is not one this API returned")


def _subject_cursor(cursor: str | None) -> SubjectCursor | None:
    if cursor is None:
        return None
    match decode_cursor(cursor):
        case [str(at), str(chain_id), int(seq)] if seq >= 1:
            return SubjectCursor(at, chain_id, seq)
    raise InvalidInput("cursor is not one this API returned")


@router.get("/admin/v1/audit/events", summary="Audit events, filtered and paginated", tags=["audit"])
def list_events(
    subject: Annotated[str | None, Query(max_length=128, description="primary subject, e.g. flow:ID")] = None,
    action: Annotated[str | None, Query(max_length=96)] = None,
    since: Annotated[
        datetime | None, BeforeValidator(_iso_8601_only), Query(description="ISO 8601; events at or after it")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> EventsPage:
    iam_principal(router.current_event.raw_event)
    ledger = services_of(router).ledger
    since_text = timestamp(since) if since else None
    if subject:
        # A subject's events are spread over the chains; its index lists them in time order.
        found, resume = ledger.subject_page(subject, limit, action, since_text, _subject_cursor(cursor))
        return EventsPage(events=found, next_cursor=encode_cursor(list(resume)) if resume else None)
    chains = ledger.chain_ids()
    filters = {"action": action} if action else {}
    chain_index, after_seq = _chain_cursor(cursor, len(chains))
    events: list[AuditEvent] = []
    while chain_index < len(chains):
        page, resume_after = ledger.query_page(chains[chain_index], after_seq, limit - len(events), filters, since_text)
        events += page
        if resume_after is not None:
            return EventsPage(events=events, next_cursor=encode_cursor([chain_index, resume_after]))
        chain_index, after_seq = chain_index + 1, 0
    return EventsPage(events=events, next_cursor=None)


@router.get("/admin/v1/audit/checkpoints/latest", summary="The latest Merkle checkpoint", tags=["audit"])
def latest_checkpoint() -> Checkpoint:
    iam_principal(router.current_event.raw_event)
    checkpoint = checkpoints_of(services_of(router)).latest()
    if checkpoint is None:
        raise NotFound("no checkpoint has been taken yet")
    return checkpoint


class CheckpointNote(BaseModel):
    checkpoint_id: str
    note: str = Field(description="The checkpoint as a C2SP signed note: its four lines and the signature")


@router.get(
    "/admin/v1/audit/checkpoints/latest/note",
    summary="The latest checkpoint as a signed note (check it with the ledger key)",
    tags=["audit"],
)
def latest_checkpoint_note() -> CheckpointNote:
    iam_principal(router.current_event.raw_event)
    store = checkpoints_of(services_of(router))
    latest = store.latest_id()
    note = store.note(latest) if latest else None
    if latest is None or note is None:
        raise NotFound("no signed checkpoint has been taken yet")
    return CheckpointNote(checkpoint_id=latest, note=note)


@router.get(
    "/admin/v1/audit/bundles",
    summary="The evidence bundle of one subject: its events, their proofs, the signed checkpoints",
    description=(
        "RFC 8785 canonical JSON (format flowledger-evidence-bundle/1), for tools/verify_bundle.py: the subject's "
        "events a checkpoint covers (at most 2,000), one multi-leaf inclusion proof a chain, the first checkpoint "
        "covering them as a signed and cosigned note, and the consistency proof from it to the latest. "
        "Events newer than the latest checkpoint are left out (the Flowledger-Left-Out header counts them)."
    ),
    tags=["audit"],
    responses={200: {"description": "The bundle: RFC 8785 canonical JSON", "content": {"application/json": {}}}},
)
def evidence_bundle(subject: Annotated[Token, Query(description="e.g. flow:fl_01J...")]) -> Response[bytes]:
    iam_principal(router.current_event.raw_event)
    bundled = export_bundle(services_of(router), subject)
    return Response(
        200,
        "application/json",
        bundled.bundle.to_bytes(),
        headers={"Flowledger-Left-Out": str(bundled.left_out)},
    )


class LedgerKey(BaseModel):
    """The key the ledger signs its checkpoints with, in the forms a verifier takes it."""

    origin: str = Field(description="The checkpoints' origin line, and the signing key's name")
    vkey: str = Field(description="The C2SP signed-note verifier key: name+keyid+base64(0x01 || public key)")
    key_id: str = Field(pattern=r"^[0-9a-f]{8}$", description="The 4-byte key id on every signature line, in hex")
    algorithm: Literal["Ed25519"]
    public_key: str = Field(description="The 32-byte Ed25519 public key, base64")
    public_key_pem: str = Field(description="The same key as a PEM SubjectPublicKeyInfo")


@router.get(
    LEDGER_KEY_PATH,
    summary="The public key and origin the ledger's checkpoints are signed with (public)",
    description=(
        "Anyone may read it: an auditor checks a checkpoint note, an evidence bundle or a witness's input "
        "with it, and needs nothing else of the operator's. Read from KMS once per process."
    ),
    tags=["audit"],
)
def ledger_key() -> LedgerKey:
    return ledger_key_of(services_of(router).checkpoint_signer.verifier)


def ledger_key_of(key: VerifierKey) -> LedgerKey:
    """The route's answer (and ``flowledger audit key``'s) for a verifier key."""
    public = Ed25519PublicKey.from_public_bytes(key.public_key)
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return LedgerKey(
        origin=key.name,
        vkey=key.vkey(),
        key_id=key.key_id.hex(),
        algorithm="Ed25519",
        public_key=base64.b64encode(key.public_key).decode(),
        public_key_pem=pem.decode(),
    )
