"""The witness cosigns a log's checkpoint only when the log signed it and it extends the last one cosigned;
anything else is refused with the protocol's status and leaves the witness's state as it was."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from flowledger.ledger.checkpoints import Checkpoint
from flowledger.ledger.events import canonical
from flowledger.ledger.signed_note import parse_note, verify
from flowledger.ledger.tiles import ChainTree
from flowledger.ledger.witnessing import ADD_CHECKPOINT, CHECKPOINT_ID_HEADER, MAX_REQUEST_BYTES, SIZE_CONTENT_TYPE
from flowledger.witness.keys import FileWitnessKey
from flowledger.witness.service import Answer, Witness, answer
from flowledger.witness.state import FileState
from tests.memory_tiles import MemoryTiles
from tests.witness_log import MemoryLog

NOW = 1_796_000_000


@pytest.fixture
def log() -> MemoryLog:
    return MemoryLog()


@pytest.fixture
def state(tmp_path: Path) -> FileState:
    return FileState(tmp_path / "state")


@pytest.fixture
def witness(log: MemoryLog, state: FileState) -> Witness:
    key = FileWitnessKey("witness.example", Ed25519PrivateKey.generate())
    return Witness(key, [log.key], state, lambda: NOW)


def post(witness: Witness, body: bytes) -> Answer:
    return answer(witness, "POST", ADD_CHECKPOINT, body)


def cosigned(witness: Witness, note: str, reply: Answer) -> int | None:
    """The reply's cosignature verified over the note with the witness's verifier key: its timestamp."""
    assert reply.status == 200, reply
    return verify(parse_note(parse_note(note).text + "\n" + reply.body), witness.key.verifier)


def test_the_first_checkpoint_is_cosigned_from_old_size_0(log: MemoryLog, witness: Witness, state: FileState) -> None:
    first = log.grow(chain_000=3, chain_001=2)
    reply = post(witness, log.request(first, None))
    assert cosigned(witness, log.note(first), reply) == NOW
    assert reply.body.startswith("\u2014 witness.example ") and reply.body.count("\n") == 1
    assert state.read(log.key.name) == first


def test_a_consistent_next_checkpoint_is_cosigned_and_held(log: MemoryLog, witness: Witness, state: FileState) -> None:
    first = log.grow(chain_000=3, chain_001=2)
    post(witness, log.request(first, None))
    second = log.grow(chain_000=300, chain_001=1)  # past a tile of chain-000
    reply = post(witness, log.request(second, first))
    assert cosigned(witness, log.note(second), reply) == NOW
    assert state.read(log.key.name) == second
    # The same checkpoint again is cosigned again, without a proof and without moving the state.
    again = post(witness, log.request(second, second, consistency=None))
    assert cosigned(witness, log.note(second), again) == NOW and state.read(log.key.name) == second


def test_a_note_signed_by_another_key_is_403(log: MemoryLog, witness: Witness, state: FileState) -> None:
    first = log.grow(chain_000=1)
    reply = post(witness, log.request(first, None, note=log.note(first, signer=Ed25519PrivateKey.generate())))
    assert reply.status == 403 and "does not verify" in reply.body
    assert state.read(log.key.name) is None


def test_a_log_the_witness_was_not_given_is_404(witness: Witness) -> None:
    other = MemoryLog("flowledger/other/audit")
    reply = post(witness, other.request(other.grow(chain_000=1), None))
    assert reply.status == 404 and "flowledger/other/audit" in reply.body


def test_a_stale_old_size_is_409_naming_the_held_size_and_checkpoint(log: MemoryLog, witness: Witness) -> None:
    first = log.grow(chain_000=3, chain_001=2)
    post(witness, log.request(first, None))
    second = log.grow(chain_000=1)
    reply = post(witness, log.request(second, None))  # the submitter thinks the witness holds nothing
    assert (reply.status, reply.body, reply.content_type) == (409, "5\n", SIZE_CONTENT_TYPE)
    assert reply.headers == {CHECKPOINT_ID_HEADER: first.checkpoint_id}
    assert post(witness, log.request(second, first)).status == 200  # rebuilt from the one it named


def went_back(log: MemoryLog, held: Checkpoint) -> tuple[Checkpoint, dict[str, Any]]:
    """chain-000 back to seq 2, re-signed by the log, with a proof claiming it extends the held checkpoint."""
    log.sizes["chain-000"] = 2
    rewound = log.checkpoint_of(log.sizes, log.tiles)
    chains = [
        {"chain_id": h.chain_id, "from_seq": h.seq, "to_seq": rewound.head_of(h.chain_id).seq, "path": []}  # type: ignore[union-attr]
        for h in held.heads
    ]
    proof = {
        "format": "flowledger-consistency-proof/1",
        "from": held.model_dump(exclude_none=True),
        "to": rewound.model_dump(exclude_none=True),
        "chains": chains,
    }
    return rewound, proof


def rewritten(log: MemoryLog, held: Checkpoint) -> tuple[Checkpoint, dict[str, Any]]:
    """chain-000's history replaced (same length and more), re-signed by the log, the proof built over the forgery."""
    forged = {chain: MemoryTiles() for chain in log.tiles}
    for chain, size in log.sizes.items():
        ChainTree(forged[chain], 0).append([bytes([7]) * 32] * (size + 4))
    log.tiles = forged
    log.sizes = {chain: size + 4 for chain, size in log.sizes.items()}
    later = log.checkpoint_of(log.sizes, forged)
    return later, log.proof(held, later)


@pytest.mark.parametrize("rewind", [went_back, rewritten])
def test_a_rewound_history_signed_by_the_log_is_422_and_the_state_stays(
    log: MemoryLog, witness: Witness, state: FileState, rewind: Any
) -> None:
    held = log.grow(chain_000=5, chain_001=3)
    post(witness, log.request(held, None))
    later, proof = rewind(log, held)
    reply = post(witness, log.request(later, held, consistency=proof))
    assert reply.status == 422 and "consistency proof does not check" in reply.body, reply
    assert state.read(log.key.name) == held


def test_a_proof_from_another_checkpoint_is_422(log: MemoryLog, witness: Witness, state: FileState) -> None:
    first = log.grow(chain_000=2)
    second = log.grow(chain_000=2)
    post(witness, log.request(first, None))
    post(witness, log.request(second, first))
    third = log.grow(chain_000=2)
    reply = post(witness, log.request(third, second, consistency=log.proof(first, third)))
    assert reply.status == 422 and f"not from {second.checkpoint_id}" in reply.body
    assert state.read(log.key.name) == second


def test_concurrent_submissions_advance_the_state_exactly_once(
    log: MemoryLog, witness: Witness, state: FileState
) -> None:
    held = log.grow(chain_000=4, chain_001=4)
    post(witness, log.request(held, None))
    # Sixteen different checkpoints, each extending the held one: only one can follow it.
    ChainTree(log.tiles["chain-001"], 4).append([bytes([1]) * 32] * 16)
    bodies = []
    for n in range(16):
        log.last = held
        log.sizes = {"chain-000": 4, "chain-001": 4 + n + 1}
        bodies.append(log.request(log.checkpoint_of(log.sizes, log.tiles), held))
    replies: list[tuple[bytes, Answer]] = []
    barrier = threading.Barrier(len(bodies))

    def submit(body: bytes) -> None:
        barrier.wait()
        replies.append((body, post(witness, body)))

    threads = [threading.Thread(target=submit, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(reply.status for _, reply in replies) == [200] + [409] * 15
    winner = next(body for body, reply in replies if reply.status == 200)
    assert state.read(log.key.name) == Checkpoint.model_validate(json.loads(winner)["checkpoint"])


def malformed(log: MemoryLog, change: Any) -> bytes:
    first = log.grow(chain_000=2)
    parsed = json.loads(log.request(first, None))
    change(parsed, first)
    return canonical(parsed)


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (lambda log: b"not json", 400, "not an add-checkpoint request"),
        (
            lambda log: json.dumps(json.loads(log.request(log.grow(chain_000=1), None)), indent=1).encode(),
            400,
            "canonical",
        ),
        (lambda log: malformed(log, lambda p, c: p.update(old_size=-1)), 400, "add-checkpoint"),
        (lambda log: malformed(log, lambda p, c: p.update(note="no note")), 400, "not a signed note"),
        (lambda log: malformed(log, lambda p, c: p["checkpoint"].update(root="0" * 64)), 400, "not the checkpoint's"),
        (lambda log: malformed(log, lambda p, c: p.update(consistency={"format": "x"})), 400, "no consistency proof"),
        (lambda log: b"{" + b" " * MAX_REQUEST_BYTES + b"}", 413, "over"),
        (lambda log: b"[" * 50_000, 400, "nested too deep"),  # under the size limit, past Python's recursion
        (  # a chain named twice (the first head genuine, the second another history): refused as malformed
            lambda log: malformed(log, lambda p, c: p["checkpoint"]["heads"].append(dict(p["checkpoint"]["heads"][0]))),
            400,
            "each chain once",
        ),
        (
            lambda log: log.request(log.grow(chain_000=1), None).replace(
                b'"consistency":null', b'"consistency":{"a":NaN}'
            ),
            400,
            "add-checkpoint",
        ),
        (
            lambda log: log.request(log.grow(chain_000=1), None).replace(b'"old_size":0', b'"old_size":' + b"9" * 30),
            400,
            "add-checkpoint",
        ),
    ],
)
def test_bad_bodies_are_refused_without_a_traceback(
    log: MemoryLog, witness: Witness, body: Any, status: int, says: str
) -> None:
    reply = post(witness, body(log))
    assert reply.status == status and says in reply.body, reply


def test_a_checkpoint_that_does_not_match_its_own_hash_is_422(log: MemoryLog, witness: Witness) -> None:
    first = log.grow(chain_000=2)
    forged = first.model_copy(update={"created_at": "2020-01-01T00:00:00.000000Z"})  # its hash no longer matches
    reply = post(witness, log.request(forged, None))
    assert reply.status == 422 and "does not match its hash" in reply.body


def test_only_post_add_checkpoint_is_answered(witness: Witness) -> None:
    assert answer(witness, "GET", ADD_CHECKPOINT, b"").status == 405
    assert answer(witness, "POST", "/other", b"{}").status == 404


def test_an_answer_that_moves_the_notes_text_is_not_kept(log: MemoryLog, witness: Witness) -> None:
    """A blank line in a witness's answer would make its cosignature cover other text than the note's."""
    import struct

    from flowledger.ledger.signed_note import Signature, cosigned_message
    from flowledger.ledger.witnessing import WitnessFailed, _verified_line

    note = log.note(log.grow(chain_000=2))
    junk = "\u2014 junk AAAAAAAA\n"
    moved = parse_note(note).text + "\n" + junk  # what the note's text would be read as with the junk inside
    signed = witness.key.sign(cosigned_message(moved, NOW))
    line = Signature(witness.key.verifier.name, witness.key.verifier.key_id, struct.pack(">Q", NOW) + signed).line()
    with pytest.raises(WitnessFailed, match="not one signature line"):
        _verified_line((junk + "\n" + line).encode(), note, witness.key.verifier)
    honest = witness.key.sign(cosigned_message(parse_note(note).text, NOW))
    good = Signature(witness.key.verifier.name, witness.key.verifier.key_id, struct.pack(">Q", NOW) + honest).line()
    assert _verified_line(good.encode(), note, witness.key.verifier) == good
