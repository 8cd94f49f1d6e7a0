"""Steps recorded per second through the reasoning function's handler, in-process, against the
locked moto server; DynamoDB requests, transaction items and write units per step."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from ledger import Meter, item_size

from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import bootstrap
from flowledger.store.provision import provision_all

ROOT = Path(__file__).resolve().parents[1]
STEPS = 200
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
        provision_all(services.aws, "us-east-1", services.settings.data_key_id)
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
        return 1 if failed else 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
