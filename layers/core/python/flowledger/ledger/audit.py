"""Whole-ledger operations: checkpointing, verification and proofs over the stores."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from flowledger.config import Settings
from flowledger.errors import InvalidInput, NotFound, UndecodableItem
from flowledger.ledger.bundle import MAX_EVENTS, EvidenceBundle, build_bundle
from flowledger.ledger.chain import GENESIS, ChainReport, Finding, Stored, verify_chain
from flowledger.ledger.chain_trees import chain_tree, extend_trees
from flowledger.ledger.checkpoints import ChainHead, Checkpoint, CheckpointStore, build_checkpoint, checkpoint_id_at
from flowledger.ledger.consistency import ConsistencyProof, InvalidConsistency, TreeOf, build_consistency
from flowledger.ledger.events import GENESIS_HASH, AuditEvent, parse_event_id, parse_timestamp, timestamp
from flowledger.ledger.proofs import InclusionProof, build_proof
from flowledger.ledger.store import Ledger
from flowledger.ledger.witnessing import WitnessFailed, cosigned_by, submit_to_witnesses
from flowledger.services import Services
from flowledger.store.decoding import DECODE_ERRORS, undecodable

# 1 when the checkpoint job refused to sign (the heads do not extend the last checkpoint), else 0: alarmed on.
CHECKPOINT_REFUSED_METRIC = "ledger.checkpoint.refused"
# 1 when a checkpoint has fewer good witness cosignatures than the quorum (witnesses configured), else 0.
CHECKPOINT_UNWITNESSED_METRIC = "ledger.checkpoint.unwitnessed"

logger = logging.getLogger("flowledger.ledger")


def checkpoints_of(services: Services) -> CheckpointStore:
    return CheckpointStore(services.aws.s3, services.aws.bucket_name("checkpoints"))


def take_checkpoint(ledger: Ledger, store: CheckpointStore, services: Services) -> dict[str, object]:
    """Fold every chain head into a new checkpoint, signed as a note; skip when nothing moved since the last one.

    The heads must extend the last checkpoint (``extension``): every chain still there, none gone back,
    each new event linked to the one before. If they do not, nothing is signed or stored, the result
    says why (``refused``) and ``CHECKPOINT_REFUSED_METRIC`` is 1, which the operations alarm watches.

    Checkpoints cannot be rewritten (Object Lock), so one that no longer parses must not stop every
    later checkpoint: the new one links to the latest checkpoint that parses, and the result names the
    malformed ones as ``findings`` (``flowledger audit verify`` reports them too).

    Resuming is trivial: one put per run, and a run that fails before it leaves the previous
    checkpoint as the latest, so the next run folds the same heads (and any new ones).
    """
    heads = chain_heads(ledger)
    findings: list[Finding] = []
    previous = _latest_readable(store, findings, services.clock())
    positions = [(h.chain_id, h.position) for h in sorted(heads, key=lambda h: h.chain_id)]
    if not findings and previous is not None and [(h.chain_id, h.position) for h in previous.heads] == positions:
        skipped: dict[str, object] = {"checkpoint_id": previous.checkpoint_id, "skipped": "no chain moved"}
        return skipped | _witness_again(store, previous, services)
    extended = extend_trees(heads, previous, ledger, _trees(services), CHAIN_READERS)
    services.metrics.emit(CHECKPOINT_REFUSED_METRIC, 1 if extended.problems else 0, "Count", {"service": "jobs"})
    if extended.problems:
        last = previous.checkpoint_id if previous else None
        logger.error("checkpoint refused: the chain heads do not extend checkpoint %s", last)
        return {"refused": extended.problems, "previous": last}
    heads = extended.heads
    checkpoint = build_checkpoint(heads, previous, services.clock())
    note = services.checkpoint_signer.sign(checkpoint)  # before the put: a checkpoint is never stored unsigned
    store.put(checkpoint)
    store.put_note(checkpoint.checkpoint_id, note.to_text())
    result: dict[str, object] = {
        "checkpoint_id": checkpoint.checkpoint_id,
        "chains": len(heads),
        "events": checkpoint.size,
        **_witness(
            store, checkpoint, note.to_text(), previous.checkpoint_id if previous else None, services, extended.paths
        ),
    }
    if findings:
        result["findings"] = [finding.describe() for finding in findings]
    return result


# Chains the checkpoint job reads at once: their heads, then their new events and tiles (a chain's at a time in
# each thread, so at most this many chains' new leaves are held). DynamoDB reads wait on the network, not on one
# another; 8 stays under botocore's 10 pooled connections a client, which more threads would only queue on.
CHAIN_READERS = 8


def chain_heads(ledger: Ledger) -> list[ChainHead]:
    """Every chain's head (one strongly consistent Query each, ``CHAIN_READERS`` at a time), in chain order;
    chains with no event yet are left out."""
    chains = ledger.chain_ids()
    with ThreadPoolExecutor(max_workers=min(CHAIN_READERS, len(chains))) as pool:
        positions = list(pool.map(ledger.head, chains))
    return [
        ChainHead(chain_id=chain, seq=head.seq, hash=head.hash)
        for chain, head in zip(chains, positions, strict=True)
        if head.seq > 0
    ]


def _witness(
    store: CheckpointStore,
    checkpoint: Checkpoint,
    note: str,
    since: str | None,
    services: Services,
    paths: Mapping[str, list[bytes]] | None = None,
) -> dict[str, object]:
    """Submit the checkpoint's ``note`` to the configured witnesses whose cosignature it does not carry yet,
    keep the good cosignatures beside it, and emit ``CHECKPOINT_UNWITNESSED_METRIC``.

    The proof sent starts at ``since`` (the previous checkpoint; None: the witness says which it holds, by
    a 409), from the chains' ``paths`` taken since then as their trees grew (those chains' tiles are not read
    again). The result names the witnesses that cosigned, those that failed, and why.
    """
    settings = services.settings
    done = cosigned_by(note, settings.witnesses)

    def proof_from(held: str | None) -> tuple[int, dict[str, Any] | None]:
        if held is None:
            return 0, None
        try:
            earlier = store.get(held)
            proof = build_consistency(earlier, checkpoint, _trees(services), paths if held == since else None)
        except (store.missing, ValueError) as exc:  # InvalidConsistency is a ValueError
            raise WitnessFailed(f"no consistency proof from checkpoint {held}: {exc}") from None
        return earlier.size, proof.to_json()

    pending = [witness for witness in settings.witnesses if witness.name not in done]
    outcome = submit_to_witnesses(pending, note, checkpoint, since, proof_from, settings.witness_timeout_seconds)
    if outcome.cosignatures:
        kept = store.cosignatures(checkpoint.checkpoint_id) if done else []
        store.put_cosignatures(checkpoint.checkpoint_id, [*kept, *outcome.cosignatures])
    cosigned = cosigned_by(note + "".join(outcome.cosignatures), settings.witnesses)
    unwitnessed = bool(settings.witnesses) and len(cosigned) < settings.witness_quorum
    services.metrics.emit(CHECKPOINT_UNWITNESSED_METRIC, 1 if unwitnessed else 0, "Count", {"service": "jobs"})
    if not settings.witnesses:
        return {}
    if unwitnessed:
        logger.error("checkpoint %s unwitnessed: %s", checkpoint.checkpoint_id, outcome.failures)
    return {"witnessed_by": sorted(cosigned), "witness_failures": outcome.failures, "unwitnessed": unwitnessed}


def _witness_again(store: CheckpointStore, latest: Checkpoint, services: Services) -> dict[str, object]:
    """On a run with nothing new, the latest checkpoint goes again to the witnesses that have not cosigned it."""
    witnesses = services.settings.witnesses
    note = store.note(latest.checkpoint_id) if witnesses else None
    if note is None or cosigned_by(note, witnesses) == {witness.name for witness in witnesses}:
        return {}
    return _witness(store, latest, note, None, services)


def _latest_readable(store: CheckpointStore, findings: list[Finding], now: datetime) -> Checkpoint | None:
    """The newest checkpoint that parses; each newer one that does not is a finding.

    The newest day's checkpoints are listed first; all of them only if none of that day's parses.
    """
    recent = store.recent_ids(now)

    def older() -> Iterator[str]:  # listed only once none of the recent ones parses
        if recent:
            yield from (i for i in reversed(store.ids()) if i < recent[0])

    for checkpoint_id in itertools.chain(reversed(recent), older()):
        read = _read_checkpoint(store, checkpoint_id, findings)
        if read is not None:
            return read
    return None


@dataclass
class VerificationReport:
    """What a verification read and found: every finding names its place."""

    chains: list[ChainReport] = field(default_factory=list)  # the ledger's chains, then any stray chain ids
    checkpoint_ids: list[str] = field(default_factory=list)
    checkpoint_findings: list[Finding] = field(default_factory=list)
    scanned_for_strays: bool = False  # whether the table was scanned for chain ids outside the ledger's

    @property
    def checkpoints_checked(self) -> int:
        return len(self.checkpoint_ids)

    @property
    def events_checked(self) -> int:
        return sum(chain.checked for chain in self.chains)

    @property
    def findings(self) -> list[Finding]:
        return [*self.checkpoint_findings, *(finding for chain in self.chains for finding in chain.findings)]

    @property
    def ok(self) -> bool:
        return not self.findings


def verify_ledger(
    ledger: Ledger,
    store: CheckpointStore,
    chains: list[str] | None = None,
    from_checkpoint: str | None = None,
    progress: Callable[[Iterator[Stored], str], Iterator[Stored]] = lambda it, _: it,
) -> VerificationReport:
    """Check every checkpoint (from ``from_checkpoint``), every item of the chains, and look for stray chains.

    Without ``chains`` every chain of the ledger is checked and the table is scanned for items under
    any other chain id, each of which is a finding. Starting from a checkpoint trusts that
    checkpoint's heads as the anchors of the chains. Nothing stored can make this raise: what does
    not parse is a finding at its place, and verification goes on.
    """
    report = VerificationReport()
    ids = store.ids()
    if from_checkpoint is not None:
        if from_checkpoint not in ids:
            raise NotFound(f"no checkpoint {from_checkpoint!r}")
        ids = ids[ids.index(from_checkpoint) :]
    read = _read_checkpoints(store, ids, report.checkpoint_findings)
    report.checkpoint_ids = ids
    report.checkpoint_findings += _checkpoint_findings(read, set(ledger.chain_ids()), from_checkpoint)
    checkpoints = [checkpoint for checkpoint in read if checkpoint is not None]
    # An anchor that does not parse anchors nothing: its chains are then checked from their start.
    anchors = read[0] if read and from_checkpoint else None
    for chain_id in chains or ledger.chain_ids():
        anchor_head = anchors.head_of(chain_id) if anchors else None
        anchor = anchor_head.position if anchor_head else GENESIS
        checkpointed = {head.seq: head.hash for c in checkpoints if (head := c.head_of(chain_id))}
        stored = progress(ledger.stored_items(chain_id, after_seq=anchor.seq), chain_id)
        report.chains.append(verify_chain(chain_id, stored, anchor, checkpointed))
    if chains is None:
        report.chains += _stray_chains(ledger)
        report.scanned_for_strays = True
    return report


def _stray_chains(ledger: Ledger) -> list[ChainReport]:
    """A report per chain id outside the ledger's: each of its events is a finding (none is served)."""
    strays: dict[str, list[str]] = {}
    for chain_id, seq in ledger.foreign_positions():
        strays.setdefault(chain_id, []).append(seq)
    known = ledger.chain_ids()
    problem = f"an item under a chain id that is not one of the ledger's chains ({known[0]} to {known[-1]})"
    return [
        ChainReport(
            chain_id,
            len(seqs),
            GENESIS,
            tuple(Finding(f"{chain_id}.{seq}", "unknown_chain", problem) for seq in sorted(seqs, key=Decimal)),
            known=False,
        )
        for chain_id, seqs in sorted(strays.items())
    ]


def _read_checkpoints(store: CheckpointStore, ids: list[str], findings: list[Finding]) -> list[Checkpoint | None]:
    """Each checkpoint in ``ids`` order, None (and a finding) for one that does not parse."""
    return [_read_checkpoint(store, checkpoint_id, findings) for checkpoint_id in ids]


def _read_checkpoint(store: CheckpointStore, checkpoint_id: str, findings: list[Finding]) -> Checkpoint | None:
    """The checkpoint, or None (and a finding) when it does not parse."""
    try:
        return store.get(checkpoint_id)
    except ValueError as exc:  # not UTF-8, not JSON, or not a checkpoint's fields
        problem = f"not a well-formed checkpoint ({type(exc).__name__})"
        findings.append(Finding(f"checkpoint {checkpoint_id}", "malformed", problem))
        return None


def _checkpoint_findings(
    checkpoints: list[Checkpoint | None], known: set[str], from_checkpoint: str | None
) -> list[Finding]:
    """Hash, root and link of each checkpoint; heads only of ledger chains, never going backwards.

    As in a chain, the checkpoint after a malformed one is not link-checked (the link cannot say more).
    """
    findings = []
    previous: Checkpoint | None = None  # the checkpoint just before, when it parsed
    last: Checkpoint | None = None  # the last one that parsed: no head may go back from it
    for index, checkpoint in enumerate(checkpoints):
        if checkpoint is None:
            previous = None
            continue
        where = f"checkpoint {checkpoint.checkpoint_id}"
        if checkpoint.recomputed_hash() != checkpoint.hash:
            findings.append(Finding(where, "hash", "does not match its hash"))
        if checkpoint.recomputed_root() != checkpoint.root:
            findings.append(Finding(where, "root", "its heads do not fold into its root"))
        if previous is not None and checkpoint.prev_checkpoint_hash != previous.hash:
            findings.append(Finding(where, "link", f"does not link to checkpoint {previous.checkpoint_id}"))
        if index == 0 and from_checkpoint is None and checkpoint.prev_checkpoint_hash != GENESIS_HASH:
            findings.append(Finding(where, "link", "is the first checkpoint but links to another one"))
        for head in checkpoint.heads:
            if head.chain_id not in known:
                findings.append(
                    Finding(where, "unknown_chain", f"records a head of {head.chain_id}, not a ledger chain")
                )
        for head in last.heads if last else []:
            later = checkpoint.head_of(head.chain_id)
            if later is None or later.seq < head.seq:
                findings.append(Finding(where, "backwards", f"chain {head.chain_id} went backwards"))
        previous = last = checkpoint
    return findings


def prove(ledger: Ledger, store: CheckpointStore, event_id: str) -> InclusionProof:
    """The shortest proof for an event: against the first checkpoint whose head covers it."""
    chain_id, seq = parse_event_id(event_id)
    try:
        event = ledger.event(chain_id, seq)
        if event is None:
            raise NotFound(f"no event {event_id}")
        return _prove(ledger, store, event, chain_id, seq)
    except DECODE_ERRORS as exc:
        # The event or one after it up to the checkpoint does not parse: no proof can link through it.
        failure = undecodable(f"ledger event {event_id} or one after it up to its checkpoint", event_id, exc)
        raise UndecodableItem(f"{failure.message}; `flowledger audit verify` names it", event_id) from None


def _prove(ledger: Ledger, store: CheckpointStore, event: AuditEvent, chain_id: str, seq: int) -> InclusionProof:
    event_id = event.event_id
    for checkpoint_id in _ids_from(store, event.at):
        checkpoint = _read_checkpoint(store, checkpoint_id, [])
        head = checkpoint.head_of(chain_id) if checkpoint else None  # a malformed checkpoint covers nothing
        if checkpoint is not None and head is not None and head.seq >= seq:
            segment = list(ledger.read_chain(chain_id, after_seq=seq, until_seq=head.seq))
            return build_proof(event, segment, checkpoint)
    raise NotFound(f"no checkpoint covers {event_id} yet; the next one is taken within 5 minutes")


def checkpoint_job(services: Services) -> dict[str, object]:
    """The scheduled job: take a checkpoint of every chain head."""
    return take_checkpoint(services.ledger, checkpoints_of(services), services)


def prove_consistency(services: Services, earlier_id: str, later_id: str | None) -> ConsistencyProof:
    """The consistency proof from checkpoint ``earlier_id`` to ``later_id`` (default: the latest)."""
    store = checkpoints_of(services)
    later_id = later_id or store.latest_id(services.clock())
    if later_id is None:
        raise NotFound("no checkpoint has been taken yet")
    earlier, later = (_checkpoint(store, wanted) for wanted in (earlier_id, later_id))
    if later_id < earlier_id:
        raise InvalidInput(f"{later_id} was taken before {earlier_id}: give the earlier one as --from")
    try:
        return build_consistency(earlier, later, _trees(services))
    except InvalidConsistency as exc:
        raise InvalidInput(str(exc)) from None


def _trees(services: Services) -> TreeOf:
    table = services.aws.table_name("ledger_tiles")
    return lambda chain_id, size: chain_tree(services.aws.dynamodb, table, chain_id, size)


ANCHOR_CANDIDATES = 20  # checkpoints after a subject's last event tried as its anchor before the latest is used


@dataclass(frozen=True)
class Bundled:
    bundle: EvidenceBundle
    left_out: int  # the subject's events newer than the latest checkpoint: in the next bundle, not this one


def export_bundle(services: Services, subject: str) -> Bundled:
    """The evidence bundle of ``subject``'s events (``ledger/bundle.py``).

    Its checkpoint is the first signed one that covers every event (a bundle made next month names the
    same one), with the consistency proof from it to the latest checkpoint and the latest's note.
    """
    events: list[AuditEvent] = []
    cursor = None
    while True:
        page, cursor = services.ledger.subject_page(subject, 200, None, None, cursor)
        events += page
        if len(events) > MAX_EVENTS:
            raise InvalidInput(f"{subject} has more than {MAX_EVENTS:,} audit events; a bundle holds at most that many")
        if cursor is None:
            break
    if not events:
        raise NotFound(f"no audit events for {subject}")
    store = checkpoints_of(services)
    latest_id = store.latest_id(services.clock())
    latest = _checkpoint(store, latest_id) if latest_id else None
    covered = [event for event in events if latest is not None and _covers(latest, [event])]
    if latest is None or latest_id is None or not covered:
        raise NotFound(f"no checkpoint covers {subject}'s events yet; the next one is taken within minutes")
    latest_note = store.note(latest_id)
    anchor, note = _anchor(store, covered, services.settings, latest, latest_note) or (latest, latest_note)
    if note is None or latest_note is None:
        raise NotFound("the checkpoints covering these events were taken before checkpoints were signed")
    trees = _trees(services)
    try:
        consistency = build_consistency(anchor, latest, trees) if anchor.checkpoint_id != latest_id else None
        bundle = build_bundle(subject, covered, anchor, note, trees, consistency, latest_note if consistency else None)
    except (InvalidConsistency, ValueError) as exc:
        raise InvalidInput(f"no bundle for {subject}: {exc}; `flowledger audit verify` checks the ledger") from None
    return Bundled(bundle, len(events) - len(covered))


def _covers(checkpoint: Checkpoint, events: list[AuditEvent]) -> bool:
    """Whether every event is under ``checkpoint``'s head of its chain, in a chain with a tree root."""
    for event in events:
        head = checkpoint.head_of(event.chain_id)
        if head is None or head.seq < event.seq or head.tree_root is None:
            return False
    return True


def _anchor(
    store: CheckpointStore, events: list[AuditEvent], settings: Settings, latest: Checkpoint, latest_note: str | None
) -> tuple[Checkpoint, str] | None:
    """The first checkpoint after the newest event that covers them all, signed and cosigned by the quorum
    (with that note, read once; the latest checkpoint and its note, already read, are not read again).

    One the witnesses missed (one was down) is passed over: it never gets their cosignatures later (a witness
    cosigns only what extends the checkpoint it holds), so a bundle anchored on it could never verify.
    """
    newest = max(event.at for event in events)
    quorum = settings.witness_quorum if settings.witnesses else 0
    for checkpoint_id in itertools.islice(_ids_from(store, newest), ANCHOR_CANDIDATES):
        is_latest = checkpoint_id == latest.checkpoint_id
        checkpoint = latest if is_latest else _checkpoint(store, checkpoint_id)
        if not _covers(checkpoint, events):
            continue
        note = latest_note if is_latest else store.note(checkpoint_id)
        if note is not None and len(cosigned_by(note, settings.witnesses)) >= quorum:
            return checkpoint, note
    return None


# How far before an event a checkpoint covering it may be dated: the job reads the heads before it stamps the
# checkpoint, so only writers' clocks running ahead of the job's could put one earlier.
CLOCK_MARGIN = timedelta(minutes=5)


def _ids_from(store: CheckpointStore, at: str) -> Iterator[str]:
    """The ids of the checkpoints that can cover an event written at ``at``, oldest first, listed lazily.

    Never every checkpoint ever taken (at a 1-minute cadence, half a million a year): ids are their UTC
    time, so the listing starts just before the event.
    """
    start = timestamp(parse_timestamp(at) - CLOCK_MARGIN)
    return store.iter_ids(start_after=checkpoint_id_at(start))


def _checkpoint(store: CheckpointStore, checkpoint_id: str) -> Checkpoint:
    try:
        return store.get(checkpoint_id)
    except store.missing:
        raise NotFound(f"no checkpoint {checkpoint_id}") from None
