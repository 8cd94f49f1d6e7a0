"""The witness as its Lambda runs it: a KMS Ed25519 key cosigns, a DynamoDB item per log holds the checkpoint
(swapped only from the one read), and a function URL event gets the same answers as `witness serve`."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from flowledger.ledger.signed_note import parse_note, verify
from flowledger.ledger.witnessing import ADD_CHECKPOINT
from flowledger.services import Services
from flowledger.witness.keys import kms_witness_key
from flowledger.witness.lambda_handler import handle
from flowledger.witness.service import Witness
from flowledger.witness.state import DynamoState
from tests.witness_log import MemoryLog

TABLE = "flowledger-witness-state"
LOG = MemoryLog()  # the log the deployed witness is given; each test grows it further


@pytest.fixture
def deployed(moto_services: Services) -> tuple[Witness, DynamoState]:
    aws = moto_services.aws
    aws.dynamodb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "origin", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "origin", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    key_id = aws.kms.create_key(KeySpec="ECC_NIST_EDWARDS25519", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["KeyId"]
    state = DynamoState(aws.dynamodb, TABLE)
    return Witness(
        kms_witness_key(aws.kms, key_id, "witness.aws.example"), [LOG.key], state, lambda: 1_796_000_000
    ), state


def event(body: bytes, *, method: str = "POST", encoded: bool = False) -> dict[str, Any]:
    return {
        "rawPath": ADD_CHECKPOINT,
        "requestContext": {"http": {"method": method}},
        "body": base64.b64encode(body).decode() if encoded else body.decode(),
        "isBase64Encoded": encoded,
    }


def test_a_function_url_event_is_cosigned_with_the_kms_key_and_held_in_dynamodb(
    deployed: tuple[Witness, DynamoState],
) -> None:
    witness, state = deployed
    first = LOG.grow(chain_000=3)
    reply = handle(event(LOG.request(first, None), encoded=True), witness)
    assert reply["statusCode"] == 200, reply
    note = parse_note(parse_note(LOG.note(first)).text + "\n" + reply["body"])
    assert verify(note, witness.key.verifier) == 1_796_000_000
    second = LOG.grow(chain_000=2, chain_001=1)
    assert handle(event(LOG.request(second, first)), witness)["statusCode"] == 200
    assert state.read(LOG.key.name) == second
    stale = handle(event(LOG.request(LOG.grow(chain_001=1), first)), witness)
    assert (stale["statusCode"], stale["body"]) == (409, "6\n")
    assert stale["headers"]["Flowledger-Checkpoint-Id"] == second.checkpoint_id
    assert handle(event(b"", method="GET"), witness)["statusCode"] == 405
    assert json.loads(json.dumps(handle(event(b"\xff", encoded=True), witness)))["statusCode"] == 400


def test_the_dynamodb_state_swaps_only_from_the_checkpoint_read(deployed: tuple[Witness, DynamoState]) -> None:
    _, state = deployed
    log = MemoryLog("flowledger/swap/audit")
    first, second, third = log.grow(chain_000=1), log.grow(chain_000=1), log.grow(chain_000=1)
    assert state.swap(log.key.name, None, first)
    assert not state.swap(log.key.name, None, second)  # someone else stored the first
    assert state.swap(log.key.name, first, second)
    assert not state.swap(log.key.name, first, third)  # lost the race to the second
    assert state.read(log.key.name) == second
