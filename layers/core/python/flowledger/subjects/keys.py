"""Each subject's data key: made on first use, kept wrapped in the subjects table, destroyed by erasure.

The key is a KMS data key (``GenerateDataKey`` under the stack's data key, with the subject in its
encryption context), stored only as KMS wrapped it, in the subject's ``#key`` item beside a random salt for
the subject's ledger pseudonym. One KMS key per patient would cost a dollar a month each and could not be
deleted in under seven days; deleting one item destroys this one at once (backups aside: see
``BACKUP_WINDOW_DAYS``).

Items of a subject in the ``subjects`` table (``subject_id`` / ``sk``):

- ``#key``: ``edk`` (the wrapped key), ``salt``, ``created_at``;
- ``#hold``: a legal hold (``holds.py``);
- ``#erasure``: an erasure begun or done (``erasure.py``). Its existence fences the subject: no key is
  made for it again, no flow names it, no consent is written for it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from flowledger.errors import SubjectErased
from flowledger.ledger.events import timestamp
from flowledger.store.envelope import LruTtl
from flowledger.subjects import subject_id_of

KEY_ITEM = "#key"
HOLD_ITEM = "#hold"
ERASURE_ITEM = "#erasure"
CONTEXT_PURPOSE = "subject-data"
# How long a process keeps a subject's opened key. Erasure deletes what the key sealed as well as the key, so
# a warm function holding a key that is gone can open nothing erased; the bound keeps even that window short.
KEY_CACHE_SECONDS = 60
MAX_CACHED_KEYS = 256


@dataclass(frozen=True)
class SubjectKey:
    subject_id: str
    plaintext: bytes
    salt: bytes


def kms_context(subject_id: str) -> dict[str, str]:
    """The encryption context of a subject's data key: a key policy or CloudTrail can name the subject."""
    return {"flowledger:purpose": CONTEXT_PURPOSE, "flowledger:subject": subject_id}


def subject_key(subject_id: str, sk: str) -> dict[str, Any]:
    return {"subject_id": {"S": subject_id}, "sk": {"S": sk}}


class SubjectKeys:
    """Finds, makes and opens subjects' data keys, and fences subjects being erased."""

    def __init__(
        self,
        dynamodb: Any,
        kms: Any,
        table: str,
        key_id: str,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = dynamodb
        self._kms = kms
        self.table = table  # the subjects table
        self._key_id = key_id  # the KMS key the subjects' data keys are made under
        self._clock = clock
        self._monotonic = monotonic
        self._cache: LruTtl[str, SubjectKey] = LruTtl(MAX_CACHED_KEYS, KEY_CACHE_SECONDS)
        self._lock = threading.Lock()

    def fence(self, subject_id: str) -> dict[str, Any]:
        """A ``TransactWriteItems`` entry that holds only while no erasure of the subject has begun."""
        return {
            "ConditionCheck": {
                "TableName": self.table,
                "Key": subject_key(subject_id, ERASURE_ITEM),
                "ConditionExpression": "attribute_not_exists(subject_id)",
            }
        }

    def require_live(self, subject_id: str) -> None:
        """Raise ``SubjectErased`` (410) once an erasure of the subject has begun (a consistent read)."""
        if self._item(subject_id, ERASURE_ITEM, "sk") is not None:
            raise SubjectErased("this subject's data was erased")

    def key(self, subject_id: str, *, create: bool, fresh: bool = False) -> SubjectKey:
        """The subject's data key; made now when ``create`` and there is none. ``SubjectErased`` once erased.

        ``fresh`` reads the key item even when this process holds the key: opening a value must fail the
        moment an erasure destroys the key, whatever a warm process remembers.
        """
        now = self._monotonic()
        with self._lock:
            cached = self._cache.get(subject_id, now)
        if cached is not None and not fresh:
            return cached
        item = self._item(subject_id, KEY_ITEM, "edk, salt")
        if item is None:
            if not create:
                raise SubjectErased("this subject's data key was destroyed: what it sealed was erased")
            item, cached = self._make(subject_id), None  # a new key: what this process held is not it
        if cached is not None:
            return cached
        opened = self._kms.decrypt(
            CiphertextBlob=item["edk"]["B"],
            KeyId=self._key_id,
            EncryptionContext=kms_context(subject_id),
        )
        key = SubjectKey(subject_id, opened["Plaintext"], item["salt"]["B"])
        with self._lock:
            self._cache.put(subject_id, key, now)
        return key

    def pseudonym(self, patient_id: str) -> str:
        """How the ledger names a patient (``ps_...``): keyed by the subject's salt, so erasure unlinks every event
        that names them. ``SubjectErased`` once the patient was erased."""
        salt = self.key(subject_id_of(patient_id), create=True).salt
        return "ps_" + hmac.new(salt, patient_id.encode(), hashlib.sha256).hexdigest()[:40]

    def require_live_patient(self, patient_id: str) -> str:
        """The patient's subject id; ``SubjectErased`` (410) once an erasure of them has begun."""
        subject_id = subject_id_of(patient_id)
        self.require_live(subject_id)
        return subject_id

    def forget(self, subject_id: str) -> None:
        """Drop this process's copy of the subject's key (the erasure's own process, at once)."""
        with self._lock:
            self._cache.pop(subject_id)

    def _make(self, subject_id: str) -> dict[str, Any]:
        made = self._kms.generate_data_key(
            KeyId=self._key_id, KeySpec="AES_256", EncryptionContext=kms_context(subject_id)
        )
        item = {
            **subject_key(subject_id, KEY_ITEM),
            "edk": {"B": made["CiphertextBlob"]},
            "salt": {"B": os.urandom(32)},
            "created_at": {"S": timestamp(self._clock())},
        }
        put = {"Put": {"TableName": self.table, "Item": item, "ConditionExpression": "attribute_not_exists(sk)"}}
        try:
            self._db.transact_write_items(TransactItems=[self.fence(subject_id), put])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                raise
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if reasons[:1] == ["ConditionalCheckFailed"]:
                raise SubjectErased("this subject's data was erased") from None
            won = self._item(subject_id, KEY_ITEM, "edk, salt")  # another writer made it first: use theirs
            if won is None:
                raise
            return won
        return item

    def _item(self, subject_id: str, sk: str, projection: str) -> dict[str, Any] | None:
        response = self._db.get_item(
            TableName=self.table,
            Key=subject_key(subject_id, sk),
            ConsistentRead=True,
            ProjectionExpression=projection,
        )
        item: dict[str, Any] | None = response.get("Item")
        return item
