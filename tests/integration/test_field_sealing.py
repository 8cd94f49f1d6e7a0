"""Sealed PII fields on moto's KMS: bound to their place, KMS context per flow, bounded key caches, v1 still opens."""

from __future__ import annotations

import base64
import json
import os
from collections import Counter
from typing import Any

import pytest
from botocore.exceptions import ClientError
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from flowledger.identity import Principal
from flowledger.reasoning.models import FlowStart, StepCreate
from flowledger.reasoning.service import FlowService
from flowledger.services import Services
from flowledger.store.envelope import (
    FORMAT_V1,
    MAX_KEY_AGE_SECONDS,
    MAX_KEY_USES,
    SEALED_MARKER,
    FieldRef,
    FieldSealer,
    SealedFieldError,
)

HERE = FieldRef("fl_A", "st_1", "inputs", "query")
ELSEWHERE = {
    "another flow": FieldRef("fl_B", "st_1", "inputs", "query"),
    "another step": FieldRef("fl_A", "st_2", "inputs", "query"),
    "another side": FieldRef("fl_A", "st_1", "outputs", "query"),
    "another field": FieldRef("fl_A", "st_1", "inputs", "note"),
}
WRITER = Principal(kind="user", id="agent-researcher", scopes=frozenset({"reasoning.write"}))
ADMIN = Principal(kind="iam", id="arn:aws:sts::123456789012:assumed-role/operator/jane")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class KmsCalls:
    """The KMS requests a client makes, with their parameters, through botocore's hooks."""

    def __init__(self, kms: Any) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        kms.meta.events.register("before-parameter-build.kms.*", self._record)

    def _record(self, event_name: str, params: dict[str, Any], **_: Any) -> None:
        self.calls.append((event_name.rsplit(".", 1)[-1], dict(params)))

    def count(self) -> Counter[str]:
        return Counter(name for name, _ in self.calls)


@pytest.fixture
def kms(services: Services) -> Any:
    return services.aws.kms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sealer(services: Services, clock: Clock) -> FieldSealer:
    return FieldSealer(services.aws.kms, services.settings.data_key_id, clock)


def reader(services: Services, clock: Clock | None = None, **kwargs: Any) -> FieldSealer:
    """Another process's sealer: nothing cached."""
    return FieldSealer(services.aws.kms, services.settings.data_key_id, clock or Clock(), **kwargs)


def test_moto_refuses_a_data_key_under_another_encryption_context(services: Services, kms: Any) -> None:
    # What the other tests rely on: moto's KMS binds a data key to its encryption context, as KMS does.
    key = kms.generate_data_key(
        KeyId=services.settings.data_key_id, KeySpec="AES_256", EncryptionContext=HERE.kms_context()
    )
    opened = kms.decrypt(CiphertextBlob=key["CiphertextBlob"], EncryptionContext=HERE.kms_context())
    assert opened["Plaintext"] == key["Plaintext"]
    for context in (ELSEWHERE["another flow"].kms_context(), {}):
        with pytest.raises(ClientError, match="InvalidCiphertextException"):
            kms.decrypt(CiphertextBlob=key["CiphertextBlob"], EncryptionContext=context)


def test_a_sealed_field_opens_where_it_was_sealed(services: Services, sealer: FieldSealer) -> None:
    value = {"text": "ann's a1c values", "n": [1, 2.5, None]}
    sealed = sealer.seal(value, HERE)
    # The plaintext phrase, not a fragment: "a1c" alone turns up in base64 ciphertext now and then.
    assert "ann's a1c values" not in json.dumps(sealed)
    assert reader(services).open(sealed, HERE) == value


@pytest.mark.parametrize("moved", ELSEWHERE.values(), ids=ELSEWHERE.keys())
def test_a_sealed_field_moved_elsewhere_fails_with_a_clear_error(
    services: Services, sealer: FieldSealer, moved: FieldRef
) -> None:
    sealed = sealer.seal("patient secret", HERE)
    with pytest.raises(SealedFieldError) as raised:
        reader(services).open(sealed, moved)
    message = str(raised.value)
    assert str(moved) in message and "does not open" in message and "secret" not in message
    expected = "KMS refused its data key for flow fl_B" if moved.flow_id != HERE.flow_id else "sealed for another"
    assert expected in message


def test_the_data_key_is_bound_to_the_flow_in_kms(services: Services, kms: Any, sealer: FieldSealer) -> None:
    calls = KmsCalls(kms)
    sealed = sealer.seal("patient secret", HERE)
    reader(services).open(sealed, HERE)
    assert [(name, params.get("EncryptionContext")) for name, params in calls.calls] == [
        ("GenerateDataKey", {"flowledger:purpose": "reasoning-step-field", "flowledger:flow_id": "fl_A"}),
        ("Decrypt", {"flowledger:purpose": "reasoning-step-field", "flowledger:flow_id": "fl_A"}),
    ]


def test_a_field_forged_under_another_flows_data_key_does_not_open(
    services: Services, kms: Any, sealer: FieldSealer
) -> None:
    """Even with a data key's plaintext and the right associated data, the KMS context ties the key to its flow."""
    genuine = sealer.seal("flow A value", HERE)
    edk = base64.b64decode(genuine["edk"])
    plaintext = kms.decrypt(CiphertextBlob=edk, EncryptionContext=HERE.kms_context())["Plaintext"]
    target = ELSEWHERE["another flow"]
    nonce = os.urandom(12)
    forged = {
        **genuine,
        "nonce": base64.b64encode(nonce).decode(),
        "ciphertext": base64.b64encode(
            AESGCM(plaintext).encrypt(nonce, b'"forged"', target.associated_data())
        ).decode(),
    }
    opener = reader(services)
    assert opener.open(genuine, HERE) == "flow A value"  # the data key is now cached, for flow A only
    with pytest.raises(SealedFieldError, match="KMS refused its data key for flow fl_B"):
        opener.open(forged, target)


def test_fields_sealed_in_format_v1_still_open(services: Services, kms: Any) -> None:
    """A v1 field, as sealed before encryption contexts: a data key without context, the path as AAD."""
    key = kms.generate_data_key(KeyId=services.settings.data_key_id, KeySpec="AES_256")
    nonce = os.urandom(12)
    v1 = {
        SEALED_MARKER: FORMAT_V1,
        "edk": base64.b64encode(key["CiphertextBlob"]).decode(),
        "nonce": base64.b64encode(nonce).decode(),
        "ciphertext": base64.b64encode(
            AESGCM(key["Plaintext"]).encrypt(nonce, b'"old value"', b"fl_A/st_1/inputs/query")
        ).decode(),
    }
    opener = reader(services)
    assert opener.open(v1, HERE) == "old value"
    with pytest.raises(SealedFieldError, match="sealed for another step"):
        opener.open(v1, ELSEWHERE["another step"])


def test_a_v2_field_relabelled_v1_does_not_open(services: Services, sealer: FieldSealer) -> None:
    downgraded = {**sealer.seal("patient secret", HERE), SEALED_MARKER: FORMAT_V1}
    with pytest.raises(SealedFieldError, match="without encryption context"):
        reader(services).open(downgraded, HERE)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ({SEALED_MARKER: "aes256gcm.v9"}, "unknown format 'aes256gcm.v9'"),
        ({"edk": None}, "is malformed"),
        ({"nonce": "AAAAAAAAAAAAAAAA!"}, "is malformed"),  # lenient base64 would drop the "!"
        ({"ciphertext": base64.b64encode(b"short").decode()}, "or altered"),
        ({"edk": base64.b64encode(b"not a kms ciphertext").decode()}, "KMS refused its data key"),
    ],
    ids=["unknown format", "no data key", "bad base64", "truncated", "foreign data key"],
)
def test_a_malformed_sealed_field_is_a_sealed_field_error(
    services: Services, sealer: FieldSealer, damage: dict[str, Any], reason: str
) -> None:
    sealed = {**sealer.seal("patient secret", HERE), **damage}
    with pytest.raises(SealedFieldError, match=r"sealed field inputs\.query of step st_1 in flow fl_A") as raised:
        reader(services).open(sealed, HERE)
    assert reason in str(raised.value)


def test_kms_throttling_is_not_blamed_on_the_field(services: Services, sealer: FieldSealer) -> None:
    sealed = sealer.seal("patient secret", HERE)

    class ThrottledKms:
        def decrypt(self, **_: Any) -> Any:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "Decrypt")

    with pytest.raises(ClientError, match="ThrottlingException"):
        FieldSealer(ThrottledKms(), services.settings.data_key_id).open(sealed, HERE)


def test_one_data_key_seals_up_to_1000_fields_of_a_flow_for_5_minutes(
    kms: Any, sealer: FieldSealer, clock: Clock
) -> None:
    calls = KmsCalls(kms)
    sealed = [sealer.seal(n, FieldRef("fl_A", f"st_{n}", "inputs", "q")) for n in range(MAX_KEY_USES)]
    assert calls.count() == {"GenerateDataKey": 1}
    assert len({s["edk"] for s in sealed}) == 1
    sealer.seal("one more", HERE)
    assert calls.count() == {"GenerateDataKey": 2}
    sealer.seal("same key", HERE)
    clock.now += MAX_KEY_AGE_SECONDS + 1
    sealer.seal("an older key retires", HERE)
    assert calls.count() == {"GenerateDataKey": 3}
    sealer.seal("another flow has its own key", FieldRef("fl_B", "st_1", "inputs", "q"))
    assert calls.count() == {"GenerateDataKey": 4}


def test_opening_costs_one_decrypt_per_data_key_while_it_is_cached(
    services: Services, kms: Any, sealer: FieldSealer
) -> None:
    refs = [FieldRef("fl_A", f"st_{n}", "inputs", "q") for n in range(50)]
    sealed = [sealer.seal(n, ref) for n, ref in zip(range(50), refs, strict=True)]
    clock = Clock()
    opener = reader(services, clock)
    calls = KmsCalls(kms)
    assert [opener.open(s, ref) for s, ref in zip(sealed, refs, strict=True)] == list(range(50))
    assert calls.count() == {"Decrypt": 1}
    clock.now += MAX_KEY_AGE_SECONDS - 1
    opener.open(sealed[0], refs[0])
    assert calls.count() == {"Decrypt": 1}
    clock.now += 2  # past the opened key's time to live
    opener.open(sealed[0], refs[0])
    assert calls.count() == {"Decrypt": 2}


def test_the_key_caches_hold_at_most_their_bound_and_drop_the_least_recently_used(
    services: Services, kms: Any, clock: Clock
) -> None:
    writer = reader(services, clock, max_cached_keys=3)
    refs = [FieldRef(f"fl_{n}", "st_1", "inputs", "q") for n in range(5)]
    sealed = [writer.seal(n, ref) for n, ref in zip(range(5), refs, strict=True)]
    assert writer.cached_keys() == (3, 0)
    opener = reader(services, max_cached_keys=3)
    for s, ref in zip(sealed, refs, strict=True):
        opener.open(s, ref)
    assert opener.cached_keys() == (0, 3)
    calls = KmsCalls(kms)
    opener.open(sealed[2], refs[2])  # among the three most recent: cached
    assert calls.count() == {}
    opener.open(sealed[0], refs[0])  # dropped: opened again
    assert calls.count() == {"Decrypt": 1}
    opener.open(sealed[3], refs[3])  # least recently used after the two above, so dropped by fl_0
    assert calls.count() == {"Decrypt": 2}


def test_step_fields_are_sealed_to_their_flow_step_side_and_field(services: Services) -> None:
    """Through the service: what it seals opens only at the place it names."""
    flows = FlowService(services)
    flow = flows.start_flow(
        WRITER, FlowStart(trigger_type="user_question", trigger_ref="chat/run-1", trigger_summary="A question")
    )
    step = flows.add_step(
        WRITER,
        flow.flow_id,
        StepCreate.model_validate(
            {
                "step_kind": "retrieval",
                "agent": "researcher",
                "summary_text": "Retrieved passages",
                "inputs": {"query": "ann's a1c", "k": 3},
                "outputs": {"answer": "ann is fine"},
                "pii_fields": {"inputs": ["query"], "outputs": ["answer"]},
            }
        ),
    )
    _, [record] = flows.flow_with_steps(flow.flow_id)
    opener = reader(services)
    assert opener.open(record["inputs"]["query"], FieldRef(flow.flow_id, step.step_id, "inputs", "query")) == (
        "ann's a1c"
    )
    assert opener.open(record["outputs"]["answer"], FieldRef(flow.flow_id, step.step_id, "outputs", "answer")) == (
        "ann is fine"
    )
    with pytest.raises(SealedFieldError):
        opener.open(record["inputs"]["query"], FieldRef(flow.flow_id, step.step_id, "outputs", "query"))
    dag = flows.admin_flow(ADMIN, flow.flow_id)
    assert (dag.steps[0].inputs, dag.steps[0].outputs) == ({"query": "ann's a1c", "k": 3}, {"answer": "ann is fine"})


def test_a_field_moved_to_another_flow_does_not_open_for_admins(services: Services) -> None:
    flows = FlowService(services)
    body = StepCreate.model_validate(
        {
            "step_kind": "retrieval",
            "agent": "researcher",
            "summary_text": "Retrieved passages",
            "inputs": {"q": "patient secret"},
            "pii_fields": {"inputs": ["q"]},
        }
    )
    start = FlowStart(trigger_type="user_question", trigger_ref="chat/run-1", trigger_summary="A question")
    source, target = flows.start_flow(WRITER, start), flows.start_flow(WRITER, start)
    stolen_step = flows.add_step(WRITER, source.flow_id, body)
    target_step = flows.add_step(WRITER, target.flow_id, body.model_copy(update={"inputs": {"q": "other"}}))
    table = services.aws.table_name("steps")
    stolen = services.aws.dynamodb.get_item(
        TableName=table, Key={"flow_id": {"S": source.flow_id}, "step_id": {"S": stolen_step.step_id}}
    )["Item"]["inputs"]
    # Same step id too, so only the flow differs.
    item = services.aws.dynamodb.get_item(
        TableName=table, Key={"flow_id": {"S": target.flow_id}, "step_id": {"S": target_step.step_id}}
    )["Item"]
    services.aws.dynamodb.delete_item(
        TableName=table, Key={"flow_id": {"S": target.flow_id}, "step_id": {"S": target_step.step_id}}
    )
    services.aws.dynamodb.put_item(
        TableName=table, Item={**item, "step_id": {"S": stolen_step.step_id}, "inputs": stolen}
    )
    with pytest.raises(Exception) as raised:
        flows.admin_flow(ADMIN, target.flow_id)
    assert "patient secret" not in str(raised.value)
    cause = raised.value if isinstance(raised.value, SealedFieldError) else raised.value.__context__
    assert isinstance(cause, SealedFieldError) and "KMS refused its data key" in str(cause)
