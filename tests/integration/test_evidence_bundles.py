"""Evidence bundles: `flowledger audit bundle` writes one subject's events with their proofs and signed
checkpoints, and the standalone `tools/verify_bundle.py` accepts it, and refuses every tampered copy:
a changed event, a dropped one, a forged checkpoint, another signer, a missing cosignature, rewound history."""

from __future__ import annotations

import ast
import json
import struct
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from flowledger.cli import main
from flowledger.errors import NotFound
from flowledger.ledger.audit import checkpoints_of, export_bundle, take_checkpoint
from flowledger.ledger.checkpoint_notes import checkpoint_text
from flowledger.ledger.checkpoints import ChainHead, Checkpoint, build_checkpoint
from flowledger.ledger.events import AuditEntry, canonical
from flowledger.ledger.signed_note import COSIGNATURE_V1, ED25519, Note, Signature, VerifierKey, cosigned_message
from flowledger.local.datadir import DataDir
from flowledger.services import Services
from tests.bundle_verifier import TOOL, verifier
from tests.integration.test_audit_cli import module_store, store  # noqa: F401  (the fixture: a store behind a data dir)

T0 = datetime(2027, 1, 4, 9, 0, tzinfo=UTC)  # after the store fixture's own checkpoint, taken now
STEPS = 6


class Witness:
    """A witness's key at the boundary: it cosigns note texts as C2SP tlog-cosignature v1."""

    def __init__(self, name: str) -> None:
        self._key = Ed25519PrivateKey.generate()
        public = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key = VerifierKey(name, COSIGNATURE_V1, public)

    def cosign(self, note: str) -> str:
        text, _, _ = note.partition("\n\n")
        text += "\n"
        moment = 1_800_000_000
        signature = struct.pack(">Q", moment) + self._key.sign(cosigned_message(text, moment))
        return note + Signature(self.key.name, self.key.key_id, signature).line()


def write_flow(services: Services, flow: str, steps: int, closed: bool = True) -> None:
    """A flow's events as the reasoning service writes them, on two chains, between other subjects' events."""
    ledger = services.ledger
    for n, action in enumerate(["reasoning.flow.started"] + ["reasoning.step.created"] * steps):
        ledger._writer.chain = ("chain-000", "chain-001")[n % 2]
        ledger.append(AuditEntry(action=action, actor="user:a", subject=f"flow:{flow}"))
        ledger.append(AuditEntry(action="reasoning.flow.started", actor="user:b", subject=f"flow:other{n}"))
    if closed:
        closing = AuditEntry(
            action="reasoning.flow.completed", actor="user:a", subject=f"flow:{flow}", payload={"steps": steps}
        )
        ledger.append(closing)


def checkpoint_at(services: Services, hours: int) -> str:
    services.clock = lambda: T0 + timedelta(hours=hours)
    return str(take_checkpoint(services.ledger, checkpoints_of(services), services)["checkpoint_id"])


@pytest.fixture(scope="module")
def bundled(locked_moto: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Services, bytes]:
    """A closed flow's bundle: its checkpoint, then more writes and a later checkpoint (the latest). Built once:
    the tests that take it only read the store and tamper with copies of the bundle."""
    services, _ = module_store(tmp_path_factory, locked_moto, "bundled")
    write_flow(services, "fl_audited", STEPS)
    checkpoint_at(services, 0)
    write_flow(services, "fl_later", 40)
    checkpoint_at(services, 1)
    return services, export_bundle(services, "flow:fl_audited").bundle.to_bytes()


def log_key(services: Services) -> str:
    return services.checkpoint_signer.verifier.vkey()


def check(raw: bytes, services: Services, witnesses: list[VerifierKey] = (), quorum: int | None = None) -> list[str]:
    keys = [verifier.Key(w.vkey()) for w in witnesses]
    return verifier.verify(raw, verifier.Key(log_key(services)), keys, len(keys) if quorum is None else quorum)


def edited(raw: bytes, change: Callable[[dict[str, Any]], object]) -> bytes:
    bundle = json.loads(raw)
    change(bundle)
    return canonical(bundle)


def test_the_cli_writes_a_bundle_the_standalone_verifier_accepts(
    store: tuple[Services, Any],  # noqa: F811
    data_dir: DataDir,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    services, _ = store
    write_flow(services, "fl_cli", STEPS)
    checkpoint_at(services, 0)
    write_flow(services, "fl_cli_more", 3)
    services.ledger.append(AuditEntry(action="admin.reasoning.flow.read", actor="user:c", subject="flow:fl_cli"))
    checkpoint_at(services, 1)
    services.ledger.append(AuditEntry(action="admin.reasoning.flow.read", actor="user:d", subject="flow:fl_cli"))
    out = tmp_path / "b.json"
    args = ["audit", "bundle", "--subject", "flow:fl_cli", "--out", str(out), "--data-dir", str(data_dir.path)]
    assert main(args) == 0
    said = capsys.readouterr().out
    # Every event but the one after the latest checkpoint; the read taken between the checkpoints moves
    # the anchor to the later one, so there is no consistency proof to give.
    assert f"wrote {out}: {STEPS + 3} events of flow:fl_cli" in said and "1 newer event left out" in said
    ran = subprocess.run(
        [sys.executable, str(TOOL), str(out), "--log-key", log_key(services), "--time"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"bundle OK: flow:fl_cli: a completed flow: all {STEPS} of its steps" in ran.stdout
    assert "it is the latest checkpoint" in ran.stdout
    out.write_bytes(edited(out.read_bytes(), lambda b: b["events"][1]["payload"].update(steps=9)))
    ran = subprocess.run([sys.executable, str(TOOL), str(out), "--log-key", log_key(services)], capture_output=True)
    assert ran.returncode == 1 and b"bundle INVALID: event chain-" in ran.stdout


def test_a_bundle_carries_a_consistency_proof_to_the_latest_checkpoint(bundled: tuple[Services, bytes]) -> None:
    services, raw = bundled
    bundle = json.loads(raw)
    assert bundle["checkpoint"]["checkpoint_id"] == (T0.strftime("%Y%m%dT%H%M%S") + "000000Z")  # its first
    assert bundle["consistency"]["to"]["checkpoint_id"] > bundle["checkpoint"]["checkpoint_id"]
    assert [e["action"] for e in bundle["events"]].count("reasoning.step.created") == STEPS
    lines = check(raw, services)
    assert lines[0] == f"bundle OK: flow:fl_audited: a completed flow: all {STEPS} of its steps"
    assert "extends it" in lines[2]


def test_the_verifier_needs_nothing_but_the_standard_library_and_cryptography() -> None:
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(ast.parse(TOOL.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported - sys.stdlib_module_names == {"cryptography"}


def _rewind(bundle: dict[str, Any], services: Services) -> None:
    """The operator drops chain-001's last event and re-signs a 'latest' checkpoint over the shorter chain."""
    later = Checkpoint.model_validate(bundle["consistency"]["to"])
    earlier = Checkpoint.model_validate(bundle["checkpoint"])
    back = earlier.head_of("chain-001")
    assert back is not None
    shorter = [back.model_copy(update={"seq": back.seq - 1}) if h.chain_id == "chain-001" else h for h in later.heads]
    forged = build_checkpoint(shorter, earlier, T0 + timedelta(hours=3))
    bundle["consistency"]["to"] = forged.model_dump(exclude_none=True)
    for chain in bundle["consistency"]["chains"]:
        chain["to_seq"] = forged.head_of(chain["chain_id"]).seq  # type: ignore[union-attr]
    bundle["latest_note"] = services.checkpoint_signer.sign(forged).to_text()  # the real key signs it


def _resign_with(key: Ed25519PrivateKey, name: str) -> Callable[[dict[str, Any]], None]:
    def change(bundle: dict[str, Any]) -> None:
        public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        other = VerifierKey(name, ED25519, public)
        text = checkpoint_text(name, Checkpoint.model_validate(bundle["checkpoint"]))
        bundle["checkpoint_note"] = Note(text, (Signature(name, other.key_id, key.sign(text.encode())),)).to_text()

    return change


def _forge_checkpoint(bundle: dict[str, Any]) -> None:
    """A checkpoint with a changed head, made self-consistent again: its signed note no longer names it."""
    checkpoint = Checkpoint.model_validate(bundle["checkpoint"])
    heads = [h.model_copy(update={"hash": "e" * 64}) if h.chain_id == "chain-000" else h for h in checkpoint.heads]
    forged = build_checkpoint(heads, None, T0)
    bundle["checkpoint"] = forged.model_dump(exclude_none=True)
    bundle["consistency"]["from"] = bundle["checkpoint"]


def _forge_note(bundle: dict[str, Any], services: Services) -> None:
    """A forged checkpoint, and its note's text rewritten to name it under the real signature line."""
    _forge_checkpoint(bundle)
    signatures = bundle["checkpoint_note"].split("\n\n", 1)[1]
    text = checkpoint_text(services.checkpoint_signer.origin, Checkpoint.model_validate(bundle["checkpoint"]))
    bundle["checkpoint_note"] = text + "\n" + signatures


def _chain_twice(bundle: dict[str, Any], services: Services) -> None:
    """The operator lists chain-001 twice (a second head with another tree) and signs that with the real key."""
    from flowledger.ledger.events import sha256_hex
    from flowledger.ledger.merkle import merkle_root

    fields = {k: v for k, v in bundle["checkpoint"].items() if k != "hash"}
    second = next(h for h in fields["heads"] if h["chain_id"] == "chain-001")
    fields["heads"] = sorted([*fields["heads"], {**second, "tree_root": "7" * 64}], key=lambda h: h["chain_id"])
    fields["root"] = merkle_root([canonical(head) for head in fields["heads"]]).hex()
    heads = [ChainHead.model_validate(head) for head in fields["heads"]]
    # model_construct: past the model's own check, as an operator's own code would be.
    forged = Checkpoint.model_construct(**{**fields, "heads": heads}, hash=sha256_hex(canonical(fields)))
    bundle["checkpoint"] = {**fields, "hash": forged.hash}
    bundle["consistency"]["from"] = bundle["checkpoint"]
    bundle["checkpoint_note"] = services.checkpoint_signer.sign(forged).to_text()


def _seq_true(bundle: dict[str, Any]) -> None:
    """An event placed at seq ``true`` (True - 1 == 0 in Python: leaf 0), hashed as it is."""
    from flowledger.ledger.events import event_hash

    event = bundle["events"][1]
    event.update(seq=True, event_id=f"{event['chain_id']}.True")
    event["hash"] = event_hash(event)


def _drop_step(bundle: dict[str, Any], services: Services) -> None:
    """A step event left out, the inclusion proof remade without it (an operator can: it has the tiles)."""
    from flowledger.ledger.audit import _trees
    from flowledger.ledger.bundle import build_bundle
    from flowledger.ledger.events import AuditEvent

    events = [AuditEvent.model_validate(e) for e in bundle["events"]]
    kept = [e for e in events if e != next(e for e in events if e.action == "reasoning.step.created")]
    remade = build_bundle(
        bundle["subject"],
        kept,
        Checkpoint.model_validate(bundle["checkpoint"]),
        bundle["checkpoint_note"],
        _trees(services),
    )
    again = json.loads(remade.to_bytes())
    bundle["events"], bundle["chains"] = again["events"], again["chains"]


TAMPERS: dict[str, tuple[Callable[[dict[str, Any], Services], object], str]] = {
    "changed event": (lambda b, s: b["events"][2]["refs"].update(step_id="other"), "does not match its hash"),
    "rehashed event": (lambda b, s: _rehash_event(b), "do not lead to the checkpoint's tree root"),
    "dropped event": (lambda b, s: b["events"].pop(3), "too few nodes|do not lead"),
    "dropped step, proof remade": (_drop_step, f"closed with {STEPS} steps, the bundle has {STEPS - 1}"),
    "forged checkpoint": (lambda b, s: _forge_checkpoint(b), "does not name this checkpoint"),
    "forged checkpoint and note": (_forge_note, "signature by .* does not verify"),
    "changed root": (lambda b, s: b["checkpoint"].update(root="1" * 64), "does not match its hash"),
    "other key": (
        lambda b, s: _resign_with(Ed25519PrivateKey.generate(), s.checkpoint_signer.origin)(b),
        "no signature by the ledger's key",
    ),
    "rewound history": (_rewind, "does not extend the bundle's"),
    "a chain named twice, signed": (_chain_twice, "must name each chain once"),
    "seq true": (lambda b, s: _seq_true(b), "not a whole number"),
    "nested too deep": (lambda b, s: None, "nested too deep"),
    "not canonical": (lambda b, s: None, "canonical"),
}


def _rehash_event(bundle: dict[str, Any]) -> None:
    """An event changed and its hash recomputed: it is a different leaf, so its chain's root changes."""
    from flowledger.ledger.events import event_hash

    event = bundle["events"][2]
    event["actor"] = "user:mallory"
    event["hash"] = event_hash(event)


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_a_tampered_bundle_is_refused(bundled: tuple[Services, bytes], tamper: str) -> None:
    services, raw = bundled
    change, message = TAMPERS[tamper]
    check(raw, services)  # the untouched bundle passes
    forged = edited(raw, lambda b: change(b, services))
    if tamper == "not canonical":
        forged = json.dumps(json.loads(raw), indent=1).encode()
    if tamper == "nested too deep":  # past Python's recursion limit: an answer, never a traceback
        forged = b'{"format":' + b"[" * 5_000 + b"]" * 5_000 + b"}"
    with pytest.raises(verifier.Invalid, match=message):
        check(forged, services)


def test_cosignatures_count_toward_the_quorum_and_a_missing_one_fails(bundled: tuple[Services, bytes]) -> None:
    services, raw = bundled
    first, second = Witness("witness.example/one"), Witness("witness.example/two")

    def cosigned_by(*witnesses: Witness) -> Callable[[dict[str, Any]], None]:
        def change(bundle: dict[str, Any]) -> None:
            for field in ("checkpoint_note", "latest_note"):
                for witness in witnesses:
                    bundle[field] = witness.cosign(bundle[field])

        return change

    both = edited(raw, cosigned_by(first, second))
    lines = check(both, services, [first.key, second.key])
    assert "cosigned by witness.example/one, witness.example/two" in lines[1]
    only_one = edited(raw, cosigned_by(first))
    with pytest.raises(verifier.Invalid, match=r"1 of the 2 cosignatures needed; none by witness\.example/two"):
        check(only_one, services, [first.key, second.key])
    assert check(only_one, services, [first.key, second.key], quorum=1)
    with pytest.raises(verifier.Invalid, match="0 of the 1 cosignatures"):  # the raw bundle: no witness signed
        check(raw, services, [first.key])
    # A cosignature over other text (copied from another checkpoint's note) does not verify.
    swapped = json.loads(both)
    latest_text, checkpoint_signatures = (
        swapped["latest_note"].split("\n\n")[0],
        swapped["checkpoint_note"].split("\n\n")[1],
    )
    swapped["latest_note"] = latest_text + "\n\n" + checkpoint_signatures
    with pytest.raises(verifier.Invalid):
        check(canonical(swapped), services, [first.key, second.key])


def test_the_verifier_refuses_bad_keys_and_missing_files_without_a_traceback(
    bundled: tuple[Services, bytes], tmp_path: Path
) -> None:
    services, raw = bundled
    out = tmp_path / "b.json"
    out.write_bytes(raw)
    key = Witness("w").key
    witness = key.vkey()
    renamed = VerifierKey("v", key.kind, key.public_key).vkey()  # one key under two names counts once
    cases = [
        ([str(out), "--log-key", "nonsense"], 2, "not a verifier key"),
        ([str(out), "--log-key", witness], 2, "--log-key takes a type 0x01 key"),
        ([str(out), "--log-key", log_key(services), "--quorum", "1"], 2, "--quorum must be 0 to 0"),
        ([str(out), "--log-key", log_key(services), "--witness-key", witness, "--witness-key", witness], 2, "once"),
        ([str(out), "--log-key", log_key(services), "--witness-key", witness, "--witness-key", renamed], 2, "once"),
        ([str(tmp_path / "none.json"), "--log-key", log_key(services)], 2, "No such file"),
    ]
    for args, code, message in cases:
        ran = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, check=False)
        assert ran.returncode == code and message in ran.stdout + ran.stderr, (args, ran.stdout, ran.stderr)
        assert "Traceback" not in ran.stderr


def test_a_subject_with_no_checkpointed_event_has_no_bundle(store: tuple[Services, Any]) -> None:  # noqa: F811
    services, _ = store
    with pytest.raises(NotFound, match="no audit events for flow:nothing"):
        export_bundle(services, "flow:nothing")
    write_flow(services, "fl_fresh", 2)
    with pytest.raises(NotFound, match="no checkpoint covers flow:fl_fresh's events yet"):
        export_bundle(services, "flow:fl_fresh")


def test_a_subject_with_more_events_than_a_bundle_holds_is_refused_whole(
    store: tuple[Services, Any],  # noqa: F811
    data_dir: DataDir,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    services, _ = store
    write_flow(services, "fl_long", STEPS)
    checkpoint_at(services, 0)
    monkeypatch.setattr("flowledger.ledger.audit.MAX_EVENTS", STEPS)  # the flow has STEPS + 2 events
    out = tmp_path / "long.json"
    args = ["audit", "bundle", "--subject", "flow:fl_long", "--out", str(out), "--data-dir", str(data_dir.path)]
    assert main(args) != 0
    assert f"flow:fl_long has more than {STEPS} audit events" in capsys.readouterr().err
    assert not out.exists()  # refused whole: never a bundle cut short
    assert main([*args[:3], "not a subject", *args[4:]]) != 0
    assert "not a subject: 'not a subject'" in capsys.readouterr().err
