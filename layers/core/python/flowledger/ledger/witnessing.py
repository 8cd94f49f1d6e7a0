"""Witnesses: each new checkpoint is submitted to independent witnesses, and their cosignatures kept beside it.

The protocol is C2SP ``tlog-witness`` adapted to a forest of per-chain trees: a witness cannot check a
list of hashes against one tree, so ``POST /add-checkpoint`` carries the JSON checkpoint the note names
and the ``flowledger-consistency-proof/1`` from the witness's last checkpoint (``AddCheckpoint``). A
witness that holds another checkpoint answers 409 with its size and, in ``Flowledger-Checkpoint-Id``,
that checkpoint's id: the proof is rebuilt from it and sent once more. What comes back is checked
against the witness's verifier key (type 0x04, ``tlog-cosignature``) and kept only if it verifies.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from flowledger.ledger.checkpoints import Checkpoint
from flowledger.ledger.events import canonical
from flowledger.ledger.signed_note import (
    COSIGNATURE_V1,
    NoteError,
    VerifierKey,
    parse_note,
    parse_vkey,
    signature_of,
    verify,
)

ADD_CHECKPOINT = "/add-checkpoint"
SIZE_CONTENT_TYPE = "text/x.tlog.size"  # a 409's body: the size the witness holds, as C2SP tlog-witness
CHECKPOINT_ID_HEADER = "Flowledger-Checkpoint-Id"  # a 409's header: the checkpoint the witness holds
# A witness refuses a body over MAX_REQUEST_BYTES (413), sized from the largest the ledger sends: WITNESSED_CHAINS
# chains, every one moved, each at MAX_CHAIN_EVENTS events (one chain takes at most some 500 events a second, its
# partition's 1,000 write units at 2 an event: 2^40 is 70 years of that) and so with a consistency path of up to
# 41 hashes (log2 of its size, plus one). A chain then costs a body 3.4 KB: its head three times (the checkpoint,
# and the proof's "from" and "to": some 200 bytes each) and its path (67 bytes a hash, as JSON hex); the whole
# body is 3,506,692 bytes (bench/witness_bound.py builds it; make bench has a witness cosign it). 4 MiB is 20 %
# over that, and under the 6 MB request a Lambda function URL passes (the witness's Lambda) even base64-encoded
# (5.6 MB). Beyond WITNESSED_CHAINS chains a checkpoint's body can pass it as the chains grow: see "Witnesses" in
# docs/audit-ledger.md. 1,024 chains serve 1,000 writers at once, each on a chain leased to it (ledger/leases.py).
WITNESSED_CHAINS = 1024
MAX_CHAIN_EVENTS = 1 << 40
MAX_REQUEST_BYTES = 4 << 20
MAX_ANSWER_BYTES = 64 * 1024  # a cosignature is one line; anything longer is not read


class WitnessEndpoint(BaseModel):
    """One witness the checkpoint job submits to: its base URL and its cosignature verifier key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
    vkey: str

    @field_validator("vkey")
    @classmethod
    def _a_cosignature_key(cls, vkey: str) -> str:
        if parse_vkey(vkey).kind != COSIGNATURE_V1:
            raise ValueError("a witness's verifier key is a cosignature key (type 0x04)")
        return vkey

    @property
    def key(self) -> VerifierKey:
        return parse_vkey(self.vkey)

    @property
    def name(self) -> str:
        return self.key.name


class AddCheckpoint(BaseModel):
    """The body of ``POST /add-checkpoint``, sent and read as RFC 8785 canonical JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    old_size: int = Field(ge=0)
    note: str
    checkpoint: Checkpoint
    consistency: dict[str, Any] | None  # a flowledger-consistency-proof/1, checked as its own canonical bytes

    def to_bytes(self) -> bytes:
        return canonical(
            {
                "old_size": self.old_size,
                "note": self.note,
                "checkpoint": self.checkpoint.model_dump(exclude_none=True),
                "consistency": self.consistency,
            }
        )


# (checkpoint id the witness holds, or None for none) -> (old_size, consistency proof from it, or None)
ProofFrom = Callable[[str | None], tuple[int, dict[str, Any] | None]]


class WitnessFailed(Exception):
    """A witness gave no good cosignature; the message says why."""


@dataclass
class Witnessing:
    """What the witnesses answered for one checkpoint: the good cosignature lines, and why the others failed."""

    cosignatures: list[str] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)  # witness name -> why


def submit_to_witnesses(
    witnesses: Sequence[WitnessEndpoint],
    note: str,
    checkpoint: Checkpoint,
    first_from: str | None,
    proof_from: ProofFrom,
    timeout: float,
) -> Witnessing:
    """Submit ``note`` to every witness at once, starting from ``first_from`` (the previous checkpoint's id).

    Each cosignature returned is verified with its witness's key; a witness that fails, times out or
    answers with a cosignature that does not verify is named in ``failures``, never raises.
    """
    outcome = Witnessing()
    if not witnesses:
        return outcome
    with ThreadPoolExecutor(max_workers=len(witnesses)) as pool:
        futures = {
            w.name: pool.submit(_cosignature, w, note, checkpoint, first_from, proof_from, timeout) for w in witnesses
        }
    for name, future in futures.items():
        try:
            outcome.cosignatures.append(future.result())
        except WitnessFailed as exc:
            outcome.failures[name] = str(exc)
    return outcome


def _cosignature(
    witness: WitnessEndpoint,
    note: str,
    checkpoint: Checkpoint,
    since: str | None,
    proof_from: ProofFrom,
    timeout: float,
) -> str:
    """The witness's cosignature line; a 409 names the checkpoint it holds, and the proof is rebuilt from it once."""
    for attempt in (1, 2):
        old_size, proof = proof_from(since)
        body = AddCheckpoint(old_size=old_size, note=note, checkpoint=checkpoint, consistency=proof).to_bytes()
        status, headers, answer = _post(witness.url.rstrip("/") + ADD_CHECKPOINT, body, timeout)
        if status == 409 and attempt == 1:
            since = headers.get(CHECKPOINT_ID_HEADER) or None
            continue
        if status != 200:
            shown = " ".join(answer.decode(errors="replace").split())[:200]
            raise WitnessFailed(f"HTTP {status}: {shown}")
        return _verified_line(answer, note, witness.key)
    raise AssertionError("unreachable")  # pragma: no cover


def _post(url: str, body: bytes, timeout: float) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)  # noqa: S310 (http(s) only)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (a configured http(s) URL)
            return response.status, dict(response.headers), response.read(MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read(MAX_ANSWER_BYTES)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise WitnessFailed(f"unreachable: {reason}") from None


def _verified_line(answer: bytes, note: str, key: VerifierKey) -> str:
    """The witness's own cosignature line from its answer, once it verifies over the note's text."""
    try:
        text = parse_note(note).text
        line = answer.decode()
        if line.count("\n") != 1 or not line.endswith("\n"):  # a blank line would move the note's text
            raise NoteError("the answer is not one signature line")
        cosigned = parse_note(text + "\n" + line)
        verify(cosigned, key)
    except (NoteError, UnicodeDecodeError) as exc:
        raise WitnessFailed(f"no good cosignature: {exc}") from None
    found = signature_of(cosigned, key)
    assert found is not None  # verify found it
    return found.line()


def cosigned_by(note: str, witnesses: Sequence[WitnessEndpoint]) -> set[str]:
    """The names of the witnesses whose cosignature ``note`` carries (the store keeps verified lines only)."""
    try:
        parsed = parse_note(note)
    except NoteError:
        return set()
    return {witness.name for witness in witnesses if signature_of(parsed, witness.key) is not None}
