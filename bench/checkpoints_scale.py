"""Checkpoints over 1,000 chains, against the locked moto server and a real `flowledger witness serve`.

The ledger is filled with ``--events-per-chain`` sealed events on every chain (BatchWriteItem, in chain order:
the very items ``Ledger.append`` writes, without a transaction each), then the checkpoint job takes the first
checkpoint; every chain moves by as many events again and the job takes the next one, submitting each to a
witness served as its own process. Figures:

- the note's size, and the witness request body (``AddCheckpoint``) for the first and the next checkpoint
  against the witness's limit and whether the witness cosigned; and the body at the bound the limit is sized
  from (``WITNESSED_CHAINS`` chains at ``MAX_CHAIN_EVENTS`` events, every one moved, each path the longest:
  trees of identical leaves, so built in memory), submitted to the same witness (as a second log's);
- the job's run time for each checkpoint and its split (head reads, event reads, extension checks, tree
  growth, sign and put, consistency proof, witness), and its peak memory (tracemalloc) on a third checkpoint
  after as many events again;
- the verifier's peak memory (tracemalloc) and time: ``check_consistency`` on the proof file between the first
  two checkpoints (``flowledger audit check-consistency``), and ``verify_ledger`` over every chain (what
  ``flowledger audit verify`` runs, less its scan for stray chain ids: moto's scan grows faster than linearly
  with the table, DynamoDB's does not, and it keeps nothing but the strays it finds).

The moto server runs in a process of its own: DynamoDB is another machine, and the job's own work (hashing,
parsing) would otherwise share this process's interpreter lock with the server's.
Targets: every witness body at most the witness's limit and cosigned, the bound's too; the next checkpoint's
job under 60 s; the verifier's peak memory under 256 MB.
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from witness_bound import checkpoints_at_the_bound

from flowledger.config import load_settings
from flowledger.ledger import audit, chain_trees, extension, witnessing
from flowledger.ledger.audit import checkpoints_of, take_checkpoint, verify_ledger
from flowledger.ledger.checkpoint_notes import checkpoint_text
from flowledger.ledger.checkpoints import ChainHead, Checkpoint, CheckpointStore
from flowledger.ledger.consistency import build_consistency, check_consistency
from flowledger.ledger.events import AuditEntry, seal
from flowledger.ledger.signed_note import ED25519, Note, Signature, VerifierKey
from flowledger.ledger.store import Ledger, to_item
from flowledger.ledger.witnessing import (
    ADD_CHECKPOINT,
    MAX_CHAIN_EVENTS,
    MAX_REQUEST_BYTES,
    WITNESSED_CHAINS,
    AddCheckpoint,
    WitnessEndpoint,
)
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import Services, build_services
from flowledger.store.provision import provision_all
from flowledger.witness.keys import FileWitnessKey

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
CADENCE = timedelta(minutes=5)
JOB_TARGET_SECONDS = 60.0
VERIFIER_TARGET_BYTES = 256 * 1024 * 1024
BATCH = 25  # BatchWriteItem's limit
WRITERS = 4  # threads filling the chains (the server takes one request at a time)


def serve_moto(conn: Any) -> None:
    """The locked moto server in this (child) process until the parent says stop."""
    server = LockedMotoServer()
    conn.send(server.start())
    conn.recv()
    server.stop()


@contextmanager
def moto_process() -> Iterator[str]:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=serve_moto, args=(child,), daemon=True)
    process.start()
    try:
        yield parent.recv()
    finally:
        parent.send("stop")
        process.join(timeout=10)


@contextmanager
def witness_served(folder: Path, log_vkeys: list[str]) -> Iterator[WitnessEndpoint]:
    """`flowledger witness serve` of these logs as its own process, on a free port."""
    key = folder / "witness.key"
    vkey = FileWitnessKey.create(key, "witness.bench.example").verifier.vkey()
    command = [sys.executable, "-m", "flowledger.cli", "witness", "serve", "--key", str(key)]
    command += ["--state", str(folder / "witness-state"), "--port", "0"]
    command += [arg for vkey in log_vkeys for arg in ("--log", vkey)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        started = process.stdout.readline()  # "witness VKEY on http://127.0.0.1:PORT/add-checkpoint for ..."
        if " on " not in started:
            raise RuntimeError(f"the witness did not start: {started}{process.stderr.read() if process.stderr else ''}")
        yield WitnessEndpoint(url=started.split(" on ")[1].split(ADD_CHECKPOINT)[0], vkey=vkey)
    finally:
        process.terminate()
        process.communicate(timeout=10)


class Filler:
    """Sealed events written in chain order, 25 to a BatchWriteItem: the items ``Ledger.append`` writes."""

    def __init__(self, services: Services, chains: list[str]) -> None:
        self.services = services
        self.table = services.aws.table_name("ledger")
        self.heads = {chain: (0, "0" * 64) for chain in chains}

    def grow(self, count: int, at: datetime) -> float:
        """``count`` more events on every chain; the seconds it took."""
        began = time.perf_counter()
        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(lambda chain: self._chain(chain, count, at), list(self.heads)))
        return time.perf_counter() - began

    def _chain(self, chain: str, count: int, at: datetime) -> None:
        seq, last = self.heads[chain]
        items = []
        for n in range(seq + 1, seq + count + 1):
            entry = AuditEntry(
                action="reasoning.step.created",
                actor="arn:aws:iam::123456789012:role/flowledger-reasoning",
                subject=f"flow:fl_{chain[-3:]}_{n // 50:06d}",
                refs={"step_id": f"st_{n:08d}"},
                payload={"retry_count": 0, "tokens": n % 997},
            )
            event = seal(entry, chain, n, last, at + timedelta(microseconds=n))
            items.append(to_item(event))
            last = event.hash
        db = self.services.aws.dynamodb
        for start in range(0, len(items), BATCH):
            pending: dict[str, Any] = {self.table: [{"PutRequest": {"Item": i}} for i in items[start : start + BATCH]]}
            while pending:
                pending = db.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
        self.heads[chain] = (seq + count, last)


class Phases:
    """Seconds spent in each part of the checkpoint job, from wrappers put around its steps: wall time for the
    steps the job runs one after another, thread-seconds (summed over its threads) for those inside a chain."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()
        self._mine = threading.local()  # this thread's seconds by phase: what ``less`` takes off
        self._undo: list[Callable[[], None]] = []

    def _add(self, label: str, seconds: float) -> None:
        with self._lock:
            self.seconds[label] = self.seconds.get(label, 0.0) + seconds
        mine = self._own()
        mine[label] = mine.get(label, 0.0) + seconds

    def _own(self) -> dict[str, float]:
        if not hasattr(self._mine, "seconds"):
            self._mine.seconds = {}
        own: dict[str, float] = self._mine.seconds
        return own

    def wrap(self, label: str, owner: Any, name: str, less: tuple[str, ...] = ()) -> None:
        """Time ``owner.name`` as ``label``, less what this thread spent inside it in the phases ``less``."""
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            began, inner = time.perf_counter(), sum(self._own().get(phase, 0.0) for phase in less)
            try:
                return original(*args, **kwargs)
            finally:
                inside = sum(self._own().get(phase, 0.0) for phase in less) - inner
                self._add(label, time.perf_counter() - began - inside)

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def wrap_iterator(self, label: str, owner: Any, name: str) -> None:
        """Time spent producing each item of what ``owner.name`` returns (a lazy read: its pages as consumed)."""
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
            iterator = iter(original(*args, **kwargs))
            while True:
                began = time.perf_counter()
                try:
                    item = next(iterator)
                except StopIteration:
                    return
                finally:
                    self._add(label, time.perf_counter() - began)
                yield item

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def undo(self) -> None:
        for step in reversed(self._undo):
            step()


class Bodies:
    """What the job posts to the witness: each body's size and the status it got."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []
        self._post = witnessing._post

    def __enter__(self) -> Bodies:
        def post(url: str, body: bytes, timeout: float) -> tuple[int, dict[str, str], bytes]:
            answer = self._post(url, body, timeout)
            self.sent.append((len(body), answer[0]))
            return answer

        witnessing._post = post  # type: ignore[assignment]
        return self

    def __exit__(self, *_: object) -> None:
        witnessing._post = self._post  # type: ignore[assignment]


# (label, in thread-seconds): the steps inside "chains" run on the job's threads, a chain at a time each.
PHASES = [("head reads", False), ("previous checkpoint", False), ("chains", False), ("event reads", True)]
PHASES += [("extension checks", True), ("tree growth", True), ("sign and put", False), ("consistency proof", False)]
PHASES += [("witness", False), ("other", False)]


@dataclass
class Run:
    """One checkpoint job run."""

    filled: float  # seconds the fill before it took (not the job's)
    result: dict[str, object]
    took: float
    cpu: float  # this process's CPU seconds (moto and the witness run in processes of their own)
    split: dict[str, float]
    bodies: Bodies


def run_job(services: Services, store: CheckpointStore, filled: float) -> Run:
    """One checkpoint job run: its result, seconds, split, and what it posted to the witness."""
    phases = Phases()
    phases.wrap("head reads", audit, "chain_heads")
    phases.wrap("previous checkpoint", audit, "_latest_readable")
    phases.wrap("chains", audit, "extend_trees")
    phases.wrap_iterator("event reads", services.ledger, "read_chain")  # DynamoDB, and each event parsed
    phases.wrap("extension checks", extension, "verify_chain", less=("event reads",))
    phases.wrap("tree growth", chain_trees.ChainTree, "append", less=("event reads",))
    phases.wrap("tree growth", chain_trees, "consistency_proof_of")  # the path to the witness, while at hand
    phases.wrap("sign and put", services.checkpoint_signer, "sign")
    phases.wrap("sign and put", store, "put")
    phases.wrap("sign and put", store, "put_note")
    phases.wrap("consistency proof", audit, "build_consistency")
    phases.wrap("witness", audit, "_witness", less=("consistency proof",))
    try:
        with Bodies() as bodies:
            began, cpu = time.perf_counter(), time.process_time()
            result = take_checkpoint(services.ledger, store, services)
            took, cpu = time.perf_counter() - began, time.process_time() - cpu
    finally:
        phases.undo()
    split = dict(phases.seconds)
    split["other"] = took - sum(split.get(label, 0.0) for label, threads in PHASES if not threads)
    return Run(filled, result, took, cpu, split, bodies)


def one_at_a_time(services: Services, previous: Checkpoint) -> tuple[float, float]:
    """The peers, in the same run: the heads read one at a time, and the chains extended and grown one at a
    time (the trees grown again from ``previous``, to the same tiles)."""
    ledger = services.ledger
    began = time.perf_counter()
    heads = [ChainHead(chain_id=c, seq=h.seq, hash=h.hash) for c in ledger.chain_ids() if (h := ledger.head(c)).seq]
    read = time.perf_counter() - began
    began = time.perf_counter()
    extended = chain_trees.extend_trees(heads, previous, ledger, audit._trees(services), 1)
    if extended.problems:
        raise RuntimeError(f"the chains do not extend the first checkpoint: {extended.problems[:3]}")
    return read, time.perf_counter() - began


class BoundLog:
    """A second log the witness is given: two checkpoints at the bound, signed with a key of its own."""

    def __init__(self, chains: int) -> None:
        self._private = Ed25519PrivateKey.generate()
        raw = self._private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key = VerifierKey("flowledger/bench/bound", ED25519, raw)
        self.earlier, self.later, self.proof = checkpoints_at_the_bound(chains, T0)

    def note(self, checkpoint: Checkpoint) -> str:
        text = checkpoint_text(self.key.name, checkpoint)
        return Note(text, (Signature(self.key.name, self.key.key_id, self._private.sign(text.encode())),)).to_text()

    def bodies(self) -> tuple[bytes, bytes]:
        """The first checkpoint's body (old size 0), and the bound's: the second's, with its proof."""
        first = AddCheckpoint(old_size=0, note=self.note(self.earlier), checkpoint=self.earlier, consistency=None)
        second = AddCheckpoint(
            old_size=self.earlier.size,
            note=self.note(self.later),
            checkpoint=self.later,
            consistency=self.proof.to_json(),
        )
        return first.to_bytes(), second.to_bytes()


def submit_bound(witness: WitnessEndpoint, log: BoundLog) -> tuple[int, int, float]:
    """The bound's body size, the witness's status for it, and the seconds it took to answer."""
    first, bound = log.bodies()
    url = witness.url + ADD_CHECKPOINT
    status, _, answer = witnessing._post(url, first, 60.0)
    if status != 200:
        raise RuntimeError(f"the witness refused the bound log's first checkpoint: {status} {answer!r}")
    began = time.perf_counter()
    status, _, _ = witnessing._post(url, bound, 60.0)
    return len(bound), status, time.perf_counter() - began


def traced(action: Callable[[], Any]) -> tuple[float, int, Any]:
    """Seconds (under tracemalloc), peak traced bytes, and the result."""
    tracemalloc.start()
    try:
        began = time.perf_counter()
        result = action()
        took = time.perf_counter() - began
        _, top = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return took, top, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=int, default=1000, help="chains in the ledger (default 1000)")
    parser.add_argument(
        "--events-per-chain", type=int, default=100, help="events each chain gains between checkpoints (default 100)"
    )
    args = parser.parse_args()
    chains, per_chain = args.chains, args.events_per_chain
    bound_log = BoundLog(min(chains, WITNESSED_CHAINS))
    with tempfile.TemporaryDirectory() as folder, moto_process() as endpoint:
        now = [T0]
        settings = load_settings(
            aws_endpoint_url=endpoint, resource_prefix=f"ckpt{int(time.time())}", ledger_shards=chains
        )
        services = build_services(settings, EMBEDDED_CREDENTIALS)
        provision_all(services.aws, services.settings)
        services.clock = lambda: now[0]
        services.metrics.emit = lambda *_, **__: None  # type: ignore[method-assign]
        store = checkpoints_of(services)
        logs = [services.checkpoint_signer.verifier.vkey(), bound_log.key.vkey()]
        with witness_served(Path(folder), logs) as witness:
            services.settings = services.settings.model_copy(
                update={"witnesses": [witness], "witness_timeout_seconds": 60.0}
            )
            filler = Filler(services, services.ledger.chain_ids())
            runs: list[Run] = []
            for round_ in range(3):
                filled = filler.grow(per_chain, T0 + round_ * CADENCE + timedelta(seconds=1))
                now[0] = T0 + (round_ + 1) * CADENCE
                if round_ < 2:
                    runs.append(run_job(services, store, filled))
                else:  # the third: the job's peak memory
                    _, job_peak, _ = traced(lambda: take_checkpoint(services.ledger, store, services))
                if round_ == 1:
                    heads_alone, chains_alone = one_at_a_time(services, store.get(store.ids()[0]))
            bound_size, bound_status, bound_took = submit_bound(witness, bound_log)
        ids = store.ids()
        first, second = store.get(ids[0]), store.get(ids[1])
        note = store.note(ids[1]) or ""
        proof = build_consistency(first, second, audit._trees(services)).to_bytes()
        began = time.perf_counter()
        check_consistency(proof)
        check_took = time.perf_counter() - began
        _, check_peak, _ = traced(lambda: check_consistency(proof))
        ledger = Ledger(services.aws.dynamodb, services.aws.table_name("ledger"), chains, services.clock)
        began = time.perf_counter()
        report = verify_ledger(ledger, store, ledger.chain_ids())
        verify_took = time.perf_counter() - began
        _, verify_peak, _ = traced(lambda: verify_ledger(ledger, store, ledger.chain_ids()))
        _, held, _ = traced(lambda: [store.get(checkpoint_id) for checkpoint_id in ids])
    met = report.ok
    print(f"checkpoints over {chains:,} chains, {per_chain:,} events a chain between checkpoints")
    print(f"  note                {len(note.encode()):>12,} bytes   (its witness's cosignature included)")
    print(f"  checkpoint (JSON)   {len(second.to_bytes()):>12,} bytes")
    print(f"  consistency proof   {len(proof):>12,} bytes   (the file: both checkpoints, {chains:,} paths)")
    labels = ["first", "next"]
    for run, label in zip(runs, labels, strict=True):
        sizes = ", ".join(f"{size:>12,} bytes, HTTP {status}" for size, status in run.bodies.sent) or "none"
        cosigned = run.result.get("witnessed_by") == ["witness.bench.example"]
        met = met and cosigned and all(size <= MAX_REQUEST_BYTES for size, _ in run.bodies.sent)
        print(f"  witness body, {label:<5} {sizes}   cosigned: {'yes' if cosigned else 'NO'}")
    met = met and bound_status == 200 and bound_size <= MAX_REQUEST_BYTES
    print(
        f"  witness body, bound {bound_size:>12,} bytes, HTTP {bound_status}   cosigned: "
        f"{'yes' if bound_status == 200 else 'NO'} in {bound_took * 1000:.0f} ms   ({len(bound_log.later.heads):,}"
        f" chains from {MAX_CHAIN_EVENTS - 1:,} to {MAX_CHAIN_EVENTS:,} events, each path longest)"
    )
    print(f"  witness limit       {MAX_REQUEST_BYTES:>12,} bytes   (MAX_REQUEST_BYTES)")
    print()
    print(f"  {'job run':<26}" + "".join(f"{label:>12}" for label in labels))
    print(f"  {'events read':<26}" + "".join(f"{chains * per_chain:>12,}" for _ in runs))
    print(f"  {'fill (not the job)':<26}" + "".join(f"{run.filled:>11.1f}s" for run in runs))
    print(f"  {'job, in all':<26}" + "".join(f"{run.took:>11.1f}s" for run in runs))
    for phase, threads in PHASES:
        label = f"    {phase}" if threads else f"  {phase}"
        print(f"  {label:<26}" + "".join(f"{run.split.get(phase, 0.0):>11.2f}s" for run in runs))
    print(f"  {'job CPU (this process)':<26}" + "".join(f"{run.cpu:>11.1f}s" for run in runs))
    print("  (chains: wall time on the job's threads; the three under it: seconds summed over those threads)")
    nxt = runs[1]
    print(
        f"  one at a time, next:      head reads {heads_alone:.2f}s (pooled {nxt.split['head reads']:.2f}s),"
        f" chains {chains_alone:.2f}s (pooled {nxt.split['chains']:.2f}s)"
    )
    met = met and nxt.took < JOB_TARGET_SECONDS
    per_event = job_peak / (chains * per_chain)
    print(f"  job peak memory     {job_peak / 2**20:>9.1f} MB   (a third run: {per_event:,.0f} bytes an event read)")
    print(f"  job CPU an event    {nxt.cpu / (chains * per_chain) * 1e6:>9.0f} us   (the next run's, all its work)")
    print()
    print(f"  check_consistency   {check_took * 1000:>9.0f} ms   peak {check_peak / 2**20:>7.1f} MB")
    print(
        f"  verify_ledger       {verify_took * 1000:>9.0f} ms   peak {verify_peak / 2**20:>7.1f} MB   "
        f"({report.events_checked:,} events, {report.checkpoints_checked} checkpoints: "
        f"{'ok' if report.ok else 'FINDINGS'}; no stray-chain scan)"
    )
    each = held / len(ids)
    print(
        f"  checkpoints held    {each / 2**20:>9.2f} MB a checkpoint   (verify_ledger keeps every one it checks:"
        f" a day's at a 5-minute cadence, {288 * each / 2**20:,.0f} MB)"
    )
    met = met and max(check_peak, verify_peak) < VERIFIER_TARGET_BYTES
    print(
        f"  targets: witness bodies <= {MAX_REQUEST_BYTES:,} bytes and cosigned, the bound's too; the next"
        f" checkpoint's job under {JOB_TARGET_SECONDS:.0f} s; verifier peak under {VERIFIER_TARGET_BYTES // 2**20} MB"
    )
    print(f"  {'every target met' if met else 'TARGET MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
