"""Whole-ledger operations: checkpointing, verification and proofs over the stores."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from flowledger.errors import NotFound
from flowledger.ledger.chain import GENESIS, BadLink, ChainReport, verify_chain
from flowledger.ledger.checkpoints import ChainHead, Checkpoint, CheckpointStore, build_checkpoint
from flowledger.ledger.events import AuditEvent, parse_event_id
from flowledger.ledger.proofs import InclusionProof, build_proof
from flowledger.ledger.store import Ledger
from flowledger.services import Services


def checkpoints_of(services: Services) -> CheckpointStore:
    return CheckpointStore(services.aws.s3, services.aws.bucket_name("checkpoints"))


def take_checkpoint(ledger: Ledger, store: CheckpointStore, services: Services) -> dict[str, object]:
    """Fold every chain head into a new checkpoint; skip when nothing moved since the last one."""
    heads = [
        ChainHead(chain_id=chain, seq=head.seq, hash=head.hash)
        for chain in ledger.chain_ids()
        if (head := ledger.head(chain)).seq > 0
    ]
    previous = store.latest()
    if previous is not None and previous.heads == sorted(heads, key=lambda h: h.chain_id):
        return {"checkpoint_id": previous.checkpoint_id, "skipped": "no chain moved"}
    checkpoint = build_checkpoint(heads, previous, services.clock())
    store.put(checkpoint)
    return {"checkpoint_id": checkpoint.checkpoint_id, "chains": len(heads), "events": sum(head.seq for head in heads)}


@dataclass
class VerificationReport:
    chains: list[ChainReport] = field(default_factory=list)
    checkpoints_checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(report.bad is None for report in self.chains)

    @property
    def first_bad_link(self) -> BadLink | None:
        return next((report.bad for report in self.chains if report.bad), None)


def verify_ledger(
    ledger: Ledger,
    store: CheckpointStore,
    chains: list[str] | None = None,
    from_checkpoint: str | None = None,
    progress: Callable[[Iterator[AuditEvent], str], Iterator[AuditEvent]] = lambda it, _: it,
) -> VerificationReport:
    """Recompute every checkpoint (from ``from_checkpoint``) and every link of the chains.

    Starting from a checkpoint trusts that checkpoint's heads as the anchors of the chains.
    """
    report = VerificationReport()
    ids = store.ids()
    if from_checkpoint is not None:
        if from_checkpoint not in ids:
            raise NotFound(f"no checkpoint {from_checkpoint!r}")
        ids = ids[ids.index(from_checkpoint) :]
    checkpoints = [store.get(checkpoint_id) for checkpoint_id in ids]
    report.problems += _checkpoint_problems(checkpoints, anchored=from_checkpoint is not None)
    report.checkpoints_checked = len(checkpoints)
    for chain_id in chains or ledger.chain_ids():
        anchor_head = checkpoints[0].head_of(chain_id) if checkpoints and from_checkpoint else None
        anchor = anchor_head.position if anchor_head else GENESIS
        checkpointed = {head.seq: head.hash for c in checkpoints if (head := c.head_of(chain_id))}
        events = progress(ledger.read_chain(chain_id, after_seq=anchor.seq), chain_id)
        report.chains.append(verify_chain(chain_id, events, anchor, checkpointed))
    return report


def _checkpoint_problems(checkpoints: list[Checkpoint], anchored: bool) -> list[str]:
    problems = []
    previous: Checkpoint | None = None
    for checkpoint in checkpoints:
        name = f"checkpoint {checkpoint.checkpoint_id}"
        if checkpoint.recomputed_hash() != checkpoint.hash:
            problems.append(f"{name} does not match its hash")
        if checkpoint.recomputed_root() != checkpoint.root:
            problems.append(f"{name}: its heads do not fold into its root")
        if previous is not None and checkpoint.prev_checkpoint_hash != previous.hash:
            problems.append(f"{name} does not link to checkpoint {previous.checkpoint_id}")
        if previous is None and not anchored and checkpoint.prev_checkpoint_hash != "0" * 64:
            problems.append(f"{name} is the first checkpoint but links to another one")
        if previous is not None:
            for head in previous.heads:
                later = checkpoint.head_of(head.chain_id)
                if later is None or later.seq < head.seq:
                    problems.append(f"{name}: chain {head.chain_id} went backwards")
        previous = checkpoint
    return problems


def prove(ledger: Ledger, store: CheckpointStore, event_id: str) -> InclusionProof:
    """The shortest proof for an event: against the first checkpoint whose head covers it."""
    chain_id, seq = parse_event_id(event_id)
    event = ledger.event(chain_id, seq)
    if event is None:
        raise NotFound(f"no event {event_id}")
    for checkpoint_id in store.ids():
        checkpoint = store.get(checkpoint_id)
        head = checkpoint.head_of(chain_id)
        if head is not None and head.seq >= seq:
            segment = list(ledger.read_chain(chain_id, after_seq=seq, until_seq=head.seq))
            return build_proof(event, segment, checkpoint)
    raise NotFound(f"no checkpoint covers {event_id} yet; the next one is taken within 5 minutes")


def checkpoint_job(services: Services) -> dict[str, object]:
    """The scheduled job: take a checkpoint of every chain head."""
    return take_checkpoint(services.ledger, checkpoints_of(services), services)
