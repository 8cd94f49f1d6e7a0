"""Steps recorded per second through the reasoning function's handler, in-process, against the
locked moto server; DynamoDB requests, transaction items and write units per step; KMS calls per
sealed PII field, written and read back."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from ledger import Meter, item_size

from flowledger.identity import Principal
from flowledger.local.moto_server import LockedMotoServer
from flowledger.reasoning.service import FlowService
from flowledger.services import Services, bootstrap
from flowledger.store.provision import provision_all

ROOT = Path(__file__).resolve().parents[1]
STEPS = 200
SEALED_FLOWS = 20  # the sealed steps spread over this many flows
ADMIN = Principal(kind="iam", id="arn:aws:sts::123456789012:assumed-role/operator/bench")
WRITER = {"principalId": "agent", "sub": "agent", "scope": "reasoning.write", "patient_id": ""}


def load_handler() -> Any:
    spec = importlib.util.spec_from_file_location("reasoning_handler", ROOT / "functions/reasoning/handler.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.handler


def event(method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    base = json.loads((ROOT / "tests/fixtures/events/rest_request.json").read_text())
    base.update(httpMethod=method, path=path, body=json.dumps(body))
    base["headers"]["Content-Type"] = "application/json"
    base["requestContext"]["authorizer"] = WRITER
    return base


class Context:
    function_name = "bench"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:0:function:bench"
    aws_request_id = "r"


def count_kms(kms: Any) -> Counter[str]:
    calls: Counter[str] = Counter()

    def record(event_name: str, **_: Any) -> None:
        calls[event_name.rsplit(".", 1)[-1]] += 1

    kms.meta.events.register("before-parameter-build.kms.*", record)
    return calls


def sealed_steps(handler: Any, services: Services, kms: Counter[str]) -> tuple[Counter[str], Counter[str]]:
    """KMS calls to write STEPS steps with one sealed field each over SEALED_FLOWS flows, then to read them."""
    before = Counter(kms)
    flow_ids = []
    for n in range(SEALED_FLOWS):
        opened = handler(
            event(
                "POST",
                "/api/reasoning/flows",
                {"trigger_type": "bench", "trigger_ref": f"bench/s{n}", "trigger_summary": "Sealed flow"},
            ),
            Context(),
        )
        flow_ids.append(json.loads(opened["body"])["flow_id"])
    for n in range(STEPS):
        body = {
            "step_kind": "retrieval",
            "agent": "researcher",
            "summary_text": f"Retrieved batch {n}",
            "inputs": {"query": f"private question {n}", "k": 5},
            "pii_fields": {"inputs": ["query"]},
        }
        response = handler(event("POST", f"/api/reasoning/flows/{flow_ids[n % SEALED_FLOWS]}/steps", body), Context())
        assert response["statusCode"] == 201, response["body"]
    written = kms - before
    # The admin read runs in a function of its own: its sealer has nothing cached from the writes.
    reader = dataclasses.replace(services)
    for flow_id in flow_ids:
        FlowService(reader).admin_flow(ADMIN, flow_id)
    return written, kms - before - written


def main() -> int:
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    server = LockedMotoServer()
    endpoint = server.start()
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_REGION="us-east-1",
        FLOWLEDGER_RESOURCE_PREFIX=f"flows{int(time.time())}",
        POWERTOOLS_TRACE_DISABLED="1",
        POWERTOOLS_METRICS_NAMESPACE="Bench",
    )
    try:
        services = bootstrap()
        provision_all(services.aws, services.settings)
        handler = load_handler()
        sys.stdout.flush()
        devnull = open(os.devnull, "w")  # noqa: SIM115 - EMF metric lines would drown the figures
        real_stdout, sys.stdout = sys.stdout, devnull
        try:
            opened = handler(
                event(
                    "POST",
                    "/api/reasoning/flows",
                    {"trigger_type": "bench", "trigger_ref": "bench/1", "trigger_summary": "Benchmark flow"},
                ),
                Context(),
            )
            flow_id = json.loads(opened["body"])["flow_id"]
            meter = Meter(services.aws.dynamodb)
            kms = count_kms(services.aws.kms)
            results = {}
            parent: str | None = None
            for mode in ("no parent", "one parent"):
                before = sum(meter.calls.values())
                transactions_before = len(meter.per_transaction)
                began = time.perf_counter()
                for n in range(STEPS):
                    body = {
                        "step_kind": "retrieval",
                        "agent": "researcher",
                        "summary_text": f"Retrieved batch {n}",
                        "confidence": 0.9,
                        "inputs": {"k": 5},
                        "outputs": {"hits": 3},
                    }
                    if mode == "one parent" and parent:
                        body["parent_step_ids"] = [parent]
                    response = handler(event("POST", f"/api/reasoning/flows/{flow_id}/steps", body), Context())
                    assert response["statusCode"] == 201, response["body"]
                    parent = json.loads(response["body"])["step_id"]
                elapsed = time.perf_counter() - began
                results[mode] = (
                    STEPS / elapsed,
                    (sum(meter.calls.values()) - before) / STEPS,
                    meter.per_transaction[transactions_before:],
                    meter.items_per_transaction[transactions_before:],
                )
            plain_kms_calls = sum(kms.values())
            sealed_written, sealed_read = sealed_steps(handler, services, kms)
        finally:
            sys.stdout = real_stdout
            devnull.close()
        flow_item = services.aws.dynamodb.get_item(
            TableName=services.aws.table_name("flows"), Key={"flow_id": {"S": flow_id}}
        )["Item"]
        update_units = 2 * math.ceil(item_size(flow_item) / 1024)
        print(f"steps through the reasoning handler in-process, locked moto server ({STEPS} per mode)")
        print(f"{'mode':<11} {'steps/s':>8} {'requests/step':>14} {'txn items':>10} {'WCU/step':>9}")
        failed = False
        for mode, (rate, requests, transactions, sizes) in results.items():
            # The meter prices Put items; the flow Update is priced from the flow item's size.
            units = statistics.median(transactions) + update_units
            print(f"{mode:<11} {rate:>8.0f} {requests:>14.2f} {max(sizes):>10} {units:>9.0f}")
            failed |= units > 6 or max(sizes) > 3
        print(
            "target: one transaction of at most 3 items (flow state check, step, audit event), <= 6 WCU "
            "for a step under 1 KB; a step with parents adds one BatchGetItem read"
        )
        generate, decrypt = sealed_written["GenerateDataKey"], sealed_read["Decrypt"]
        print(
            f"KMS calls: {plain_kms_calls} for the {2 * STEPS} steps without PII; {STEPS} sealed fields over "
            f"{SEALED_FLOWS} flows: {generate} GenerateDataKey to write ({STEPS / max(generate, 1):.0f} fields "
            f"per call), {decrypt} Decrypt to read back"
        )
        print(
            "target: one GenerateDataKey per flow per <= 1,000 fields or 5 minutes (the data key's KMS context "
            "names the flow), one Decrypt per data key read; steps without PII make no KMS call"
        )
        failed |= plain_kms_calls > 0 or generate > SEALED_FLOWS or decrypt > SEALED_FLOWS
        failed |= sum(sealed_written.values()) != generate
        return 1 if failed else 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
