"""Whether new chain heads extend a checkpoint: no chain gone, none gone back, and every step between linked.

The checkpoint job asks this of the heads it is about to sign against the last checkpoint it signed:
a ledger whose history was rewritten (an event changed and everything after it re-hashed), truncated
or forked since then gives a problem, and the job signs nothing (``take_checkpoint``).
"""

from __future__ import annotations

from collections.abc import Sequence

from flowledger.ledger.chain import Position, verify_chain
from flowledger.ledger.checkpoints import ChainHead, Checkpoint
from flowledger.ledger.events import AuditEvent
from flowledger.ledger.store import Ledger


def extension_problems(
    previous: Checkpoint, heads: Sequence[ChainHead], ledger: Ledger, read: dict[str, list[AuditEvent]] | None = None
) -> list[str]:
    """Why ``heads`` do not extend ``previous`` (empty when they do), reading each chain's new events.

    ``read``, when given, gets each chain's events since ``previous`` (the checkpoint job grows the chain's
    tree with them, rather than read them twice).
    """
    now = {head.chain_id: head for head in heads}
    problems = []
    for before in previous.heads:
        after = now.get(before.chain_id)
        if after is None:
            problems.append(f"{before.chain_id} is gone ({previous.checkpoint_id} had it at seq {before.seq})")
        elif after.seq < before.seq:
            problems.append(f"{before.chain_id} went back from seq {before.seq} to {after.seq}")
        elif after.seq == before.seq and after.hash != before.hash:
            problems.append(f"{before.chain_id}'s event at seq {before.seq} is not the one checkpointed")
        elif after.seq > before.seq:
            segment = list(ledger.read_chain(before.chain_id, after_seq=before.seq, until_seq=after.seq))
            if read is not None:
                read[before.chain_id] = segment
            report = verify_chain(before.chain_id, segment, anchor=Position(before.seq, before.hash))
            if report.bad is not None:
                problems.append(f"{before.chain_id} does not extend seq {before.seq}: {report.bad.describe()}")
            elif report.head != after.position:
                problems.append(f"{before.chain_id}'s events stop at seq {report.head.seq}, not at {after.seq}")
    return problems
