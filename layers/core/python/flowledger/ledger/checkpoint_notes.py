"""Each checkpoint published as a C2SP checkpoint (``tlog-checkpoint``): a signed note an outsider can check.

The note's text is four lines::

    <origin>                          the deployment's ledger, e.g. flowledger/prod-7d3f/audit
    <tree size>                       every event the checkpoint covers: the sum of its chain heads' seqs
    <root, base64>                    the checkpoint's Merkle root over its chain heads
    checkpoint <id> <hash>            extension line: the JSON checkpoint these lines come from

and it is signed by the ledger's KMS key (Ed25519, ``ED25519_SHA_512`` over the text as it is) under
the key name ``origin``. Anyone given the verifier key (``flowledger audit key``, or the
``/.well-known/flowledger/ledger-key`` route) can check that the operator signed this root for this
size, without reading anything of the operator's.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from flowledger.ledger.checkpoints import Checkpoint
from flowledger.ledger.signed_note import ED25519, Note, NoteError, Signature, VerifierKey, check_name

KMS_ALGORITHM = "ED25519_SHA_512"  # pure Ed25519 over a RAW message: a note signature as signed-note defines it


@dataclass(frozen=True)
class CheckpointLines:
    """What a checkpoint note says, read back from its text."""

    origin: str
    size: int
    root: str  # hex, as the JSON checkpoint writes it
    checkpoint_id: str
    checkpoint_hash: str


def checkpoint_text(origin: str, checkpoint: Checkpoint) -> str:
    """The note text of ``checkpoint`` for the ledger named ``origin``."""
    root = base64.b64encode(bytes.fromhex(checkpoint.root)).decode()
    return f"{check_name(origin)}\n{checkpoint.size}\n{root}\ncheckpoint {checkpoint.checkpoint_id} {checkpoint.hash}\n"


def read_checkpoint_text(text: str) -> CheckpointLines:
    """The lines of a checkpoint note's text; ``NoteError`` when they are not the four this ledger writes."""
    lines = text.split("\n")
    if len(lines) != 5 or lines[-1] != "":
        raise NoteError("a checkpoint note's text is four lines: origin, size, root and the checkpoint line")
    origin, size, root, extension = lines[:4]
    words = extension.split(" ")
    if not size.isdigit() or (size != "0" and size.startswith("0")) or len(words) != 3 or words[0] != "checkpoint":
        raise NoteError("a checkpoint note's size is a decimal and its fourth line 'checkpoint ID HASH'")
    try:
        raw_root = base64.b64decode(root, validate=True)
    except binascii.Error:
        raise NoteError("a checkpoint note's root is not base64") from None
    if len(raw_root) != 32:
        raise NoteError("a checkpoint note's root is not a SHA-256 hash")
    return CheckpointLines(check_name(origin), int(size), raw_root.hex(), words[1], words[2])


def raw_public_key(der: bytes) -> bytes:
    """The 32 raw bytes of an Ed25519 public key given as DER SubjectPublicKeyInfo (what KMS exports)."""
    key = serialization.load_der_public_key(der)
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("the ledger's signing key is not an Ed25519 key (ECC_NIST_EDWARDS25519)")
    return key.public_bytes(encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw)


class KmsEd25519:
    """A KMS Ed25519 key (``ECC_NIST_EDWARDS25519``) known by a name and a signature type (a note's 0x01, a
    cosignature's 0x04); it signs RAW messages, and its public key is read from KMS once."""

    def __init__(self, kms: Any, key_id: str, name: str, kind: int) -> None:
        self._kms = kms
        self._key_id = key_id
        self.name = check_name(name)
        self.kind = kind

    @cached_property
    def verifier(self) -> VerifierKey:
        der = self._kms.get_public_key(KeyId=self._key_id)["PublicKey"]
        return VerifierKey(self.name, self.kind, raw_public_key(der))

    def sign(self, message: bytes) -> bytes:
        """Pure Ed25519 over ``message`` (one KMS ``Sign`` call)."""
        answer = self._kms.sign(KeyId=self._key_id, Message=message, MessageType="RAW", SigningAlgorithm=KMS_ALGORITHM)
        return bytes(answer["Signature"])


class CheckpointSigner:
    """Signs checkpoint notes with the ledger's KMS key; its verifier key is read once from KMS."""

    def __init__(self, kms: Any, key_id: str, origin: str) -> None:
        self.origin = check_name(origin)
        self._key = KmsEd25519(kms, key_id, self.origin, ED25519)

    @property
    def verifier(self) -> VerifierKey:
        """The ledger's verifier key: the origin as its name, and KMS's public key."""
        return self._key.verifier

    def sign(self, checkpoint: Checkpoint) -> Note:
        """The checkpoint's note, signed by KMS (one ``Sign`` call)."""
        text = checkpoint_text(self.origin, checkpoint)
        key = self.verifier
        return Note(text, (Signature(key.name, key.key_id, self._key.sign(text.encode())),))
