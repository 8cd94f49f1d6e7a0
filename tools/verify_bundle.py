#!/usr/bin/env python3
"""Check a Flowledger evidence bundle without trusting the operator that made it.

    python verify_bundle.py BUNDLE.json --log-key VKEY [--witness-key VKEY ...] [--quorum N]

One file on purpose: it needs the Python standard library (3.10+) and ``cryptography``, nothing of
Flowledger's, so an auditor can read all of it. It checks, and exits 1 naming the first check that fails:

1. the file is RFC 8785 canonical JSON in the format ``flowledger-evidence-bundle/1``;
2. every event's hash is the SHA-256 of its own canonical fields, it names the bundle's subject, and
   events next to each other in a chain link by ``prev_hash``;
3. per chain, the events (leaves ``seq - 1`` of the chain's RFC 6962 tree) and the bundle's nodes give
   the tree root the checkpoint recorded for that chain;
4. the checkpoint matches its own hash and Merkle root (RFC 6962 over its chain heads);
5. the checkpoint's note (C2SP signed-note / tlog-checkpoint) says this origin, size, root and checkpoint,
   is signed by ``--log-key`` (Ed25519), and carries a valid cosignature (C2SP tlog-cosignature v1) from
   at least ``--quorum`` of the ``--witness-key``s (default: all of them);
6. for a flow, its opening event is there, and when it is closed the number of step events is the one
   its closing event recorded (a dropped step fails here even if the proofs were remade without it);
7. the consistency proof shows the latest checkpoint extends the bundle's (per chain, RFC 9162 section
   2.1.4.2), and the latest checkpoint's note is signed and cosigned as in 5.

Keys are C2SP verifier keys, ``name+keyid+base64(type || public key)``: type 0x01 for the ledger's key
(``flowledger audit key``), 0x04 for a witness's.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import itertools
import json
import struct
import sys
import time
from bisect import bisect_left
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

FORMAT = "flowledger-evidence-bundle/1"
CONSISTENCY_FORMAT = "flowledger-consistency-proof/1"
NOTE_KEY, COSIGNATURE_KEY = 0x01, 0x04
DASH = "\u2014 "
EVENT_FIELDS = {
    *("action", "actor", "subject", "refs", "payload"),
    *("event_id", "chain_id", "seq", "at", "prev_hash", "hash"),
}
HEAD_FIELDS = {"chain_id", "seq", "hash", "tree_root"}
CHECKPOINT_FIELDS = {"checkpoint_id", "created_at", "heads", "root", "prev_checkpoint_hash", "hash"}


class Invalid(Exception):
    """The bundle does not prove what it claims; the message says which check failed."""


# --- RFC 8785 canonical JSON, for the values these files hold (no fractions) -------------------------


def canonical(value: Any) -> bytes:
    return _jcs(value).encode("utf-8")


def _jcs(value: Any) -> str:
    if value is None or value is True or value is False:
        return json.dumps(value)
    if isinstance(value, int):
        if abs(value) > 2**53 - 1:
            raise Invalid("a number outside the range RFC 8785 writes exactly")
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(_jcs(item) for item in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=lambda key: key.encode("utf-16-be"))  # RFC 8785 sorts by UTF-16 code units
        return "{" + ",".join(json.dumps(key, ensure_ascii=False) + ":" + _jcs(value[key]) for key in keys) + "}"
    raise Invalid(f"a value RFC 8785 does not write: {type(value).__name__}")


def _no_fractions(text: str) -> float:
    raise Invalid(f"a number with a fraction or exponent ({text}): these files hold none")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise Invalid("an object names a key twice")
    return found


def whole(value: Any, what: str) -> int:
    """``value`` when it is an integer of at least 1 (never a boolean: True == 1 in Python)."""
    if type(value) is not int or value < 1:
        raise Invalid(f"{what} is not a whole number of at least 1")
    return value


def read_bundle(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"), parse_float=_no_fractions, object_pairs_hook=_no_duplicates)
        if not isinstance(value, dict):
            raise Invalid("a bundle is a JSON object")
        form = canonical(value)
    except (ValueError, UnicodeError) as exc:
        raise Invalid(f"not JSON: {exc}") from None
    except RecursionError:
        raise Invalid("not a bundle: JSON nested too deep") from None
    if raw not in (form, form + b"\n"):
        raise Invalid("the file is not in RFC 8785 canonical form")
    return value


# --- RFC 6962 / 9162 Merkle trees ---------------------------------------------------------------------


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def leaf_hash(data: bytes) -> bytes:
    return sha256(b"\x00" + data)


def node_hash(left: bytes, right: bytes) -> bytes:
    return sha256(b"\x01" + left + right)


def split(size: int) -> int:
    return 1 << ((size - 1).bit_length() - 1)


def merkle_root(leaves: list[bytes]) -> bytes:
    if not leaves:
        return sha256(b"")
    if len(leaves) == 1:
        return leaf_hash(leaves[0])
    k = split(len(leaves))
    return node_hash(merkle_root(leaves[:k]), merkle_root(leaves[k:]))


def root_from_leaves(size: int, leaves: dict[int, bytes], nodes: list[bytes]) -> bytes:
    """The root of a tree of ``size`` from some leaf hashes and the subtree roots covering the rest.

    The nodes come in the order RFC 6962's recursion meets the subtrees holding none of the leaves,
    left first; a subtree holding a leaf is always computed, never taken from the nodes.
    """
    wanted = sorted(leaves)
    given = iter(nodes)

    def walk(start: int, end: int) -> bytes:
        if bisect_left(wanted, start) == bisect_left(wanted, end):
            node = next(given, None)
            if node is None:
                raise Invalid("an inclusion proof has too few nodes")
            return node
        if end - start == 1:
            return leaves[start]
        k = split(end - start)
        return node_hash(walk(start, start + k), walk(start + k, end))

    if not wanted or wanted[0] < 0 or wanted[-1] >= size:
        raise Invalid(f"an event lies outside its chain's tree of {size}")
    root = walk(0, size)
    if next(given, None) is not None:
        raise Invalid("an inclusion proof has nodes no event needs")
    return root


def verify_consistency(m: int, n: int, first: bytes, second: bytes, proof: list[bytes]) -> bool:
    """RFC 9162 section 2.1.4.2: does ``proof`` show the tree (n, second) extends (m, first)?"""
    if not 0 < m <= n:
        return False
    if m == n:
        return not proof and first == second
    if not proof:
        return False
    if m & (m - 1) == 0:  # m is a power of two: the first tree is a node of the second
        proof = [first, *proof]
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = proof[0]
    for node in proof[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(node, fr), node_hash(node, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, node)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first and sr == second


# --- C2SP signed notes, checkpoints and cosignatures ----------------------------------------------------


class Key:
    def __init__(self, vkey: str) -> None:
        parts = vkey.split("+", 2)  # the name has no "+"; base64 may
        if len(parts) != 3 or not parts[0] or len(parts[1]) != 8:
            raise ValueError(f"not a verifier key (name+keyid+base64): {vkey!r}")
        self.name = parts[0]
        raw = base64.b64decode(parts[2], validate=True)
        if len(raw) != 33 or raw[0] not in (NOTE_KEY, COSIGNATURE_KEY):
            raise ValueError(f"{self.name}: only Ed25519 (0x01) and cosignature/v1 (0x04) keys are supported")
        self.kind, self.public_bytes = raw[0], raw[1:]
        self.public = Ed25519PublicKey.from_public_bytes(self.public_bytes)
        self.key_id = sha256(self.name.encode() + b"\n" + raw)[:4]
        if self.key_id.hex() != parts[1]:
            raise ValueError(f"{self.name}: the key id {parts[1]} is not the id of its name and key")


def parse_note(note: Any, what: str) -> tuple[str, list[tuple[str, bytes]]]:
    """The text of a signed note and its signature lines (name, base64-decoded blob)."""
    if not isinstance(note, str) or "\r" in note or not note.endswith("\n") or "\n\n" not in note:
        raise Invalid(f"{what} is not a signed note")
    cut = note.rfind("\n\n")
    text, signatures = note[: cut + 1], []
    for line in note[cut + 2 :].splitlines():
        name, _, blob = line[len(DASH) :].partition(" ")
        if not line.startswith(DASH) or not name:
            raise Invalid(f"{what} has a malformed signature line")
        try:
            signatures.append((name, base64.b64decode(blob, validate=True)))
        except ValueError:
            raise Invalid(f"{what} has a signature that is not base64") from None
    return text, signatures


def check_signed(note: Any, what: str, log: Key, witnesses: list[Key], quorum: int) -> tuple[str, list[str]]:
    """The note's text, once ``log`` signed it and ``quorum`` witnesses cosigned it; the witnesses that did."""
    text, signatures = parse_note(note, what)

    def blob_of(key: Key) -> bytes | None:
        return next((b[4:] for name, b in signatures if name == key.name and b[:4] == key.key_id), None)

    signature = blob_of(log)
    if signature is None:
        raise Invalid(f"{what} has no signature by the ledger's key {log.name}")
    try:
        log.public.verify(signature, text.encode())
    except InvalidSignature:
        raise Invalid(f"{what}'s signature by {log.name} does not verify") from None
    cosigned: list[str] = []
    counted: set[bytes] = set()  # one key counts once, whatever names it is given under
    for witness in witnesses:
        if witness.public_bytes in counted:
            continue
        blob = blob_of(witness)
        if blob is None or len(blob) != 8 + 64:
            continue
        (moment,) = struct.unpack(">Q", blob[:8])
        try:
            witness.public.verify(blob[8:], f"cosignature/v1\ntime {moment}\n{text}".encode())
        except InvalidSignature:
            raise Invalid(f"{what}'s cosignature by {witness.name} does not verify") from None
        cosigned.append(witness.name)
        counted.add(witness.public_bytes)
    if len(cosigned) < quorum:
        missing = [w.name for w in witnesses if w.name not in cosigned]
        raise Invalid(f"{what} has {len(cosigned)} of the {quorum} cosignatures needed; none by {', '.join(missing)}")
    return text, cosigned


def check_checkpoint(checkpoint: Any, what: str) -> None:
    """A checkpoint matches its own hash and its root over its chain heads."""
    if not isinstance(checkpoint, dict) or set(checkpoint) != CHECKPOINT_FIELDS or not checkpoint["heads"]:
        raise Invalid(f"{what} is not a checkpoint")
    for head in checkpoint["heads"]:
        if not isinstance(head, dict) or not {"chain_id", "seq", "hash"} <= set(head) <= HEAD_FIELDS:
            raise Invalid(f"{what} has a malformed chain head")
        whole(head["seq"], f"a head's seq in {what}")
    ids = [head["chain_id"] for head in checkpoint["heads"]]
    if ids != sorted(set(ids)):  # two heads of one chain: two readers could see two histories
        raise Invalid(f"{what} must name each chain once, in chain id order")
    unsealed = {key: value for key, value in checkpoint.items() if key != "hash"}
    if sha256(canonical(unsealed)).hex() != checkpoint["hash"]:
        raise Invalid(f"{what} does not match its hash")
    if merkle_root([canonical(head) for head in checkpoint["heads"]]).hex() != checkpoint["root"]:
        raise Invalid(f"{what} does not match its Merkle root")


def check_note_names(text: str, checkpoint: dict[str, Any], log: Key, what: str) -> None:
    """The note's four lines say the checkpoint's origin, size, root, id and hash."""
    size = sum(head["seq"] for head in checkpoint["heads"])
    root = base64.b64encode(bytes.fromhex(checkpoint["root"])).decode()
    expected = f"{log.name}\n{size}\n{root}\ncheckpoint {checkpoint['checkpoint_id']} {checkpoint['hash']}\n"
    if text != expected:
        raise Invalid(f"{what} does not name this checkpoint (origin, size, root, id and hash)")


# --- the bundle -------------------------------------------------------------------------------------------


def check_events(bundle: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each event against its hash and the subject; the events by chain, in seq order."""
    by_chain: dict[str, list[dict[str, Any]]] = {}
    seen = set()
    for event in bundle["events"]:
        if not isinstance(event, dict) or set(event) != EVENT_FIELDS:
            raise Invalid("an event does not have exactly an audit event's fields")
        name = event["event_id"]
        whole(event["seq"], f"event {name}'s seq")
        if sha256(canonical({k: v for k, v in event.items() if k != "hash"})).hex() != event["hash"]:
            raise Invalid(f"event {name} does not match its hash")
        if event["subject"] != bundle["subject"]:
            raise Invalid(f"event {name} is about {event['subject']}, not {bundle['subject']}")
        if name != f"{event['chain_id']}.{event['seq']}" or name in seen:
            raise Invalid(f"event {name} is named for another place, or twice")
        seen.add(name)
        by_chain.setdefault(event["chain_id"], []).append(event)
    for events in by_chain.values():
        events.sort(key=lambda event: event["seq"])
        for before, after in itertools.pairwise(events):
            if after["seq"] == before["seq"] + 1 and after["prev_hash"] != before["hash"]:
                raise Invalid(f"event {after['event_id']} does not link to {before['event_id']}")
    return by_chain


def check_inclusion(bundle: dict[str, Any], by_chain: dict[str, list[dict[str, Any]]]) -> None:
    heads = {head["chain_id"]: head for head in bundle["checkpoint"]["heads"]}
    chains = bundle["chains"]
    if [chain.get("chain_id") for chain in chains] != sorted(by_chain):
        raise Invalid("the bundle needs one inclusion proof per chain its events are on, in chain order")
    for chain in chains:
        chain_id, head = chain["chain_id"], heads.get(chain["chain_id"])
        if head is None or "tree_root" not in head or chain["size"] != head["seq"]:
            raise Invalid(f"the checkpoint has no tree of {chain_id} of size {chain['size']}")
        whole(chain["size"], f"{chain_id}'s tree size")
        leaves = {event["seq"] - 1: leaf_hash(bytes.fromhex(event["hash"])) for event in by_chain[chain_id]}
        if len(leaves) != len(by_chain[chain_id]):
            raise Invalid(f"two events on {chain_id} claim one place")
        root = root_from_leaves(chain["size"], leaves, [bytes.fromhex(node) for node in chain["nodes"]])
        if root.hex() != head["tree_root"]:
            raise Invalid(f"the events on {chain_id} and its proof do not lead to the checkpoint's tree root")


def check_flow(bundle: dict[str, Any]) -> str:
    """For a flow: its opening event is there and, once it is closed, every step its closing event counted."""
    if not bundle["subject"].startswith("flow:"):
        return f"{len(bundle['events'])} events (their completeness rests on the operator: only flows count theirs)"
    actions = [event["action"] for event in bundle["events"]]
    if actions.count("reasoning.flow.started") != 1:
        raise Invalid("the flow's opening event (reasoning.flow.started) is missing")
    steps = actions.count("reasoning.step.created")
    closing = [e for e in bundle["events"] if e["action"] in ("reasoning.flow.completed", "reasoning.flow.aborted")]
    if not closing:
        return f"an open flow: {steps} steps so far"
    recorded = closing[0]["payload"].get("steps")
    if recorded != steps:
        raise Invalid(f"the flow closed with {recorded} steps, the bundle has {steps} step events")
    return f"a {closing[0]['action'].rsplit('.', 1)[1]} flow: all {steps} of its steps"


def check_consistency(bundle: dict[str, Any], log: Key, witnesses: list[Key], quorum: int) -> str | None:
    """The latest checkpoint's id once the proof shows it extends the bundle's; None when it is the latest."""
    proof, note = bundle["consistency"], bundle["latest_note"]
    if proof is None:
        if note is not None:
            raise Invalid("a latest note without a consistency proof")
        return None
    if not isinstance(proof, dict) or set(proof) != {"format", "from", "to", "chains"}:
        raise Invalid("the consistency proof is malformed")
    earlier, later = proof["from"], proof["to"]
    if proof["format"] != CONSISTENCY_FORMAT or earlier != bundle["checkpoint"]:
        raise Invalid("the consistency proof does not start at the bundle's checkpoint")
    check_checkpoint(later, "the latest checkpoint")
    text, _ = check_signed(note, "the latest checkpoint's note", log, witnesses, quorum)
    check_note_names(text, later, log, "the latest checkpoint's note")
    if later["checkpoint_id"] <= earlier["checkpoint_id"]:
        raise Invalid("the latest checkpoint is not later than the bundle's")
    after = {head["chain_id"]: head for head in later["heads"]}
    if [chain.get("chain_id") for chain in proof["chains"]] != [head["chain_id"] for head in earlier["heads"]]:
        raise Invalid("the consistency proof needs one entry per chain of the bundle's checkpoint")
    for chain, before in zip(proof["chains"], earlier["heads"], strict=True):
        chain_id, now = chain["chain_id"], after.get(chain["chain_id"])
        if now is None:
            raise Invalid(f"{chain_id} disappeared from the latest checkpoint")
        sizes = (whole(chain["from_seq"], "a from_seq"), whole(chain["to_seq"], "a to_seq"))
        if sizes != (before["seq"], now["seq"]):
            raise Invalid(f"{chain_id}'s sizes in the consistency proof are not the checkpoints'")
        if "tree_root" not in before or "tree_root" not in now:
            raise Invalid(f"{chain_id} has no tree root in one of the checkpoints")
        if now["seq"] == before["seq"] and now["hash"] != before["hash"]:
            raise Invalid(f"{chain_id}'s head at seq {before['seq']} changed")
        nodes = [bytes.fromhex(node) for node in chain["path"]]
        first, second = bytes.fromhex(before["tree_root"]), bytes.fromhex(now["tree_root"])
        if not verify_consistency(before["seq"], now["seq"], first, second, nodes):
            raise Invalid(f"{chain_id} in the latest checkpoint does not extend the bundle's (history was rewritten)")
    return str(later["checkpoint_id"])


def verify(raw: bytes, log: Key, witnesses: list[Key], quorum: int) -> list[str]:
    """Every check of the module docstring; the lines of the report, or ``Invalid``."""
    bundle = read_bundle(raw)
    wanted = {"format", "subject", "events", "chains", "checkpoint", "checkpoint_note", "consistency", "latest_note"}
    if set(bundle) != wanted or bundle["format"] != FORMAT:
        raise Invalid(f"not a {FORMAT} bundle")
    if not bundle["events"]:
        raise Invalid("the bundle holds no event")
    try:
        checkpoint = bundle["checkpoint"]
        check_checkpoint(checkpoint, "the checkpoint")
        text, cosigned = check_signed(bundle["checkpoint_note"], "the checkpoint's note", log, witnesses, quorum)
        check_note_names(text, checkpoint, log, "the checkpoint's note")
        by_chain = check_events(bundle)
        check_inclusion(bundle, by_chain)
        completeness = check_flow(bundle)
        latest = check_consistency(bundle, log, witnesses, quorum)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise Invalid(f"a malformed part ({type(exc).__name__}: {exc})") from None
    except RecursionError:
        raise Invalid("a part nested too deep") from None
    size = sum(head["seq"] for head in checkpoint["heads"])
    witnessed = f"cosigned by {', '.join(cosigned)}" if cosigned else "no witness asked for"
    return [
        f"bundle OK: {bundle['subject']}: {completeness}",
        f"{len(bundle['events'])} events in checkpoint {checkpoint['checkpoint_id']} of {log.name} (size {size:,}),"
        f" signed by the ledger's key, {witnessed}",
        f"the latest checkpoint {latest} extends it" if latest else "it is the latest checkpoint",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Exit 0 valid, 1 invalid, 2 usage.")
    parser.add_argument("bundle", help="the bundle file (flowledger audit bundle --subject ...)")
    parser.add_argument("--log-key", required=True, help="the ledger's verifier key (flowledger audit key)")
    parser.add_argument("--witness-key", action="append", default=[], help="a witness's verifier key (repeatable)")
    parser.add_argument("--quorum", type=int, help="cosignatures needed (default: every witness key given)")
    parser.add_argument("--time", action="store_true", help="also print how long the checks took")
    args = parser.parse_args(argv)
    try:
        log, witnesses = Key(args.log_key), [Key(vkey) for vkey in args.witness_key]
    except ValueError as exc:
        parser.error(str(exc))
    if log.kind != NOTE_KEY or any(witness.kind != COSIGNATURE_KEY for witness in witnesses):
        parser.error("--log-key takes a type 0x01 key, --witness-key type 0x04 keys")
    publics = {witness.public_bytes for witness in witnesses}
    if len(publics) != len(witnesses) or len({witness.name for witness in witnesses}) != len(witnesses):
        parser.error("each --witness-key must be a different witness (a name and a key given once)")
    quorum = len(witnesses) if args.quorum is None else args.quorum
    if not 0 <= quorum <= len(witnesses):
        parser.error(f"--quorum must be 0 to {len(witnesses)}, the witness keys given")
    try:
        with open(args.bundle, "rb") as file:
            raw = file.read()
    except OSError as exc:
        print(f"{args.bundle}: {exc.strerror}", file=sys.stderr)
        return 2
    began = time.perf_counter()
    try:
        lines = verify(raw, log, witnesses, quorum)
    except Invalid as exc:
        print(f"bundle INVALID: {exc}")
        return 1
    took = time.perf_counter() - began
    print("\n".join(lines))
    if args.time:
        print(f"checked in {took * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
