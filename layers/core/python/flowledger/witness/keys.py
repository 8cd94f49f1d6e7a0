"""A witness's Ed25519 key: a PEM file of its own (``flowledger witness init``) or a KMS key (its Lambda).

Either way the witness is known by one verifier key line, type 0x04 (``tlog-cosignature``), that the
logs it witnesses and anyone checking a cosigned checkpoint are given.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from flowledger.ledger.checkpoint_notes import KmsEd25519
from flowledger.ledger.signed_note import COSIGNATURE_V1, VerifierKey, check_name

NAME_LINE = "flowledger-witness: "  # the key file's first line names the witness; the PEM follows


class WitnessKeyError(ValueError):
    """The key file is missing, unreadable or not a witness key; the message says which."""


class WitnessKey(Protocol):
    @property
    def verifier(self) -> VerifierKey: ...

    def sign(self, message: bytes) -> bytes:
        """An Ed25519 signature of ``message``."""
        ...


class FileWitnessKey:
    """The witness's name and Ed25519 private key, from the file ``create`` wrote."""

    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        self.name = check_name(name)
        self._private_key = private_key

    @cached_property
    def verifier(self) -> VerifierKey:
        public = self._private_key.public_key().public_bytes(
            encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw
        )
        return VerifierKey(self.name, COSIGNATURE_V1, public)

    def sign(self, message: bytes) -> bytes:
        return self._private_key.sign(message)

    @classmethod
    def create(cls, path: Path, name: str) -> FileWitnessKey:
        """A new key, written to ``path`` (mode 0600, never over an existing file)."""
        key = cls(name, Ed25519PrivateKey.generate())
        pem = key._private_key.private_bytes(
            encoding=serialization.Encoding.PEM,
            format=serialization.PrivateFormat.PKCS8,
            encryption_algorithm=serialization.NoEncryption(),
        )
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise WitnessKeyError(f"{path} exists: a witness key is never overwritten") from None
        except OSError as exc:
            raise WitnessKeyError(f"cannot write {path}: {exc.strerror}") from None
        with os.fdopen(fd, "wb") as out:
            out.write(f"{NAME_LINE}{key.name}\n".encode() + pem)
        return key

    @classmethod
    def load(cls, path: Path) -> FileWitnessKey:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise WitnessKeyError(f"cannot read the witness key {path}: {exc.strerror}") from None
        first, _, pem = raw.partition(b"\n")
        if not first.startswith(NAME_LINE.encode()):
            raise WitnessKeyError(f"{path} is not a witness key (`flowledger witness init` writes one)")
        try:
            private_key = serialization.load_pem_private_key(pem, password=None)
            name = first[len(NAME_LINE) :].decode()
        except (ValueError, TypeError, UnicodeDecodeError):
            raise WitnessKeyError(f"{path} holds no readable unencrypted PEM private key") from None
        if not isinstance(private_key, Ed25519PrivateKey):
            raise WitnessKeyError(f"{path} is not an Ed25519 key")
        try:
            return cls(name, private_key)
        except ValueError as exc:
            raise WitnessKeyError(f"{path}: {exc}") from None


def kms_witness_key(kms: Any, key_id: str, name: str) -> KmsEd25519:
    """The witness's KMS key (``ECC_NIST_EDWARDS25519``): cosignatures, type 0x04, under ``name``."""
    return KmsEd25519(kms, key_id, name, COSIGNATURE_V1)
