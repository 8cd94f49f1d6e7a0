"""Signed notes (C2SP ``signed-note``) and Ed25519 cosignatures (C2SP ``tlog-cosignature``), standard library only.

A note is UTF-8 text of newline-terminated lines, a blank line, then one line per signature::

    <text>
    (blank line)
    — <key name> base64(4-byte key id || signature)

The key id names the key: ``SHA-256(name || "\\n" || type || public key)[:4]``, type 0x01 for an Ed25519
note signature (over the text) and 0x04 for an Ed25519 cosignature (over ``cosignature/v1``, a ``time``
line and the text, with an 8-byte big-endian timestamp before the signature). A verifier key ("vkey") is
``<name>+<key id, hex>+base64(type || public key)``: the one string an auditor is given for a key.

The same rules are in ``verify_bundle.py``, which an outsider runs with nothing of this project.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

ED25519 = 0x01  # a note signature (signed-note)
COSIGNATURE_V1 = 0x04  # an Ed25519 cosignature (tlog-cosignature)
DASH = "\u2014 "  # em dash and a space: how every signature line starts
MAX_SIGNATURES = 100  # as golang.org/x/mod/sumdb/note: more is a malformed note


class NoteError(ValueError):
    """A malformed note or key, or a signature that does not verify; the message says which."""


@dataclass(frozen=True)
class Signature:
    """One signature line: the key's name, its 4-byte id, and what follows the id."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        return f"{DASH}{self.name} {base64.b64encode(self.key_id + self.signature).decode()}\n"


@dataclass(frozen=True)
class Note:
    text: str  # ends with a newline
    signatures: tuple[Signature, ...]

    def to_text(self) -> str:
        return self.text + "\n" + "".join(signature.line() for signature in self.signatures)


@dataclass(frozen=True)
class VerifierKey:
    """A named public key of a signature type (``ED25519`` or ``COSIGNATURE_V1``)."""

    name: str
    kind: int
    public_key: bytes  # 32 raw Ed25519 bytes

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.kind, self.public_key)

    def vkey(self) -> str:
        """The key as one string: ``name+keyid+base64(type || key)``."""
        material = base64.b64encode(bytes([self.kind]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{material}"


def key_id(name: str, kind: int, public_key: bytes) -> bytes:
    """The 4-byte id of a key: ``SHA-256(name || "\\n" || type || public key)[:4]``."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([kind]) + public_key).digest()[:4]


def check_name(name: str) -> str:
    """A key name as the format allows it: non-empty, no space, no ``+``, no newline."""
    if not name or any(c in name for c in " +\n\t") or not name.isprintable():
        raise NoteError(f"not a key name: {name!r} (non-empty, printable, no spaces and no '+')")
    return name


def parse_vkey(vkey: str) -> VerifierKey:
    """A verifier key from its string form; ``NoteError`` when any part is wrong."""
    parts = vkey.strip().split("+", 2)  # the key material is base64: it may hold "+" itself
    if len(parts) != 3:
        raise NoteError("a verifier key is name+keyid+key")
    name, hex_id, material = parts
    check_name(name)
    try:
        raw = base64.b64decode(material, validate=True)
        claimed = bytes.fromhex(hex_id)
    except ValueError:
        raise NoteError("the verifier key's id or key is not valid hex/base64") from None
    if len(raw) != 33 or raw[0] not in (ED25519, COSIGNATURE_V1) or len(hex_id) != 8:
        raise NoteError("only Ed25519 note (type 0x01) and cosignature (type 0x04) keys are supported")
    key = VerifierKey(name, raw[0], raw[1:])
    if key.key_id != claimed:
        raise NoteError(f"the verifier key's id {hex_id} is not the id of its name and key")
    return key


def parse_note(raw: str) -> Note:
    """The text and signature lines of a note; ``NoteError`` when it is not one."""
    if "\r" in raw or not raw.endswith("\n"):
        raise NoteError("a note is newline-terminated lines, without carriage returns")
    cut = raw.rfind("\n\n")
    if cut < 0:
        raise NoteError("a note needs a blank line between its text and its signatures")
    text, lines = raw[: cut + 1], raw[cut + 2 :].splitlines()
    if not lines or len(lines) > MAX_SIGNATURES:
        raise NoteError(f"a note carries 1 to {MAX_SIGNATURES} signatures")
    signatures = []
    for line in lines:
        if not line.startswith(DASH):
            raise NoteError("each signature line starts with an em dash and a space")
        name, _, blob = line[len(DASH) :].partition(" ")
        check_name(name)
        try:
            decoded = base64.b64decode(blob, validate=True)
        except ValueError:
            raise NoteError(f"the signature of {name} is not base64") from None
        if len(decoded) < 5:
            raise NoteError(f"the signature of {name} is too short")
        signatures.append(Signature(name, decoded[:4], decoded[4:]))
    return Note(text, tuple(signatures))


def cosigned_message(text: str, timestamp: int) -> bytes:
    """What a v1 cosignature signs: ``cosignature/v1``, the ``time`` line, then the note's text."""
    return f"cosignature/v1\ntime {timestamp}\n{text}".encode()


def signature_of(note: Note, key: VerifierKey) -> Signature | None:
    """The note's signature by ``key`` (same name and id), if there is one."""
    return next((s for s in note.signatures if s.name == key.name and s.key_id == key.key_id), None)


def verify(note: Note, key: VerifierKey) -> int | None:
    """Raise ``NoteError`` unless ``key`` signed ``note``; a cosignature's timestamp, None for a note signature."""
    found = signature_of(note, key)
    if found is None:
        raise NoteError(f"no signature by {key.name}+{key.key_id.hex()}")
    timestamp = None
    if key.kind == COSIGNATURE_V1:
        if len(found.signature) != 8 + 64:
            raise NoteError(f"the cosignature of {key.name} is not a timestamp and an Ed25519 signature")
        (timestamp,) = struct.unpack(">Q", found.signature[:8])
        message, raw = cosigned_message(note.text, timestamp), found.signature[8:]
    else:
        message, raw = note.text.encode(), found.signature
    try:
        Ed25519PublicKey.from_public_bytes(key.public_key).verify(raw, message)
    except (InvalidSignature, ValueError):
        raise NoteError(f"the signature of {key.name} does not verify") from None
    return timestamp
