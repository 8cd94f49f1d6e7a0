"""Sealing a flow's fields under its patient's own key, so erasing the patient leaves nothing readable.

A field of a flow that names a patient is sealed as ``aes256gcm.v3``: AES-256-GCM under the subject's data
key (``keys.py``), its associated data the field's place and the subject. The sealed record names the
subject and carries no key: the only copy of the key is the subject's ``#key`` item, so deleting that item
makes every such field, wherever a copy of it lies, noise. Fields of flows with no patient are sealed as
before (``aes256gcm.v2``, a data key per flow carried in the field).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
from typing import Any

from flowledger.store.envelope import SEALED_MARKER, FieldRef, FieldSealer, LruTtl, SealedFieldError
from flowledger.subjects import subject_id_of
from flowledger.subjects.keys import SubjectKeys

FORMAT_V3 = "aes256gcm.v3"
# A flow's patient never changes once it is opened, so what a process learns of it stays true.
MAX_CACHED_FLOWS = 4096


def associated_data(ref: FieldRef, subject_id: str) -> bytes:
    """The AES-GCM associated data of a v3 field: its place and its subject, unambiguously."""
    parts = {"v": 3, "flow_id": ref.flow_id, "step_id": ref.step_id, "side": ref.side, "field": ref.field}
    return json.dumps({**parts, "subject": subject_id}, sort_keys=True, separators=(",", ":")).encode()


class SubjectSealer:
    """``FieldSealer``'s seal and open, with fields of a patient's flow sealed under the patient's key."""

    def __init__(self, dynamodb: Any, flows_table: str, fields: FieldSealer, keys: SubjectKeys) -> None:
        self._db = dynamodb
        self._flows_table = flows_table
        self._fields = fields
        self.keys = keys
        self._flows: LruTtl[str, str] = LruTtl(MAX_CACHED_FLOWS, float("inf"))
        self._lock = threading.Lock()

    def cached_keys(self) -> tuple[int, int]:
        return self._fields.cached_keys()

    def seal(self, value: Any, ref: FieldRef) -> dict[str, str]:
        """An opaque record of ``value`` that opens only at ``ref`` (and, for a patient's flow, only until erasure)."""
        subject_id = self.subject_of_flow(ref.flow_id)
        if subject_id is None:
            return self._fields.seal(value, ref)
        return self.seal_for(subject_id, value, ref)

    def seal_for(self, subject_id: str, value: Any, ref: FieldRef) -> dict[str, str]:
        """``value`` sealed under the subject's own key at ``ref`` (a chat run's text, say: a place not in a flow)."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # only steps with PII pay for it

        key = self.keys.key(subject_id, create=True)
        nonce = os.urandom(12)
        ciphertext = AESGCM(key.plaintext).encrypt(nonce, json.dumps(value).encode(), associated_data(ref, subject_id))
        return {
            SEALED_MARKER: FORMAT_V3,
            "subject": subject_id,
            "nonce": base64.b64encode(nonce).decode(),
            "ciphertext": base64.b64encode(ciphertext).decode(),
        }

    def open(self, sealed: dict[str, str], ref: FieldRef) -> Any:
        """The value sealed at ``ref``: ``SubjectErased`` when its subject's key is gone, ``SealedFieldError`` when
        it was sealed elsewhere or altered. A flow's field names its flow's subject or it does not open."""
        if sealed.get(SEALED_MARKER) != FORMAT_V3:
            return self._fields.open(sealed, ref)
        subject_id = self.subject_of_flow(ref.flow_id)
        if subject_id is None or sealed.get("subject") != subject_id:
            raise SealedFieldError(f"sealed field {ref} names another subject than its flow's")
        # A fresh read of the key: an admin's open fails the moment an erasure destroys it.
        return self.open_for(subject_id, sealed, ref, fresh=True)

    def open_for(self, subject_id: str, sealed: dict[str, str], ref: FieldRef, *, fresh: bool = False) -> Any:
        """A value ``seal_for`` sealed for ``subject_id`` at ``ref``; the errors are :meth:`open`'s."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            nonce, ciphertext = (base64.b64decode(sealed[part], validate=True) for part in ("nonce", "ciphertext"))
        except (KeyError, TypeError, binascii.Error):
            raise SealedFieldError(f"sealed field {ref} is malformed") from None
        key = self.keys.key(subject_id, create=False, fresh=fresh)
        try:
            data = AESGCM(key.plaintext).decrypt(nonce, ciphertext, associated_data(ref, subject_id))
        except (InvalidTag, ValueError):
            raise SealedFieldError(
                f"sealed field {ref} does not open: it was sealed for another place or subject, or altered"
            ) from None
        return json.loads(data)

    def subject_of_flow(self, flow_id: str) -> str | None:
        """The subject of a flow's patient, None for a flow with no patient (or none stored yet)."""
        with self._lock:
            known = self._flows.get(flow_id, 0.0)
        if known is not None:
            return known or None
        item = self._db.get_item(
            TableName=self._flows_table,
            Key={"flow_id": {"S": flow_id}},
            ConsistentRead=True,
            ProjectionExpression="flow_id, patient_id",
        ).get("Item")
        if item is None:
            return None  # not opened yet: learn it next time
        patient_id = item.get("patient_id", {}).get("S")
        subject_id = subject_id_of(patient_id) if patient_id else ""  # "": known to have no patient
        with self._lock:
            self._flows.put(flow_id, subject_id, 0.0)
        return subject_id or None
