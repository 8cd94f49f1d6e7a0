"""Verifying one chain: every link, from an anchor, optionally up to a checkpointed head."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from flowledger.ledger.events import GENESIS_HASH, AuditEvent, event_hash, event_id


@dataclass(frozen=True)
class Position:
    seq: int
    hash: str


GENESIS = Position(0, GENESIS_HASH)


@dataclass(frozen=True)
class BadLink:
    """The first place a chain stops being what was written."""

    chain_id: str
    seq: int
    problem: str
    expected: str
    found: str

    def describe(self) -> str:
        return (
            f"chain {self.chain_id} breaks at seq {self.seq}: {self.problem} "
            f"(expected {self.expected}, found {self.found})"
        )


@dataclass(frozen=True)
class ChainReport:
    chain_id: str
    checked: int
    head: Position
    bad: BadLink | None


def verify_chain(
    chain_id: str,
    events: Iterable[AuditEvent],
    anchor: Position = GENESIS,
    checkpointed: Mapping[int, str] | None = None,
) -> ChainReport:
    """Recompute every link after ``anchor``; the report names the first bad one.

    ``events`` are the stored events in key order. ``checkpointed`` maps the seqs that Merkle
    checkpoints recorded for this chain to their hashes: they catch what links alone cannot, a
    missing tail or history rewritten and re-hashed from some point on.
    """
    expected_heads = {seq: h for seq, h in (checkpointed or {}).items() if seq > anchor.seq}
    previous = anchor
    checked = 0
    for event in events:
        bad = _check(chain_id, event, previous.seq + 1, previous.hash)
        if bad is None and expected_heads.get(event.seq, event.hash) != event.hash:
            bad = BadLink(
                chain_id, event.seq, "differs from the checkpointed head", expected_heads[event.seq], event.hash
            )
        if bad is not None:
            return ChainReport(chain_id, checked, previous, bad)
        previous = Position(event.seq, event.hash)
        checked += 1
    reached = max(expected_heads, default=0)
    if previous.seq < reached:
        return ChainReport(
            chain_id,
            checked,
            previous,
            BadLink(
                chain_id,
                previous.seq + 1,
                f"missing: a checkpoint saw the chain reach seq {reached}",
                f"seq {previous.seq + 1}",
                "end of chain",
            ),
        )
    return ChainReport(chain_id, checked, previous, None)


def _check(chain_id: str, event: AuditEvent, seq: int, prev_hash: str) -> BadLink | None:
    if event.seq != seq:
        problem = "missing event" if event.seq > seq else "out of order or duplicated"
        return BadLink(chain_id, seq, problem, f"seq {seq}", f"seq {event.seq}")
    if event.chain_id != chain_id or event.event_id != event_id(chain_id, seq):
        return BadLink(chain_id, seq, "event stored in the wrong place", event_id(chain_id, seq), event.event_id)
    recomputed = event_hash(event.unsealed())
    if recomputed != event.hash:
        return BadLink(chain_id, seq, "content does not match its hash", recomputed, event.hash)
    if event.prev_hash != prev_hash:
        return BadLink(chain_id, seq, "prev_hash does not link to the event before", prev_hash, event.prev_hash)
    return None
