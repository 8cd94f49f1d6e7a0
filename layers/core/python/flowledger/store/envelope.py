"""Envelope encryption of declared PII fields with KMS data keys and AES-256-GCM.

A sealed field is bound to where it lives, its flow, step, side and field, in two layers:

- the KMS encryption context of its data key names the flow (``flowledger:flow_id``), so a key
  policy can require it and CloudTrail ties every ``GenerateDataKey`` and ``Decrypt`` to a flow;
- the AES-GCM associated data names flow, step, side and field, so a field moved anywhere else,
  even within its flow, fails to open.

Step, side and field are not in the KMS context because a data key serves many fields: from
``GenerateDataKey`` it encrypts the fields of one flow for a while (bounded by age and use count, as
the AWS Encryption SDK's caching does), so a flow's steps cost one KMS call, not one per field. Each
sealed field carries the KMS-encrypted data key it needs; reading one back costs a KMS ``Decrypt``
per distinct data key, cached for a bounded time and number of keys.

Format ``aes256gcm.v2`` is the above; ``aes256gcm.v1`` (no KMS context, the path as associated
data) is still opened, so fields sealed before stay readable.

It lives with storage, below the domain, so that the services (and through them the ledger) can
build one without reaching into reasoning, which seals step fields with it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

MAX_KEY_AGE_SECONDS = 300
MAX_KEY_USES = 1000
# Data keys held per process, for sealing (one per flow being written) and for opening (one per key read).
MAX_CACHED_KEYS = 256
SEALED_MARKER = "__sealed__"
FORMAT_V1 = "aes256gcm.v1"
FORMAT_V2 = "aes256gcm.v2"
CONTEXT_PURPOSE = "reasoning-step-field"
# KMS's answers when a ciphertext does not decrypt under the given key and encryption context.
_KMS_REFUSALS = frozenset({"InvalidCiphertextException", "IncorrectKeyException"})

K = TypeVar("K")
V = TypeVar("V")


class SealedFieldError(ValueError):
    """A sealed field that does not open where it is read: moved, altered or malformed.

    The message names the field by its ids only, never its value.
    """


@dataclass(frozen=True)
class FieldRef:
    """Where a sealed value lives; it is sealed to this place and opens only here."""

    flow_id: str
    step_id: str
    side: str
    field: str

    def __str__(self) -> str:
        return f"{self.side}.{self.field} of step {self.step_id} in flow {self.flow_id}"

    def kms_context(self) -> dict[str, str]:
        """The encryption context of the data key: what is fixed for every field it seals."""
        return {"flowledger:purpose": CONTEXT_PURPOSE, "flowledger:flow_id": self.flow_id}

    def associated_data(self) -> bytes:
        """The AES-GCM associated data of this field (v2): every part of its place, unambiguously."""
        parts = {"v": 2, "flow_id": self.flow_id, "step_id": self.step_id, "side": self.side, "field": self.field}
        return json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()

    def legacy_associated_data(self) -> bytes:
        """The associated data format v1 used: the place as a path."""
        return f"{self.flow_id}/{self.step_id}/{self.side}/{self.field}".encode()


class LruTtl(Generic[K, V]):
    """At most ``max_entries`` values, each for at most ``ttl`` seconds; the least recently used go first."""

    def __init__(self, max_entries: int, ttl: float) -> None:
        self._max_entries = max_entries
        self._ttl = ttl
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K, now: float) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if now - entry[0] > self._ttl:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: K, value: V, now: float) -> None:
        self._entries[key] = (now, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def pop(self, key: K) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class _DataKey:
    plaintext: bytes
    encrypted: bytes
    uses: int = 0


class FieldSealer:
    """Seals and opens JSON values under KMS data keys of one key id, each bound to its place."""

    def __init__(
        self,
        kms: Any,
        key_id: str,
        monotonic: Callable[[], float] = time.monotonic,
        max_cached_keys: int = MAX_CACHED_KEYS,
    ) -> None:
        self._kms = kms
        self._key_id = key_id
        self._monotonic = monotonic
        # Sealing: the current data key of each flow. Opening: plaintext keys by (encrypted key, flow).
        self._current: LruTtl[str, _DataKey] = LruTtl(max_cached_keys, MAX_KEY_AGE_SECONDS)
        self._opened: LruTtl[tuple[bytes, str | None], bytes] = LruTtl(max_cached_keys, MAX_KEY_AGE_SECONDS)
        self._lock = threading.Lock()

    def cached_keys(self) -> tuple[int, int]:
        """How many data keys are held: for sealing, and opened for reading."""
        with self._lock:
            return len(self._current), len(self._opened)

    def _data_key(self, ref: FieldRef) -> _DataKey:
        with self._lock:
            now = self._monotonic()
            key = self._current.get(ref.flow_id, now)
            if key is None or key.uses >= MAX_KEY_USES:
                response = self._kms.generate_data_key(
                    KeyId=self._key_id, KeySpec="AES_256", EncryptionContext=ref.kms_context()
                )
                key = _DataKey(response["Plaintext"], response["CiphertextBlob"])
                self._current.put(ref.flow_id, key, now)
            key.uses += 1
            return key

    def seal(self, value: Any, ref: FieldRef) -> dict[str, str]:
        """An opaque record of ``value`` that opens only at ``ref``."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # only steps with PII pay for it

        key = self._data_key(ref)
        nonce = os.urandom(12)
        ciphertext = AESGCM(key.plaintext).encrypt(nonce, json.dumps(value).encode(), ref.associated_data())
        return {
            SEALED_MARKER: FORMAT_V2,
            "edk": base64.b64encode(key.encrypted).decode(),
            "nonce": base64.b64encode(nonce).decode(),
            "ciphertext": base64.b64encode(ciphertext).decode(),
        }

    def open(self, sealed: dict[str, str], ref: FieldRef) -> Any:
        """The value sealed at ``ref``; ``SealedFieldError`` if it was sealed elsewhere or altered."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        version = sealed.get(SEALED_MARKER)
        if version not in (FORMAT_V1, FORMAT_V2):
            raise SealedFieldError(f"sealed field {ref} has an unknown format {str(version)[:40]!r}")
        try:
            encrypted_key, nonce, ciphertext = (
                base64.b64decode(sealed[part], validate=True) for part in ("edk", "nonce", "ciphertext")
            )
        except (KeyError, TypeError, binascii.Error):
            raise SealedFieldError(f"sealed field {ref} is malformed") from None
        if version == FORMAT_V2:
            plaintext = self._opened_key(encrypted_key, ref, ref.kms_context())
            associated_data = ref.associated_data()
        else:
            plaintext = self._opened_key(encrypted_key, ref, None)
            associated_data = ref.legacy_associated_data()
        try:
            data = AESGCM(plaintext).decrypt(nonce, ciphertext, associated_data)
        except (InvalidTag, ValueError):
            raise SealedFieldError(
                f"sealed field {ref} does not open: it was sealed for another step, side or field, or altered"
            ) from None
        return json.loads(data)

    def _opened_key(self, encrypted_key: bytes, ref: FieldRef, context: dict[str, str] | None) -> bytes:
        # The flow is part of the cache key: a key opened for one flow must not open a field claiming another.
        cache_key = (encrypted_key, ref.flow_id if context is not None else None)
        with self._lock:
            plaintext = self._opened.get(cache_key, self._monotonic())
        if plaintext is not None:
            return plaintext
        request: dict[str, Any] = {"CiphertextBlob": encrypted_key, "KeyId": self._key_id}
        if context is not None:
            request["EncryptionContext"] = context
        try:
            opened: bytes = self._kms.decrypt(**request)["Plaintext"]
        except Exception as exc:
            if _error_code(exc) not in _KMS_REFUSALS:
                raise  # throttling, access denied, network: not the field's fault
            where = f"flow {ref.flow_id}" if context is not None else "a field without encryption context"
            raise SealedFieldError(f"sealed field {ref} does not open: KMS refused its data key for {where}") from None
        with self._lock:
            self._opened.put(cache_key, opened, self._monotonic())
        return opened


def is_sealed(value: Any) -> bool:
    """Whether ``value`` is a record made by ``FieldSealer.seal`` (and so must be opened to be read)."""
    return isinstance(value, dict) and SEALED_MARKER in value


def _error_code(exc: Exception) -> str | None:
    response = getattr(exc, "response", None)
    return response.get("Error", {}).get("Code") if isinstance(response, dict) else None
