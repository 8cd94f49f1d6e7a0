"""Subjects: the patients whose data Flowledger holds, their data keys, legal holds and erasure.

A subject is named everywhere but in its own routes by ``subject_id``, a digest of its patient id, so the
subjects table, the erasure receipt and a tombstone hold no patient id. What is personal to a subject is
sealed under the subject's own data key (``keys.py``), so destroying that key (``erasure.py``) leaves
nothing readable even where a copy of a ciphertext survives (a backup, a replica).
"""

from __future__ import annotations

import hashlib

# What erasure destroys and retention expires, by class: the names the routes, the receipt and the docs use.
DATA_CLASSES = ("flows", "consents", "conversations", "uploads")
# DynamoDB point-in-time recovery keeps 35 days of every table: an erased item lives on in those backups
# until the window passes, so an erasure is final that many days after it completes (the receipt says when).
BACKUP_WINDOW_DAYS = 35
PATIENT_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"


def subject_id_of(patient_id: str) -> str:
    """The subject id of a patient: a digest, so a tombstone can refuse the patient's data without naming them.

    It is unkeyed (anyone holding a patient id can compute it, which is what lets an operator show that
    patient their erasure receipt); the ledger's pseudonyms (``SubjectKeys.pseudonym``) are keyed instead.
    """
    return "sbj_" + hashlib.sha256(f"flowledger.subject:{patient_id}".encode()).hexdigest()[:40]


# The attribute that marks an erased flow's tombstone: what is left of it is ids, times and counts.
ERASED_AT = "erased_at"
ERASED_STATE = "erased"  # a tombstone's flow_state (the indexes that project flow_state tell it by that)
