"""Consistency proofs between checkpoints: written by `flowledger audit consistency`, checked offline by
`audit check-consistency`, small however many events came between, and refused for every way a later
checkpoint can fail to extend an earlier one."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowledger.cli import main
from flowledger.ledger.audit import checkpoints_of, prove_consistency, take_checkpoint
from flowledger.ledger.checkpoints import Checkpoint, build_checkpoint
from flowledger.ledger.consistency import InvalidConsistency, build_consistency, check_consistency
from flowledger.ledger.events import AuditEntry, canonical
from flowledger.ledger.merkle import leaf_hash
from flowledger.ledger.tiles import ChainTree
from flowledger.local.datadir import DataDir
from flowledger.services import Services
from tests.integration.test_audit_cli import module_store
from tests.memory_tiles import MemoryTiles

T0 = datetime(2027, 1, 4, 9, 0, tzinfo=UTC)  # after the store fixture's own checkpoint, taken now


def grow(services: Services, count: int, chains: tuple[str, ...] = ("chain-000", "chain-001")) -> None:
    for n in range(count):
        services.ledger._writer.chain = chains[n % len(chains)]
        services.ledger.append(AuditEntry(action="reasoning.flow.started", actor="user:a", subject=f"flow:{n}"))


def checkpoints(services: Services, rounds: list[int]) -> list[Checkpoint]:
    """A checkpoint after each round of appends (an hour apart)."""
    taken = []
    for hour, count in enumerate(rounds):
        services.clock = lambda hour=hour: T0 + timedelta(hours=hour)
        grow(services, count)
        taken.append(
            checkpoints_of(services).get(
                str(take_checkpoint(services.ledger, checkpoints_of(services), services)["checkpoint_id"])
            )
        )
    return taken


@pytest.fixture(scope="module")
def proved(
    locked_moto: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Services, Checkpoint, Checkpoint, DataDir]:
    """Two checkpoints 610 events apart, built once: every test here only reads them (or copies of proofs)."""
    services, data_dir = module_store(tmp_path_factory, locked_moto, "proved")
    first, second = checkpoints(services, [10, 600])  # past two tiles of chain-000 between them
    return services, first, second, data_dir


@pytest.fixture
def two(proved: tuple[Services, Checkpoint, Checkpoint, DataDir]) -> tuple[Services, Checkpoint, Checkpoint]:
    return proved[:3]


@pytest.fixture
def data_dir(proved: tuple[Services, Checkpoint, Checkpoint, DataDir]) -> DataDir:
    """The CLI reaches the module's store through its data dir."""
    return proved[3]


def test_the_cli_writes_a_small_proof_that_checks_offline(
    two: tuple[Services, Checkpoint, Checkpoint], data_dir: DataDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, first, second = two
    out = tmp_path / "c.json"
    args = ["audit", "consistency", "--from", first.checkpoint_id, "--out", str(out), "--data-dir", str(data_dir.path)]
    assert main(args) == 0
    assert f"{second.checkpoint_id} extends {first.checkpoint_id}" in capsys.readouterr().out  # --to: the latest
    proof = check_consistency(out.read_bytes())
    assert [c.chain_id for c in proof.chains] == [h.chain_id for h in first.heads]
    assert all(len(c.path) <= 2 * (c.to_seq.bit_length() + 1) for c in proof.chains)  # O(log n), not the events
    assert main(["audit", "check-consistency", str(out)]) == 0
    assert "consistency proof OK" in capsys.readouterr().out


def tampered(proof: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    parsed = json.loads(proof)
    change(parsed)
    return canonical(parsed)


def rehash(checkpoint: dict[str, Any]) -> None:
    """Make a forged checkpoint self-consistent again (its root and hash recomputed)."""
    model = Checkpoint.model_validate({**checkpoint, "hash": "0" * 64})
    fixed = build_checkpoint(model.heads, None, T0)
    checkpoint.update({"root": fixed.root})
    rehash_only(checkpoint)


def rehash_only(checkpoint: dict[str, Any]) -> None:
    """Give a checkpoint the hash of its fields as they are now, a false root included."""
    checkpoint["hash"] = Checkpoint.model_validate({**checkpoint, "hash": "0" * 64}).recomputed_hash()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p["chains"][0]["path"].__setitem__(0, "0" * 64), "does not lead"),  # a node changed
        (lambda p: p["chains"].pop(), "one entry per chain"),  # a chain left out
        (lambda p: (p["to"]["heads"].pop(0), rehash(p["to"])), "disappeared"),  # a chain gone from the later
        (lambda p: p["from"]["heads"][0].update(tree_root="1" * 64) or rehash(p["from"]), "does not lead"),
        (lambda p: p["to"].update(root="2" * 64), "does not match its hash or root"),  # a forged checkpoint
        # ...forged with its hash made again over the false root: only the root's own check refuses it
        (lambda p: p["to"].update(root="2" * 64) or rehash_only(p["to"]), "does not match its hash or root"),
        (lambda p: p.update({"from": p["to"], "to": p["from"]}), "sizes|cannot be extended"),  # swapped
    ],
)
def test_a_proof_changed_in_any_way_is_refused(
    two: tuple[Services, Checkpoint, Checkpoint], change: Callable[[dict[str, Any]], None], message: str
) -> None:
    services, first, _ = two
    raw = prove_consistency(services, first.checkpoint_id, None).to_bytes()
    check_consistency(raw)
    with pytest.raises(InvalidConsistency, match=message):
        check_consistency(tampered(raw, change))
    with pytest.raises(InvalidConsistency, match="canonical"):
        check_consistency(json.dumps(json.loads(raw), indent=1).encode())


def test_a_later_checkpoint_over_rewritten_history_has_no_proof_that_checks(
    two: tuple[Services, Checkpoint, Checkpoint],
) -> None:
    services, first, second = two
    # The operator rewrites chain-000's first event and re-signs a "later" checkpoint over the new history:
    events = list(services.ledger.read_chain("chain-000"))
    hashes = [leaf_hash(bytes.fromhex(e.hash)) for e in events]
    hashes[0] = leaf_hash(b"\x07" * 32)
    forged_tiles = MemoryTiles()
    ChainTree(forged_tiles, 0).append(hashes)
    forged_heads = [
        h.model_copy(update={"tree_root": ChainTree(forged_tiles, h.seq).root().hex()})
        if h.chain_id == "chain-000"
        else h
        for h in second.heads
    ]
    forged = build_checkpoint(forged_heads, first, T0 + timedelta(hours=5))
    # The forger proves from its own tiles for chain-000 and the real ones for the rest.
    proof = build_consistency(
        first,
        forged,
        lambda chain_id, size: (
            ChainTree(forged_tiles, size) if chain_id == "chain-000" else _real(services, chain_id, size)
        ),
    )
    with pytest.raises(InvalidConsistency, match="chain-000"):
        check_consistency(proof.to_bytes())


def _real(services: Services, chain_id: str, size: int) -> ChainTree:
    from flowledger.ledger.chain_trees import chain_tree

    return chain_tree(services.aws.dynamodb, services.aws.table_name("ledger_tiles"), chain_id, size)


def test_unknown_or_backwards_checkpoints_are_clear_errors(
    two: tuple[Services, Checkpoint, Checkpoint], data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    _, first, second = two
    base = ["audit", "consistency", "--data-dir", str(data_dir.path)]
    assert main([*base, "--from", "20990101T000000000000Z"]) != 0
    assert "no checkpoint 20990101T000000000000Z" in capsys.readouterr().err
    assert main([*base, "--from", second.checkpoint_id, "--to", first.checkpoint_id]) != 0
    assert "give the earlier one as --from" in capsys.readouterr().err
