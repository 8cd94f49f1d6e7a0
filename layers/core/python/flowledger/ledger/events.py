"""Audit events and their hashes.

An event's hash is SHA-256 over the RFC 8785 (JCS) canonical JSON of every field but ``hash``;
``prev_hash`` links it to the event before it in its chain, from ``GENESIS_HASH`` on.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

GENESIS_HASH = "0" * 64
M = TypeVar("M", bound=BaseModel)
HexHash = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
# Payload values are counts, flags and identifier-like tokens: no spaces, so no free text from a
# model or a person (and with it, no narrative PHI) can be recorded.
Token = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:/@+=-]{1,128}$")]
PayloadValue = int | bool | None | Token
Action = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$", max_length=96)]
# What :func:`timestamp` writes: fixed width, so the text sorts in time order.
# chain-000 to chain-999, then chain-1000 to chain-4095 (``Ledger.chain_ids``; FLOWLEDGER_LEDGER_SHARDS: 4,096 at most).
CHAIN_ID = r"chain-(?:[0-9]{3}|[1-9][0-9]{3})"
CHAIN_ID_PATTERN = rf"^{CHAIN_ID}$"
TIMESTAMP_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$"
Timestamp = Annotated[str, StringConstraints(pattern=TIMESTAMP_PATTERN)]
MAX_PAYLOAD_KEYS = 32
MAX_SAFE_INT = 2**53 - 1  # RFC 8785 numbers are IEEE doubles: larger ints would not round-trip


class AuditEntry(BaseModel):
    """What a caller asks to record: the ledger adds the chain position, time and hashes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: Action
    actor: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    subject: Token  # the primary subject, e.g. "flow:01J...": the by_subject index finds its events
    refs: dict[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,40}$")], Token] = Field(
        default_factory=dict, max_length=16
    )
    payload: dict[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,40}$")], PayloadValue] = Field(
        default_factory=dict, max_length=MAX_PAYLOAD_KEYS
    )

    @field_validator("payload")
    @classmethod
    def _ints_round_trip(cls, payload: dict[str, PayloadValue]) -> dict[str, PayloadValue]:
        for key, value in payload.items():
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INT:
                raise ValueError(f"payload {key!r} is outside the safe integer range")
        return payload


class AuditEvent(AuditEntry):
    """A sealed event as stored in its chain."""

    event_id: str
    chain_id: Annotated[str, StringConstraints(pattern=CHAIN_ID_PATTERN)]
    seq: int = Field(ge=1)
    at: Timestamp
    prev_hash: HexHash
    hash: HexHash

    def unsealed(self) -> dict[str, Any]:
        """Every field but ``hash``: what the hash covers."""
        return self.model_dump(exclude={"hash"})


def canonical(value: Any) -> bytes:
    """RFC 8785 canonical JSON bytes."""
    return rfc8785.dumps(value)


def read_canonical(raw: bytes, model: type[M], error: type[ValueError], what: str) -> M:
    """A proof file's ``model``, or ``error``: it must parse, validate, and be its own RFC 8785 canonical form.

    A file has exactly one valid byte form (a single trailing newline may be added), so two readers can
    never disagree about what it says.
    """
    try:
        parsed = json.loads(raw)
        value = model.model_validate(parsed)
        expected = canonical(parsed)  # refuses NaN, infinities and integers past 2**53 (ValueErrors too)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise error(f"not {what}: {where + ': ' if where else ''}{first['msg']}") from None
    except ValueError as exc:
        raise error(f"not {what}: {str(exc).splitlines()[0]}") from None
    except RecursionError:  # JSON nested thousands deep: nothing these files hold
        raise error(f"not {what}: nested too deep") from None
    if raw not in (expected, expected + b"\n"):
        raise error("the file is not in RFC 8785 canonical form")
    return value


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def event_hash(fields: dict[str, Any]) -> str:
    """The hash of an event from its fields (``hash`` itself, if present, is ignored)."""
    return sha256_hex(canonical({k: v for k, v in fields.items() if k != "hash"}))


def event_id(chain_id: str, seq: int) -> str:
    """Where an event lives, as an id: ``chain-007.42``."""
    return f"{chain_id}.{seq}"


_EVENT_ID = re.compile(rf"^({CHAIN_ID})\.([1-9][0-9]*)$")


def parse_event_id(value: str) -> tuple[str, int]:
    match = _EVENT_ID.match(value)
    if not match:
        raise ValueError(f"not an event id: {value!r} (expected chain-NNN.SEQ)")
    return match.group(1), int(match.group(2))


def timestamp(moment: datetime) -> str:
    """UTC, microseconds, a fixed width: sorts as text in time order."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(value: str) -> datetime:
    """The moment a :func:`timestamp` names."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def seal(entry: AuditEntry, chain_id: str, seq: int, prev_hash: str, at: datetime) -> AuditEvent:
    """The event for ``entry`` at position ``seq`` of ``chain_id``, hashed."""
    fields = {
        **entry.model_dump(),
        "event_id": event_id(chain_id, seq),
        "chain_id": chain_id,
        "seq": seq,
        "at": timestamp(at),
        "prev_hash": prev_hash,
    }
    return AuditEvent(**fields, hash=event_hash(fields))
