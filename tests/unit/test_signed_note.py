"""Signed notes and cosignatures read and checked as the C2SP specs (and Go's reference implementation) say."""

from __future__ import annotations

import base64
import struct

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from flowledger.ledger.signed_note import (
    COSIGNATURE_V1,
    ED25519,
    Note,
    NoteError,
    Signature,
    VerifierKey,
    cosigned_message,
    parse_note,
    parse_vkey,
    verify,
)

# golang.org/x/mod/sumdb/note's own example: its key, its text, its signature.
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_SIGNATURE = (
    "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)


def raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def test_the_reference_implementations_note_verifies_and_reads_back_byte_for_byte() -> None:
    key = parse_vkey(GO_VKEY)
    assert (key.name, key.kind, key.key_id.hex()) == ("PeterNeumann", ED25519, "c74f20a3")
    assert key.vkey() == GO_VKEY
    note = parse_note(GO_TEXT + "\n" + GO_SIGNATURE)
    assert verify(note, key) is None
    assert note.to_text() == GO_TEXT + "\n" + GO_SIGNATURE


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.replace("problem,", "problem;"),  # the text
        lambda t: t.replace("x08go", "x08gp"),  # the signature
        lambda t: t.replace("— PeterNeumann", "— PaulNeumann"),  # the key name
    ],
)
def test_a_changed_note_does_not_verify(change: object) -> None:
    note = parse_note(change(GO_TEXT + "\n" + GO_SIGNATURE))  # type: ignore[operator]
    with pytest.raises(NoteError):
        verify(note, parse_vkey(GO_VKEY))


@pytest.mark.parametrize(
    "vkey",
    [
        GO_VKEY.replace("c74f20a3", "c74f20a4"),  # an id that is not the key's
        GO_VKEY.replace("PeterNeumann", "Peter Neumann"),  # a space in the name
        GO_VKEY + "+extra",
        GO_VKEY[:-4],  # a short key
    ],
)
def test_a_mangled_verifier_key_is_refused(vkey: str) -> None:
    with pytest.raises(NoteError):
        parse_vkey(vkey)


@pytest.mark.parametrize(
    "raw",
    [
        GO_TEXT + GO_SIGNATURE,  # no blank line
        GO_TEXT + "\n" + GO_SIGNATURE.replace("— ", "- "),  # not an em dash
        GO_TEXT + "\n",  # no signature
        (GO_TEXT + "\n" + GO_SIGNATURE).replace("\n", "\r\n"),
        GO_TEXT + "\n" + GO_SIGNATURE.rstrip("\n"),  # not newline-terminated
    ],
)
def test_a_malformed_note_is_refused(raw: str) -> None:
    with pytest.raises(NoteError):
        parse_note(raw)


def test_a_cosignature_signs_the_time_and_the_whole_text() -> None:
    witness = Ed25519PrivateKey.generate()
    key = VerifierKey("witness.example/w1", COSIGNATURE_V1, raw(witness))
    text = "example.com/log\n42\n" + base64.b64encode(bytes(32)).decode() + "\n"
    stamp = 1_796_000_000
    signed = struct.pack(">Q", stamp) + witness.sign(cosigned_message(text, stamp))
    note = Note(text, (Signature(key.name, key.key_id, signed),))
    assert verify(parse_note(note.to_text()), key) == stamp
    assert parse_vkey(key.vkey()) == key
    later = Note(text, (Signature(key.name, key.key_id, struct.pack(">Q", stamp + 1) + signed[8:]),))
    with pytest.raises(NoteError):  # the time is signed too
        verify(later, key)
    as_note_key = VerifierKey(key.name, ED25519, key.public_key)  # a different key id: not found
    with pytest.raises(NoteError, match="no signature"):
        verify(note, as_note_key)
