"""Pathway stats from counters: exact under concurrency, a fixed number of requests, a recount for upgrades."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowledger.config import load_settings
from flowledger.jobs import run_job
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.pathways.extraction import PathwayExtractor
from flowledger.pathways.library import PathwayLibrary
from flowledger.pathways.radar import HIGH_HITS, maturity_of
from flowledger.pathways.stats import HIT_SHARDS, TOP_HITS, PathwayStats
from flowledger.reasoning.models import FlowView
from flowledger.services import Services, build_services
from flowledger.store.counters import KEY_PREFIX, SHARDS
from flowledger.store.provision import create_bucket, create_table
from flowledger.store.tables import BUCKETS, table_spec
from tests.integration.test_backlog_counters import Requests

THREADS = 8
ADMIN = "arn:aws:sts::123456789012:assumed-role/curator/ops"
MakeFlow = Callable[[str, str], FlowView]


def flow_id(n: int) -> str:
    return f"fl_01COUNTERS{n:015d}"


def recounted(services: Services) -> dict[str, Any]:
    """The stats a full read of every pathway gives (the old scan's rules), to hold the counters to."""
    db, table = services.aws.dynamodb, services.aws.table_name("pathways")
    rows = [
        i
        for i in db.scan(TableName=table, ConsistentRead=True)["Items"]
        if not i["pathway_id"]["S"].startswith(KEY_PREFIX)
    ]
    active = [i for i in rows if "demoted_at" not in i]
    by_type = Counter(i["trigger_type"]["S"] for i in active)
    high = Counter(i["trigger_type"]["S"] for i in active if int(i["hit_count"]["N"]) >= HIGH_HITS)
    hits = sorted(
        (
            (int(i["hit_count"]["N"]), i["pathway_id"]["S"], i["trigger_type"]["S"])
            for i in active
            if int(i["hit_count"]["N"])
        ),
        key=lambda h: (-h[0], h[1]),
    )
    return {
        "total": len(rows),
        "active": len(active),
        "demoted": len(rows) - len(active),
        "embedded": sum("embedding_model" in i for i in active),
        "by_model": dict(sorted(Counter(i["embedding_model"]["S"] for i in active if "embedding_model" in i).items())),
        "by_trigger_type": dict(sorted(by_type.items())),
        "maturity_by_trigger_type": {
            f: maturity_of(by_type[f], high[f]) for f in sorted({i["trigger_type"]["S"] for i in rows})
        },
        "top_hits": [{"pathway_id": p, "trigger_type": t, "hit_count": h} for h, p, t in hits[:5]],
        "degraded_models": [],
    }  # fmt: skip


def in_family(make: MakeFlow, n: int, family: str) -> FlowView:
    return make(flow_id(n), f"ref/{n}").model_copy(update={"trigger_type": family})


@pytest.mark.usefixtures("clean_environment")
def test_eight_threads_extracting_hitting_embedding_and_demoting_leave_stats_equal_to_a_recount(
    locked_moto: str, qualifying_flow: MakeFlow
) -> None:
    settings = load_settings(aws_endpoint_url=locked_moto, resource_prefix="pathwaycounters")
    setup = build_services(settings, EMBEDDED_CREDENTIALS)
    for table in ("pathways", "ledger", "ledger_leases"):
        create_table(setup.aws, table_spec(table))
    create_bucket(setup.aws, next(b for b in BUCKETS if b.name == "artifacts"), settings.aws_region)  # snapshots
    families = ("user_question", "critic", "lab_trend")
    ids = [
        PathwayExtractor(setup).extract(in_family(qualifying_flow, n, families[n % 3]), [], "system:test").pathway_id
        for n in range(24)
    ]
    start_line = threading.Barrier(THREADS)

    def work(number: int) -> None:
        services = build_services(settings, EMBEDDED_CREDENTIALS)
        library = PathwayLibrary(services)
        start_line.wait()
        # Every thread re-extracts a few flows (one pathway each, whoever wins) and hits the first six
        # pathways, so several threads cross HIGH_HITS on the same pathway at once.
        for n in range(24 + number, 40, THREADS):
            PathwayExtractor(services).extract(in_family(qualifying_flow, n, "critic"), [], f"system:{number}")
        for pathway_id in ids[: 6 - number % 3]:
            library.hit(f"user:{number}", pathway_id)  # type: ignore[arg-type]

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(work, range(THREADS)))
    run_job("pathway_embedding_backfill", setup)  # embeds every active one
    later = build_services(settings, EMBEDDED_CREDENTIALS)
    later.clock = lambda: datetime.now(UTC) + timedelta(days=45)
    assert run_job("pathway_decay", later)["demoted_cold"] == 40 - 6  # the never-hit ones go cold
    stats = PathwayLibrary(setup).stats()
    assert stats.model_dump() == recounted(setup)
    kept = {name: n for name, n in PathwayStats(setup).counters.read().totals.items() if n}
    assert kept == PathwayStats(setup).recount()  # every counter, high hits per family included
    assert stats.total == 40 and stats.active == 6 and stats.top_hits[0].hit_count >= HIGH_HITS
    assert PathwayLibrary(setup).stats() == stats  # the recount agreed


def test_stats_read_the_same_few_items_with_five_pathways_or_two_hundred(
    services: Services, qualifying_flow: MakeFlow
) -> None:
    library = PathwayLibrary(services)
    requests = Requests(services.aws.dynamodb)

    def load(start: int, stop: int) -> Counter[str]:
        for n in range(start, stop):
            extracted = PathwayExtractor(services).extract(in_family(qualifying_flow, n, "user_question"), [], "s:t")
            if n % 4 == 0:
                library.hit("user:x", extracted.pathway_id)  # type: ignore[arg-type]
        return requests.during(library.stats)

    small = load(0, 5)
    large = load(5, 200)
    assert small == large == Counter({"BatchGetItem": 1, "Query": 4})  # the counters, one query per hit shard
    assert requests.items_read <= SHARDS + HIT_SHARDS * TOP_HITS  # 50 pathways were reused: five a shard read
    assert library.stats().total == 200 and len(library.stats().top_hits) == 5


def test_a_demoted_pathway_leaves_the_top_hits_and_its_family_counts(
    services: Services, qualifying_flow: MakeFlow
) -> None:
    library = PathwayLibrary(services)
    hit_once = PathwayExtractor(services).extract(qualifying_flow(flow_id(1), "ref/1"), [], "s:t").pathway_id
    assert hit_once is not None
    library.hit("user:x", hit_once)
    later = services.clock() + timedelta(days=200)
    services.clock = lambda: later
    assert run_job("pathway_decay", services)["demoted_stale"] == 1
    stats = library.stats()
    assert (stats.active, stats.demoted, stats.top_hits, stats.by_trigger_type) == (0, 1, [], {})
    assert stats.maturity_by_trigger_type == {"user_question": "sparse"}


def forget_the_counters(services: Services) -> None:
    """An upgraded deployment: pathways written by the previous version have no counters and no hit shard."""
    db, table = services.aws.dynamodb, services.aws.table_name("pathways")
    for item in db.scan(TableName=table)["Items"]:
        key = {"pathway_id": item["pathway_id"]}
        if item["pathway_id"]["S"].startswith(KEY_PREFIX):
            db.delete_item(TableName=table, Key=key)
        else:
            db.update_item(TableName=table, Key=key, UpdateExpression="REMOVE hit_shard")


def test_the_recount_rebuilds_missing_counters_and_the_top_hits_index(
    services: Services, qualifying_flow: MakeFlow
) -> None:
    library = PathwayLibrary(services)
    ids = [
        PathwayExtractor(services).extract(qualifying_flow(flow_id(n), f"r/{n}"), [], "s:t").pathway_id
        for n in range(6)
    ]
    for _ in range(3):
        library.hit("user:x", ids[0])  # type: ignore[arg-type]
    run_job("pathway_embedding_backfill", services)
    forget_the_counters(services)
    assert (library.stats().total, library.stats().top_hits) == (0, [])
    assert PathwayStats(services).recount() == {
        "active": 6, "embedded": 6, "family:user_question": 6, "high:user_question": 1,
        "model:hash_bucket_v1": 6, "total": 6, "type:user_question": 6,
    }  # fmt: skip
    stats = library.stats()
    assert stats.model_dump() == recounted(services) and stats.maturity_by_trigger_type == {"user_question": "mature"}
    assert [t.pathway_id for t in stats.top_hits] == [ids[0]]


def test_degraded_models_name_the_models_in_use_whose_vectors_are_degraded(
    services: Services, qualifying_flow: MakeFlow, monkeypatch: pytest.MonkeyPatch, load_function: Any,
    rest_event: Any, lambda_context: Any,
) -> None:  # fmt: skip
    PathwayExtractor(services).extract(qualifying_flow(flow_id(1), "r/1"), [], "s:t")
    run_job("pathway_embedding_backfill", services)
    monkeypatch.setattr("flowledger.pathways.stats.DEGRADED_MODELS", frozenset({"hash_bucket_v1", "unused_model"}))
    handler = load_function("reasoning").handler
    response = handler(rest_event("GET", "/admin/v1/reasoning/pathways/stats", user_arn=ADMIN), lambda_context)
    stats = json.loads(response["body"])
    assert response["statusCode"] == 200 and stats["by_model"] == {"hash_bucket_v1": 1}
    assert stats["degraded_models"] == ["hash_bucket_v1"]  # in use and degraded; unused_model is not in use
