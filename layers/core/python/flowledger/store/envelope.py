"""Envelope encryption of declared PII fields with KMS data keys and AES-256-GCM.

A data key from ``GenerateDataKey`` encrypts many fields for a while (bounded by age and use
count, as the AWS Encryption SDK's caching does), so a step costs no KMS call most of the time.
Each sealed field carries the KMS-encrypted data key it needs; reading one back costs a KMS
``Decrypt`` per distinct data key, cached for the reader's lifetime.

It lives with storage, below the domain, so that the services (and through them the ledger) can
build one without reaching into reasoning, which seals step fields with it.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_KEY_AGE_SECONDS = 300
MAX_KEY_USES = 1000
SEALED_MARKER = "__sealed__"


@dataclass
class _DataKey:
    plaintext: bytes
    encrypted: bytes
    created: float
    uses: int = 0


class FieldSealer:
    """Seals and opens JSON values under KMS data keys of one key id."""

    def __init__(self, kms: Any, key_id: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._kms = kms
        self._key_id = key_id
        self._monotonic = monotonic
        self._current: _DataKey | None = None
        self._opened: dict[bytes, bytes] = {}
        self._lock = threading.Lock()

    def _data_key(self) -> _DataKey:
        with self._lock:
            key = self._current
            if key is None or key.uses >= MAX_KEY_USES or self._monotonic() - key.created > MAX_KEY_AGE_SECONDS:
                response = self._kms.generate_data_key(KeyId=self._key_id, KeySpec="AES_256")
                key = _DataKey(response["Plaintext"], response["CiphertextBlob"], self._monotonic())
                self._current = key
            key.uses += 1
            return key

    def seal(self, value: Any, context: str) -> dict[str, str]:
        """An opaque record of ``value``; ``context`` (e.g. flow/step/field) is bound as AAD."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # only steps with PII pay for it

        key = self._data_key()
        nonce = os.urandom(12)
        ciphertext = AESGCM(key.plaintext).encrypt(nonce, json.dumps(value).encode(), context.encode())
        return {
            SEALED_MARKER: "aes256gcm.v1",
            "edk": base64.b64encode(key.encrypted).decode(),
            "nonce": base64.b64encode(nonce).decode(),
            "ciphertext": base64.b64encode(ciphertext).decode(),
        }

    def open(self, sealed: dict[str, str], context: str) -> Any:
        """The value sealed with ``context``; raises if either was tampered with."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        encrypted_key = base64.b64decode(sealed["edk"])
        with self._lock:
            plaintext = self._opened.get(encrypted_key)
        if plaintext is None:
            plaintext = self._kms.decrypt(CiphertextBlob=encrypted_key, KeyId=self._key_id)["Plaintext"]
            with self._lock:
                self._opened[encrypted_key] = plaintext
        data = AESGCM(plaintext).decrypt(
            base64.b64decode(sealed["nonce"]), base64.b64decode(sealed["ciphertext"]), context.encode()
        )
        return json.loads(data)


def is_sealed(value: Any) -> bool:
    """Whether ``value`` is a record made by ``FieldSealer.seal`` (and so must be opened to be read)."""
    return isinstance(value, dict) and SEALED_MARKER in value
