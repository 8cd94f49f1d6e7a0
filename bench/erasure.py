"""Erasing a patient with 1,000 flows of 20 steps and 50 documents, on a real `flowledger serve`.

The patient's data is written straight to the server's store (the flow service and the documents service in
this process, over its embedded AWS endpoint, as the functions write it): 1,000 closed flows of 20 steps,
two of each flow's fields sealed under the patient's key, and 50 uploads to one of their chat sessions. Then
the erasure runs in this process the way ``POST /admin/v1/subjects/{id}/erasure`` runs it: in rounds of at
most the route's 20 s budget, each answered 202 until the last. Printed: the time to erase (and the
compaction at its end), the AWS requests it made by operation, what was erased, and that nothing of the
patient is left in the data directory's files.
Target: every round (one request to the route) ends within API Gateway's 29 s.
"""

from __future__ import annotations

import base64
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from journal import environment, serve, stop

FLOWS = 1_000
STEPS = 20
DOCUMENTS = 50
PATIENT = "p-bench"
CANARY = "cnry-bench-5e81"
GATEWAY_SECONDS = 29.0
WRITERS = 4


def seed(services: Any) -> None:
    """The patient's flows, steps and uploads, written by ``WRITERS`` threads as the functions would."""
    from flowledger.identity import Principal
    from flowledger.reasoning.models import FlowClose, FlowStart, StepCreate
    from flowledger.reasoning.service import FlowService
    from flowledger.workspaces.documents import DocumentService
    from flowledger.workspaces.models import DocumentCreate

    writer = Principal(kind="user", id="bench-agent", scopes=frozenset({"reasoning.write"}))
    flows = FlowService(services)

    def one(n: int) -> None:
        start = FlowStart(trigger_type="user_question", trigger_ref=f"bench/{n}", trigger_summary="A question")
        flow = flows.start_flow(writer, start.model_copy(update={"patient_id": PATIENT}))
        steps = [
            StepCreate(
                step_kind="retrieval",
                agent="researcher",
                summary_text="Read the notes",
                inputs={"query": f"{CANARY} {n}.{s}", "k": s},
                outputs={"passage": f"{CANARY} passage"},
                pii_fields={"inputs": ["query"], "outputs": ["passage"]},
            )
            for s in range(STEPS)
        ]
        flows.add_steps(writer, flow.flow_id, steps)
        flows.close_flow(
            writer,
            flow.flow_id,
            FlowClose.model_validate(
                {"state": "completed", "outcome": {"type": "no_action", "summary": "Done", "confidence": 0.9}}
            ),
        )

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(one, range(FLOWS)))
    patient = Principal(kind="user", id="u-bench", scopes=frozenset({"documents"}), patient_id=PATIENT)
    documents = DocumentService(services)
    for n in range(DOCUMENTS):
        content = base64.b64encode(f"Notes {n}: {CANARY}".encode()).decode()
        body = DocumentCreate(
            session_id="ses_01JD00000000000000000BENCH", file_name=f"notes-{n}.txt", kind="text", content_base64=content
        )
        documents.create(patient, body)


def count_requests(services: Any) -> Counter[str]:
    """Every AWS call the services' clients make from now on, by operation (retries not counted again)."""
    counted: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        counted[model.name] += 1

    for client in (services.aws.dynamodb, services.aws.s3, services.aws.kms):
        client.meta.events.register("before-call", count)
    return counted


def main() -> int:
    from flowledger.cli.store import services as store_services
    from flowledger.identity import Principal
    from flowledger.subjects.erasure import SubjectErasure

    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch) / "data"
        process, _, _, _ = serve(data_dir, environment())
        try:
            services = store_services(str(data_dir))
            began = time.perf_counter()
            seed(services)
            seeded = time.perf_counter() - began
            services = store_services(str(data_dir))  # fresh clients: only the erasure's requests are counted
            counted = count_requests(services)
            erasure = SubjectErasure(services)
            officer = Principal(kind="iam", id="bench-officer")
            rounds: list[float] = []
            began = time.perf_counter()
            while True:
                round_began = time.perf_counter()
                view = erasure.erase(officer, PATIENT, "gdpr_art17_request", time.monotonic() + 20.0)
                rounds.append(time.perf_counter() - round_began)
                if view.phase == "completed":
                    break
            erased = time.perf_counter() - began
            left = [p for p in data_dir.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
        finally:
            stop(process)
    total = sum(counted.values())
    print(f"a patient with {FLOWS:,} flows of {STEPS} steps and {DOCUMENTS} uploads, on flowledger serve")
    print(f"  seeded in             {seeded:8.1f} s  (not counted)")
    print(f"  erased in             {erased:8.1f} s  in {len(rounds)} round(s) of the route's 20 s budget")
    print(f"  longest round         {max(rounds):8.1f} s  target <= {GATEWAY_SECONDS:.0f} s (API Gateway)")
    print(f"  AWS requests          {total:8,}   {total / FLOWS:.1f} a flow")
    for operation, n in counted.most_common(8):
        print(f"    {operation:<24} {n:8,}")
    print("  erased: " + ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in view.counts.items() if v))
    print(f"  files still holding the patient's strings: {len(left)}")
    missed = []
    if max(rounds) > GATEWAY_SECONDS:
        missed.append(f"a round took {max(rounds):.1f} s (target {GATEWAY_SECONDS:.0f} s)")
    if left or view.counts["flows"] != FLOWS or view.counts["steps"] != FLOWS * STEPS:
        missed.append(f"erasure incomplete: {len(left)} file(s) left, {view.counts['flows']} flows erased")
    if missed:
        print(f"TARGET MISSED: {'; '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
