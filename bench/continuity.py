"""A scripted 10-turn conversation with conversation continuity on: engine runs made against the minimum.

The conversation mixes rephrasings (history answers: no engine), new groupings, filters and totals on a
table (the tabular engine once), a new selection of a policy document (the narrative engine once) and a
selection of both. The minimum for each turn is written beside it: what a follow-up needs and nothing
more. The engine runs made are read back from each run's recorded decision (one per table plan run, one
per narrative read, one per relevance search). DynamoDB requests per turn are counted on the client,
split into those before ``done`` (what the user waits for) and after it (the deferred flow recording).

The model is the offline model (deterministic, zero latency); AWS is the locked moto server.
Target: engine runs made equal to the minimum.
"""

from __future__ import annotations

import base64
import statistics
import sys
import time
from collections import Counter
from typing import Any

from ledger import Meter

from flowledger.chat.models import ChatRequest
from flowledger.chat.usecase import CancelToken
from flowledger.chat.wiring import build_use_case
from flowledger.config import load_settings
from flowledger.identity import Principal
from flowledger.llm.offline import OfflineChatModel
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import build_services
from flowledger.store import items
from flowledger.store.provision import provision_all
from flowledger.workspaces.documents import DocumentService
from flowledger.workspaces.models import DocumentCreate, WorkspaceCreate
from flowledger.workspaces.service import WorkspaceService

USER = Principal(kind="user", id="bench", scopes=frozenset({"chat", "documents"}))
SALES = "region,store,month,amount\n" + "".join(
    f"{region},{region[0]}{store},2026-{month:02d},{(store * 37 + month * 11) % 90 + 10}\n"
    for region in ("north", "south", "east", "west")
    for store in range(1, 4)
    for month in range(1, 7)
)
POLICY = "# Refund policy\n\nRefunds are paid within fourteen days of a return. The walrus clause covers damaged goods."

# (query, source fields, the minimum engine runs: tables planned, narrative reads, searches)
SCRIPT: list[tuple[str, dict[str, Any], tuple[int, int, int]]] = [
    ("total amount by month", {"select": ["sales"]}, (1, 0, 0)),
    ("now break that down by region", {}, (1, 0, 0)),
    ("what does that mean in simpler words?", {}, (0, 0, 0)),
    ("only the north region", {}, (1, 0, 0)),
    ("say that more briefly", {}, (0, 0, 0)),
    ("what does the refund policy say?", {"select": ["policy"]}, (0, 1, 0)),
    ("explain that in plain words", {}, (0, 0, 0)),
    ("total amount by store and the walrus clause", {"select": ["sales", "policy"]}, (1, 1, 0)),
    ("rephrase that", {}, (0, 0, 0)),
    ("now the average amount by region", {}, (1, 0, 0)),
]


class Unprinted:
    def emit(self, name: str, value: float, unit: str, dimensions: Any) -> None:
        pass


def engine_runs(grounding: dict[str, Any]) -> tuple[int, int, int]:
    """(tables planned, narrative reads, searches) as the run recorded them."""
    tables = len(grounding["tabular_plans"])
    narrative_reads = (
        1
        if any(
            s["engine"] == "narrative" and s["outcome"] in ("read", "rerun") and s["how"] != "relevance"
            for s in grounding["sources"]
        )
        else 0
    )
    return tables, narrative_reads, 1 if grounding["search"] else 0


def main() -> int:
    server = LockedMotoServer()
    endpoint = server.start()
    try:
        settings = load_settings(
            aws_endpoint_url=endpoint,
            resource_prefix=f"cont{int(time.time())}",
            enable_mixed_source_conversation_continuity=True,
            reasoning_flow_capture_enabled=True,
        )
        services = build_services(settings, EMBEDDED_CREDENTIALS)
        services.metrics = Unprinted()  # the flows' EMF records would flood the figures (CloudWatch reads them)
        provision_all(services.aws, settings)
        workspace = WorkspaceService(services).create(USER, WorkspaceCreate(kind="group", name="Bench")).workspace_id
        documents = DocumentService(services)
        ids = {}
        for key, name, kind, body in (
            ("sales", "sales.csv", "csv", SALES),
            ("policy", "refunds.md", "markdown", POLICY),
        ):
            create = DocumentCreate(
                workspace_id=workspace,
                file_name=name,
                kind=kind,  # type: ignore[arg-type]
                content_base64=base64.b64encode(body.encode()).decode(),
            )
            ids[key] = documents.create(USER, create).document.document_id
        use_case = build_use_case(services, model=OfflineChatModel())
        meter = Meter(services.aws.dynamodb)
        session_id = None
        made_total, minimum_total = 0, 0
        before_done, after_done, rows = [], [], []
        for query, fields, minimum in SCRIPT:
            body: dict[str, Any] = {"query": query}
            if session_id:
                body["session_id"] = session_id
            if "select" in fields:
                body |= {"selection_mode": "selected", "document_ids": [ids[key] for key in fields["select"]]}
            meter.calls = Counter()
            done, waited = None, 0
            for event in use_case.run(USER, ChatRequest.model_validate(body), CancelToken()):
                if event.type == "done":
                    done, waited = event, sum(meter.calls.values())
            assert done is not None and done.release_outcome == "SUCCESS", (query, done)
            session_id, run_id = done.session_id, done.run_id
            item = services.aws.dynamodb.get_item(
                TableName=services.aws.table_name("runs"),
                Key={"session_id": {"S": session_id}, "run_id": {"S": run_id}},
            )["Item"]
            grounding = items.from_item(item)["grounding"]
            made = engine_runs(grounding)
            made_total += sum(made)
            minimum_total += sum(minimum)
            before_done.append(waited)
            after_done.append(sum(meter.calls.values()) - waited - 1)  # less the bench's own GetItem
            rows.append((query, grounding["decision"], made, minimum))
        print(f"scripted conversation, {len(SCRIPT)} turns, offline model, continuity on, locked moto server")
        for n, (query, decision, made, minimum) in enumerate(rows, 1):
            mark = "" if made == minimum else "   <- not the minimum"
            print(
                f"  {n:2d}. {query[:46]:46s} {decision:9s} runs {sum(made)} (tables {made[0]}, reads {made[1]}, "
                f"searches {made[2]}), minimum {sum(minimum)}{mark}"
            )
        print(f"  engine runs made {made_total}, minimum needed {minimum_total} (target: equal)")
        print(
            f"  DynamoDB requests per turn: median {statistics.median(before_done):.0f} before done "
            f"(min {min(before_done)}, max {max(before_done)}), median {statistics.median(after_done):.0f} after "
            "(the deferred flow recording)"
        )
        return 0 if made_total == minimum_total and all(r[2] == r[3] for r in rows) else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
