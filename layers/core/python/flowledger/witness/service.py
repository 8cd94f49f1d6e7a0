"""The witness's checks on ``POST /add-checkpoint``, in order, and the one place a refusal becomes HTTP.

1. the body is canonical JSON of ``AddCheckpoint`` and its note a signed note (400);
2. the note's origin is a log this witness was given (404), and that log's key signed it (403);
3. the note's lines are the checkpoint's (origin, size, root, ``checkpoint ID HASH``: 400), and the
   checkpoint matches its own hash and root (422);
4. ``old_size`` is the size the witness holds for the log (0 before any), else 409 with that size and,
   in ``Flowledger-Checkpoint-Id``, the checkpoint it holds;
5. the same checkpoint again is cosigned again; any other must come with a consistency proof from the
   held checkpoint to it that ``check_consistency`` accepts (422: a rewound or rewritten history);
6. the held checkpoint is swapped for it only if no other submission moved it meanwhile (409).

The answer is the cosignature line, ``— <name> base64(key id || 8-byte timestamp || signature)``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flowledger.ledger.checkpoint_notes import read_checkpoint_text
from flowledger.ledger.checkpoints import Checkpoint
from flowledger.ledger.consistency import InvalidConsistency, check_consistency
from flowledger.ledger.events import canonical, read_canonical
from flowledger.ledger.signed_note import (
    ED25519,
    NoteError,
    Signature,
    VerifierKey,
    cosigned_message,
    parse_note,
    parse_vkey,
    verify,
)
from flowledger.ledger.witnessing import (
    ADD_CHECKPOINT,
    CHECKPOINT_ID_HEADER,
    MAX_REQUEST_BYTES,
    SIZE_CONTENT_TYPE,
    AddCheckpoint,
)
from flowledger.witness.keys import WitnessKey
from flowledger.witness.state import WitnessState

TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    content_type: str = TEXT
    headers: Mapping[str, str] = field(default_factory=dict)


class MalformedRequest(ValueError):
    """The body is not the canonical JSON of an add-checkpoint request."""


class Refused(Exception):
    """The witness will not cosign; ``answer`` is what the submitter is told."""

    def __init__(self, status: int, message: str, **headers: str) -> None:
        super().__init__(message)
        self.answer = Answer(status, message + "\n", headers=headers)


def _stale(held: Checkpoint | None) -> Refused:
    """409: the size (and checkpoint) the witness holds, to build the proof from."""
    size = held.size if held else 0
    refused = Refused(409, str(size))
    headers = {CHECKPOINT_ID_HEADER: held.checkpoint_id} if held else {}
    refused.answer = Answer(409, f"{size}\n", SIZE_CONTENT_TYPE, headers)
    return refused


class Witness:
    """Cosigns checkpoints of the logs it was given (origin -> the log's note verifier key)."""

    def __init__(
        self, key: WitnessKey, logs: Sequence[VerifierKey], state: WitnessState, clock: Callable[[], float]
    ) -> None:
        self.key = key
        self.logs = {log.name: log for log in logs}
        self._state = state
        self._clock = clock

    def add_checkpoint(self, raw: bytes) -> str:
        """The cosignature line for the checkpoint ``raw`` submits; ``Refused`` names the first failed check."""
        request = read_canonical(raw, AddCheckpoint, MalformedRequest, "an add-checkpoint request")
        try:
            note = parse_note(request.note)
        except NoteError as exc:
            raise Refused(400, f"not a signed note: {exc}") from None
        origin = note.text.split("\n", 1)[0]
        log = self.logs.get(origin)
        if log is None:
            raise Refused(404, f"this witness does not witness {origin!r}")
        try:
            verify(note, log)
        except NoteError as exc:
            raise Refused(403, str(exc)) from None
        try:
            lines = read_checkpoint_text(note.text)
        except NoteError as exc:
            raise Refused(400, str(exc)) from None
        checkpoint = request.checkpoint
        said = (lines.size, lines.root, lines.checkpoint_id, lines.checkpoint_hash)
        if said != (checkpoint.size, checkpoint.root, checkpoint.checkpoint_id, checkpoint.hash):
            raise Refused(400, "the note's size, root or checkpoint line is not the checkpoint's")
        if checkpoint.recomputed_hash() != checkpoint.hash or checkpoint.recomputed_root() != checkpoint.root:
            raise Refused(422, f"checkpoint {checkpoint.checkpoint_id} does not match its hash or root")
        held = self._state.read(origin)
        if request.old_size != (held.size if held else 0):
            raise _stale(held)
        if held is None or held.hash != checkpoint.hash:
            self._check_extends(held, checkpoint, request.consistency)
            if not self._state.swap(origin, held, checkpoint):
                now = self._state.read(origin)
                if now is None or now.hash != checkpoint.hash:  # another submission of this one won: cosign it too
                    raise _stale(now)
        return self._cosign(note.text)

    def _check_extends(self, held: Checkpoint | None, checkpoint: Checkpoint, proof: dict[str, Any] | None) -> None:
        if held is None:
            if proof is not None:
                raise Refused(400, "old_size 0 comes with no consistency proof (consistency: null)")
            return
        if proof is None:
            raise Refused(400, f"a consistency proof from checkpoint {held.checkpoint_id} is needed")
        try:
            checked = check_consistency(canonical(proof))
        except InvalidConsistency as exc:
            raise Refused(422, f"the consistency proof does not check: {exc}") from None
        if checked.earlier != held or checked.later != checkpoint:
            raise Refused(422, f"the consistency proof is not from {held.checkpoint_id} to {checkpoint.checkpoint_id}")

    def _cosign(self, text: str) -> str:
        timestamp = int(self._clock())
        signature = self.key.sign(cosigned_message(text, timestamp))
        verifier = self.key.verifier
        return Signature(verifier.name, verifier.key_id, struct.pack(">Q", timestamp) + signature).line()


def answer(witness: Witness, method: str, path: str, body: bytes | None, length: int | None = None) -> Answer:
    """The HTTP answer to one request; nothing a submitter sends makes this raise."""
    if path.split("?", 1)[0] != ADD_CHECKPOINT:
        return Answer(404, f"not found: the witness answers POST {ADD_CHECKPOINT}\n")
    if method != "POST":
        return Answer(405, f"method not allowed: POST {ADD_CHECKPOINT}\n", headers={"Allow": "POST"})
    if (length or 0) > MAX_REQUEST_BYTES or body is None or len(body) > MAX_REQUEST_BYTES:
        return Answer(413, f"the body is over {MAX_REQUEST_BYTES} bytes\n")
    try:
        return Answer(200, witness.add_checkpoint(body))
    except Refused as refused:
        return refused.answer
    except MalformedRequest as exc:
        return Answer(400, f"{' '.join(str(exc).split())}\n")


def log_keys(vkeys: Sequence[str]) -> list[VerifierKey]:
    """The logs' note verifier keys (type 0x01); ``NoteError`` names the first that is not one."""
    keys = [parse_vkey(vkey) for vkey in vkeys]
    for key in keys:
        if key.kind != ED25519:
            raise NoteError(f"{key.name}'s key is a cosignature key: a log is given by its note key (type 0x01)")
    return keys
