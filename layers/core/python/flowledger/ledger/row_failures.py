"""A job's rows it could not process: each one audited with a reason code, counted, and passed over.

One bad row must never stop a job (and the rows behind it): the job records the row's failure as
``memory.job.<job>.row_failed`` on the row's own subject, with a reason code and no stored value, and
goes on. Reading the ledger by the row's subject shows why it was left as it is.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from flowledger.errors import UndecodableItem
from flowledger.ledger.events import AuditEntry
from flowledger.store.decoding import DECODE_ERRORS, Skips

if TYPE_CHECKING:
    from flowledger.services import Services

logger = logging.getLogger("flowledger.jobs")

_TOKEN = re.compile(r"^[A-Za-z0-9_.:/@+=-]{1,100}$")
# What a row's own values can make processing it raise. A store fault (a botocore error: throttled,
# unreachable) is no row's failure: it stops the run, and the next run resumes where it stopped.
ROW_ERRORS: tuple[type[Exception], ...] = DECODE_ERRORS
UNDECODABLE = "undecodable"  # the stored item no longer reads as a row of its kind
UNEXPECTED = "unexpected_error"  # processing the row raised; the exception's type is in the payload


class RowFailures(Skips):
    """The rows a job could not process (``kind`` names their subject, e.g. ``backlog``)."""

    def __init__(self, services: Services, job: str, kind: str) -> None:
        super().__init__(job)
        self._s = services
        self.kind = kind

    def note(self, exc: UndecodableItem) -> None:
        """An item that cannot be decoded: logged by its ids, and recorded as ``undecodable``."""
        super().note(exc)
        self._audit(exc.item, UNDECODABLE, None)

    def record(self, row_id: str, reason: str, error: BaseException | None = None) -> None:
        """Row ``row_id`` failed with ``reason`` (a code); ``error``'s type, never its text, is recorded."""
        self.count += 1
        logger.warning(
            "%s failed a row: %s", self.job, reason, extra={"job": self.job, "item": row_id, "reason": reason}
        )
        self._audit(row_id, reason, error)

    def _audit(self, row_id: str, reason: str, error: BaseException | None) -> None:
        # A row id that is no token (a corrupted key) is not echoed: the subject says so instead.
        subject = f"{self.kind}:{row_id}" if _TOKEN.match(row_id) else f"{self.kind}:unreadable_id"
        payload: dict[str, str | None] = {"reason": reason}
        if error is not None:
            payload["error"] = type(error).__name__
        try:
            self._s.ledger.append(
                AuditEntry(
                    action=f"memory.job.{self.job}.row_failed",
                    actor=f"system:{self.job}",
                    subject=subject,
                    payload=payload,
                )
            )
        except Exception as exc:  # the ledger itself failing: logged, and the job goes on to the next row
            logger.error("%s could not record a failed row: %s", self.job, type(exc).__name__, extra={"item": row_id})
