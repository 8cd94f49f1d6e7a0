"""Verifying one chain: every item, hash, link and time, from an anchor, up to the checkpointed heads.

A finding does not stop the walk. The next event's link is checked only when the event before it
passed every check: after a finding (or a gap) the walk resumes at the next event and takes its
``prev_hash`` as given, because a link to an item already reported cannot say more than the
finding does. So one changed, malformed or missing event is one finding, and a swap is two.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from flowledger.ledger.events import GENESIS_HASH, AuditEvent, event_hash, event_id

# A chain position as DynamoDB writes the number: a positive integer without leading zeros.
_POSITION = re.compile(r"[1-9][0-9]*")


def position_of(seq_text: str) -> int | None:
    """The chain position a stored seq (as DynamoDB writes the number) names; None if it names none."""
    return int(seq_text) if _POSITION.fullmatch(seq_text) else None


@dataclass(frozen=True)
class Position:
    seq: int
    hash: str


GENESIS = Position(0, GENESIS_HASH)


@dataclass(frozen=True)
class Finding:
    """One thing verification found wrong, and where: an event's place, or a checkpoint."""

    where: str  # "chain-003.42" (a chain position, as an event id) or "checkpoint ID"
    problem: str  # a stable name: malformed, not_a_position, missing, misplaced, hash, link, time, checkpoint, ...
    detail: str  # one line, no stored values beyond ids, hashes and times

    def describe(self) -> str:
        return f"{self.where} [{self.problem}] {self.detail}"


@dataclass(frozen=True)
class Malformed:
    """A stored item under a chain that is not a well-formed event (extra, missing or mistyped attributes)."""

    seq_text: str  # its seq key as stored
    reason: str

    @property
    def seq(self) -> int | None:
        """The chain position the item occupies; None when its key is no position (0, negative, fractional)."""
        return position_of(self.seq_text)


Stored = AuditEvent | Malformed


@dataclass(frozen=True)
class ChainReport:
    chain_id: str
    checked: int  # stored items read and checked
    head: Position  # the last well-formed event read (the anchor when there is none)
    findings: tuple[Finding, ...] = field(default=())
    known: bool = True  # False for a chain id outside the ledger's chains: each of its events is a finding

    @property
    def bad(self) -> Finding | None:
        """The first finding, if any."""
        return self.findings[0] if self.findings else None


def verify_chain(
    chain_id: str,
    stored: Iterable[Stored],
    anchor: Position = GENESIS,
    checkpointed: Mapping[int, str] | None = None,
) -> ChainReport:
    """Check every item after ``anchor``; the report names each position that is not what was written.

    ``stored`` are the chain's items in key order. ``checkpointed`` maps the seqs that Merkle
    checkpoints recorded for this chain to their hashes: they catch what links alone cannot, a
    missing tail or history rewritten and re-hashed from some point on. ``at`` must not go
    backwards: it is compared with the last event that passed every check.
    """
    heads = {seq: h for seq, h in (checkpointed or {}).items() if seq > anchor.seq}
    findings: list[Finding] = []
    good, good_at = anchor, ""  # the last event that passed every check
    next_seq, linked = anchor.seq + 1, True  # linked: the item at next_seq must link to ``good``
    head, checked = anchor, 0
    for item in stored:
        checked += 1
        seq = item.seq
        where = f"{chain_id}.{item.seq_text if isinstance(item, Malformed) else seq}"
        if seq is None:
            findings.append(Finding(where, "not_a_position", "an item under a seq that is no chain position"))
            continue
        if seq < next_seq:
            findings.append(Finding(where, "order", f"comes after seq {next_seq - 1}: out of order or duplicated"))
            continue
        if seq > next_seq:
            findings.append(_missing(chain_id, next_seq, seq - 1, f"seq {seq} follows"))
            linked = False
        next_seq = seq + 1
        if isinstance(item, Malformed):
            findings.append(Finding(where, "malformed", f"not a well-formed event: {item.reason}"))
            linked = False
            continue
        head = Position(item.seq, item.hash)
        finding = _check(chain_id, item, good, good_at, linked, heads)
        if finding is not None:
            findings.append(finding)
            linked = False
            continue
        good, good_at, linked = head, item.at, True
    reached = max(heads, default=0)
    if next_seq <= reached:
        findings.append(_missing(chain_id, next_seq, reached, f"a checkpoint saw the chain reach seq {reached}"))
    return ChainReport(chain_id, checked, head, tuple(findings))


def _missing(chain_id: str, first: int, last: int, why: str) -> Finding:
    span = f"seq {first}" if first == last else f"seqs {first} to {last}"
    return Finding(f"{chain_id}.{first}", "missing", f"no event at {span}: {why}")


def _check(
    chain_id: str, event: AuditEvent, good: Position, good_at: str, linked: bool, heads: Mapping[int, str]
) -> Finding | None:
    """The first problem of a well-formed event at its key's position; ``good`` is the last event that passed."""
    where = event_id(chain_id, event.seq)
    if event.chain_id != chain_id or event.event_id != where:
        return Finding(where, "misplaced", f"its event_id says {event.event_id}: it was moved or renumbered")
    recomputed = event_hash(event.unsealed())
    if recomputed != event.hash:
        return Finding(where, "hash", f"content does not match its hash (recomputed {recomputed}, stored {event.hash})")
    if linked and event.prev_hash != good.hash:
        return Finding(
            where, "link", f"prev_hash does not link to seq {good.seq} (expected {good.hash}, found {event.prev_hash})"
        )
    if event.at < good_at:
        return Finding(where, "time", f"at {event.at} is before {good_at}, the time of seq {good.seq}")
    if heads.get(event.seq, event.hash) != event.hash:
        return Finding(
            where,
            "checkpoint",
            f"differs from the head a checkpoint recorded (expected {heads[event.seq]}, found {event.hash})",
        )
    return None
