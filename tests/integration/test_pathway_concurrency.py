"""16 writers at once on the locked moto server: one pathway per flow, and every hit counted."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from flowledger.config import load_settings
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.pathways.extraction import PathwayExtractor
from flowledger.pathways.library import PathwayLibrary
from flowledger.reasoning.models import FlowView
from flowledger.services import build_services
from flowledger.store.provision import create_table
from flowledger.store.tables import table_spec

WRITERS = 16
STEPS = [{"step_kind": "retrieval", "confidence": 0.95}]


@pytest.mark.usefixtures("clean_environment")
def test_sixteen_extractions_of_one_flow_make_one_pathway_and_sixteen_hits_count_sixteen(
    locked_moto: str, qualifying_flow: Callable[[str, str], FlowView]
) -> None:
    flow = qualifying_flow("fl_01JCONCURRENTEXTRACTION000", "chat/q-1")
    settings = load_settings(aws_endpoint_url=locked_moto, resource_prefix="pathwayconc")
    setup = build_services(settings, EMBEDDED_CREDENTIALS)
    for table in ("pathways", "ledger", "ledger_leases"):
        create_table(setup.aws, table_spec(table))
    start = threading.Barrier(WRITERS)

    def extract(number: int) -> bool:
        services = build_services(settings, EMBEDDED_CREDENTIALS)  # its own client and head cache
        start.wait()
        return PathwayExtractor(services).extract(flow, STEPS, f"writer:{number}").created

    with ThreadPoolExecutor(WRITERS) as pool:
        created = list(pool.map(extract, range(WRITERS)))
    assert created.count(True) == 1
    pathway_ids = [item["pathway_id"]["S"] for item in PathwayLibrary(setup).store.scan()]
    assert len(pathway_ids) == 1
    ledger = setup.ledger
    actions = [e.action for c in ledger.chain_ids() for e in ledger.read_chain(c)]
    assert actions.count("reasoning.pathway.extracted") == 1
    assert actions.count("reasoning.pathway.skipped") == WRITERS - 1

    def hit(number: int) -> None:
        services = build_services(settings, EMBEDDED_CREDENTIALS)
        start.wait()
        PathwayLibrary(services).hit(f"arn:aws:iam::1:role/op-{number}", pathway_ids[0])

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(hit, range(WRITERS)))
    assert PathwayLibrary(setup).view(pathway_ids[0]).hit_count == WRITERS
