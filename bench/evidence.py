"""Evidence bundles and consistency proofs (#32), against the locked moto server.

1. A flow of 50 steps (52 events: opened, 50 steps, completed) in a ledger of 100,000 events over 16
   chains, its events interleaved with other traffic on its chain, then 10,000 more events and a later
   checkpoint: the bundle's size, the time ``export_bundle`` takes (the route's and the CLI's work), and the
   standalone ``tools/verify_bundle.py``'s checking time (in process; and as a process, interpreter included).
2. Two checkpoints an hour apart at 100 writes/s (360,000 events between them, 100,000 before): the time
   ``prove_consistency`` takes and the proof's size.

The other subjects' events exist only as leaves of their chains' trees (the tiles the checkpoint job
keeps): a bundle reads the subject's events, the tiles and the checkpoints, never anyone else's events,
so the figures are those of a full ledger while the setup stays within a minute.
Targets: bundle under 64 KB and verified in under 50 ms; consistency proof produced in under 2 s.
"""

from __future__ import annotations

import hashlib
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flowledger.config import load_settings
from flowledger.ledger.audit import checkpoints_of, export_bundle, prove_consistency
from flowledger.ledger.chain_trees import chain_tree
from flowledger.ledger.checkpoints import ChainHead, Checkpoint, build_checkpoint
from flowledger.ledger.events import AuditEntry, seal
from flowledger.ledger.merkle import leaf_hash
from flowledger.ledger.store import to_item
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import Services, build_services
from flowledger.store.provision import provision_all

CHAINS = 16
LEDGER_EVENTS = 100_000
STEPS = 50
OTHERS_BETWEEN = 5  # other writers' events on the flow's chain between two of its events
HOUR_OF_WRITES = 100 * 3600
T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
TOOL = Path(__file__).parents[1] / "tools" / "verify_bundle.py"


def synthetic(chain: str, seq: int) -> str:
    """The hash of another subject's event at this place: only its chain's tree holds it."""
    return hashlib.sha256(f"{chain}.{seq}".encode()).hexdigest()


class Chains:
    """The chains' trees and heads as the checkpoint job would have grown them."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.tiles = services.aws.table_name("ledger_tiles")
        self.heads: dict[str, tuple[int, str]] = {f"chain-{n:03d}": (0, "") for n in range(CHAINS)}
        self.trees = {chain: chain_tree(services.aws.dynamodb, self.tiles, chain, 0) for chain in self.heads}

    def others(self, chain: str, count: int) -> None:
        seq, _ = self.heads[chain]
        hashes = [synthetic(chain, s) for s in range(seq + 1, seq + count + 1)]
        self.trees[chain].append(leaf_hash(bytes.fromhex(h)) for h in hashes)
        self.heads[chain] = (seq + count, hashes[-1])

    def spread(self, total: int) -> None:
        for n in range(CHAINS):
            self.others(f"chain-{n:03d}", total // CHAINS)

    def flow_event(self, chain: str, entry: AuditEntry, at: datetime) -> None:
        seq, last = self.heads[chain]
        event = seal(entry, chain, seq + 1, last, at)
        self.services.aws.dynamodb.put_item(TableName=self.services.aws.table_name("ledger"), Item=to_item(event))
        self.trees[chain].append([leaf_hash(bytes.fromhex(event.hash))])
        self.heads[chain] = (event.seq, event.hash)

    def checkpoint(self, previous: Checkpoint | None, at: datetime) -> Checkpoint:
        heads = [
            ChainHead(chain_id=chain, seq=seq, hash=last, tree_root=self.trees[chain].root().hex())
            for chain, (seq, last) in self.heads.items()
        ]
        checkpoint = build_checkpoint(heads, previous, at)
        store = checkpoints_of(self.services)
        store.put(checkpoint)
        store.put_note(checkpoint.checkpoint_id, self.services.checkpoint_signer.sign(checkpoint).to_text())
        return checkpoint


def fresh(endpoint: str, name: str) -> Services:
    settings = load_settings(aws_endpoint_url=endpoint, resource_prefix=f"{name}{int(time.time())}")
    services = build_services(settings, EMBEDDED_CREDENTIALS)
    provision_all(services.aws, services.settings)
    return services


def timed(action: Any, runs: int) -> tuple[float, Any]:
    took, result = [], None
    for _ in range(runs):
        began = time.perf_counter()
        result = action()
        took.append(time.perf_counter() - began)
    return statistics.median(took), result


def bundle_figures(endpoint: str) -> bool:
    services = fresh(endpoint, "bundle")
    chains = Chains(services)
    chains.spread(LEDGER_EVENTS - (STEPS + 2) * (OTHERS_BETWEEN + 1))
    flow, chain = "flow:fl_bench", "chain-007"
    actions = ["reasoning.flow.started"] + ["reasoning.step.created"] * STEPS
    for n, action in enumerate(actions):
        chains.others(chain, OTHERS_BETWEEN)
        refs = {"step_id": f"st_{n:03d}"} if n else {}
        chains.flow_event(chain, AuditEntry(action=action, actor="user:bench", subject=flow, refs=refs), T0)
    chains.others(chain, OTHERS_BETWEEN)
    closing = AuditEntry(action="reasoning.flow.completed", actor="user:bench", subject=flow, payload={"steps": STEPS})
    chains.flow_event(chain, closing, T0)
    first = chains.checkpoint(None, T0 + timedelta(minutes=1))
    chains.spread(10_000)
    chains.checkpoint(first, T0 + timedelta(minutes=6))
    events = sum(seq for seq, _ in chains.heads.values())
    produce, bundled = timed(lambda: export_bundle(services, flow), 5)
    raw = bundled.bundle.to_bytes()
    spec = importlib.util.spec_from_file_location("verify_bundle", TOOL)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    log = tool.Key(services.checkpoint_signer.verifier.vkey())
    check, lines = timed(lambda: tool.verify(raw, log, [], 0), 21)
    with tempfile.NamedTemporaryFile(suffix=".json") as file:
        file.write(raw)
        file.flush()
        argv = [sys.executable, str(TOOL), file.name, "--log-key", log_key_text(services)]
        process, _ = timed(lambda: subprocess.run(argv, check=True, capture_output=True), 5)
    nodes = sum(len(chain.nodes) for chain in bundled.bundle.chains)
    print(f"bundle of a {STEPS}-step flow ({len(bundled.bundle.events)} events) in a ledger of {events:,} events")
    print(f"  {lines[0]}")
    print(f"  size          {len(raw):>9,} bytes   (inclusion nodes: {nodes}, events: {len(bundled.bundle.events)})")
    print(f"  produced in   {produce * 1000:>9.0f} ms      (export_bundle: reads, tiles, checkpoints; median of 5)")
    print(f"  verified in   {check * 1000:>9.1f} ms      (tools/verify_bundle.py's checks; median of 21)")
    print(f"  as a process  {process * 1000:>9.0f} ms      (python verify_bundle.py: interpreter and imports included)")
    print("  target: under 65,536 bytes, verified in under 50 ms")
    return len(raw) < 65_536 and check < 0.05


def log_key_text(services: Services) -> str:
    return services.checkpoint_signer.verifier.vkey()


def consistency_figures(endpoint: str) -> bool:
    services = fresh(endpoint, "consist")
    chains = Chains(services)
    chains.spread(LEDGER_EVENTS)
    earlier = chains.checkpoint(None, T0)
    chains.spread(HOUR_OF_WRITES)
    later = chains.checkpoint(earlier, T0 + timedelta(hours=1))
    took, proof = timed(lambda: prove_consistency(services, earlier.checkpoint_id, later.checkpoint_id), 5)
    size = len(proof.to_bytes())
    hashes = sum(len(chain.path) for chain in proof.chains)
    print(f"consistency proof between checkpoints an hour apart at 100 writes/s ({HOUR_OF_WRITES:,} events between)")
    print(f"  produced in   {took * 1000:>9.0f} ms      (median of 5)")
    print(f"  size          {size:>9,} bytes   ({hashes} hashes over {len(proof.chains)} chains)")
    print("  target: produced in under 2 s")
    return took < 2.0


def main() -> int:
    server = LockedMotoServer()
    endpoint = server.start()
    try:
        met = bundle_figures(endpoint)
        met = consistency_figures(endpoint) and met
        return 0 if met else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
