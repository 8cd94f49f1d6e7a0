"""Whether new chain heads extend a checkpoint: no chain gone, none gone back, and every step between linked.

The checkpoint job asks this of the heads it is about to sign against the last checkpoint it signed:
a ledger whose history was rewritten (an event changed and everything after it re-hashed), truncated
or forked since then gives a problem, and the job signs nothing (``take_checkpoint``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from flowledger.ledger.chain import Position, verify_chain
from flowledger.ledger.checkpoints import ChainHead
from flowledger.ledger.events import AuditEvent
from flowledger.ledger.store import Ledger


def chain_extension_problem(
    before: ChainHead,
    after: ChainHead | None,
    ledger: Ledger,
    each: Callable[[AuditEvent], None],
    checkpoint_id: str,
) -> str | None:
    """Why ``after`` does not extend ``before``, one chain's heads (None when it does).

    The chain's events since ``before`` are read once and checked as they stream by; ``each`` is called with
    every one of them (the checkpoint job grows the chain's tree from them): only what ``each`` keeps stays in
    memory, never the chain's events.
    """
    if after is None:
        return f"{before.chain_id} is gone ({checkpoint_id} had it at seq {before.seq})"
    if after.seq < before.seq:
        return f"{before.chain_id} went back from seq {before.seq} to {after.seq}"
    if after.seq == before.seq:
        return (
            f"{before.chain_id}'s event at seq {before.seq} is not the one checkpointed"
            if after.hash != before.hash
            else None
        )

    def read() -> Iterator[AuditEvent]:
        for event in ledger.read_chain(before.chain_id, after_seq=before.seq, until_seq=after.seq):
            each(event)
            yield event

    report = verify_chain(before.chain_id, read(), anchor=Position(before.seq, before.hash))
    if report.bad is not None:
        return f"{before.chain_id} does not extend seq {before.seq}: {report.bad.describe()}"
    if report.head != after.position:
        return f"{before.chain_id}'s events stop at seq {report.head.seq}, not at {after.seq}"
    return None
