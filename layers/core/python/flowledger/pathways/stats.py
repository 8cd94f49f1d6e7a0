"""The library's stats in a fixed number of requests, and the counters that make them so.

Every write that changes what the stats count adds its deltas to the library's counters
(``store/counters.py``) in its own transaction: an extraction (a new active pathway), an
embedding (by model), a hit that lifts a pathway to ``HIGH_HITS`` (maturity), a demotion. The stats
read them with one ``BatchGetItem`` and take the top hits from the sparse ``by_hits`` index, one
``Limit 5`` query per hit shard: ``1 + HIT_SHARDS`` requests, whatever the library's size.

Counted per pathway (``counted``): ``total`` and ``family:<type>`` always; ``demoted`` when demoted;
otherwise ``active``, ``type:<type>``, ``high:<type>`` at ``hit_count >= HIGH_HITS``, and ``embedded``
with ``model:<model>`` when embedded. Demoted pathways are never deleted, so every count is exact.

Counters of pathways written before they existed are missing: ``recount`` (run once after the
upgrade) rebuilds them and gives reused pathways the ``hit_shard`` the top-hits index needs.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
from collections import Counter
from typing import Any, NamedTuple

from flowledger.errors import ConditionFailed, LedgerContention
from flowledger.ledger.events import AuditEntry
from flowledger.llm.embeddings import DEGRADED_MODELS
from flowledger.pathways.models import Pathway, Stats, TopHit
from flowledger.pathways.radar import HIGH_HITS, maturity_of
from flowledger.pathways.store import PathwayStore, to_pathway
from flowledger.services import Services
from flowledger.store.counters import ShardedCounters
from flowledger.store.decoding import Skips

TOP_HITS = 5
HIT_SHARDS = 4
RECOUNT_ATTEMPTS = 5
RECOUNT_ACTOR = "system:pathway_recount"


class Counted(NamedTuple):
    """What of a pathway the stats count."""

    trigger_type: str
    active: bool
    embedding_model: str | None
    hit_count: int

    @classmethod
    def of(cls, pathway: Pathway) -> Counted:
        return cls(pathway.trigger_type, pathway.active, pathway.embedding_model, pathway.hit_count)


def counted(state: Counted) -> Counter[str]:
    """The counters one pathway in this state adds to (pure)."""
    family = state.trigger_type
    counts = Counter({"total": 1, f"family:{family}": 1})
    if not state.active:
        counts["demoted"] += 1
        return counts
    counts.update({"active": 1, f"type:{family}": 1})
    if state.hit_count >= HIGH_HITS:
        counts[f"high:{family}"] += 1
    if state.embedding_model is not None:
        counts.update({"embedded": 1, f"model:{state.embedding_model}": 1})
    return counts


def moved(before: Counted | None, after: Counted) -> dict[str, int]:
    """The counter deltas of a pathway going from ``before`` (None: a new one) to ``after`` (pure)."""
    deltas = Counter(counted(after))
    if before is not None:
        deltas.subtract(counted(before))
    return {name: delta for name, delta in deltas.items() if delta}


def counters_of(services: Services) -> ShardedCounters:
    """The library's counter shards, kept in the pathways table."""
    return ShardedCounters(services.aws.dynamodb, services.aws.table_name("pathways"), "pathway_id")


def hit_shard_of(pathway_id: str) -> str:
    """The ``by_hits`` partition of a pathway ("0".."3"): fixed per pathway, spread across pathways."""
    return str(hashlib.sha256(pathway_id.encode()).digest()[0] % HIT_SHARDS)


class PathwayStats:
    def __init__(self, services: Services) -> None:
        self._s = services
        self.store = PathwayStore.of(services)
        self.counters = counters_of(services)

    def stats(self) -> Stats:
        """Totals, models, families, maturity and the top hits, from the counters and the hit index."""
        totals = self.counters.read().totals

        def named(prefix: str) -> dict[str, int]:
            return {name.removeprefix(prefix): n for name, n in sorted(totals.items()) if name.startswith(prefix) and n}

        by_model, by_type, high = named("model:"), named("type:"), named("high:")
        return Stats(
            total=totals.get("total", 0),
            active=totals.get("active", 0),
            embedded=totals.get("embedded", 0),
            by_model=by_model,
            by_trigger_type=by_type,
            maturity_by_trigger_type={
                family: maturity_of(by_type.get(family, 0), high.get(family, 0)) for family in named("family:")
            },
            demoted=totals.get("demoted", 0),
            top_hits=self.top_hits(),
            degraded_models=sorted(model for model in by_model if model in DEGRADED_MODELS),
        )

    def top_hits(self) -> list[TopHit]:
        """The most reused active pathways (ties by id), from each hit shard's top ``TOP_HITS``."""
        found = []
        for shard in range(HIT_SHARDS):
            response = self._s.aws.dynamodb.query(
                TableName=self.store.table,
                IndexName="by_hits",
                KeyConditionExpression="hit_shard = :shard",
                ExpressionAttributeValues={":shard": {"S": str(shard)}},
                ScanIndexForward=False,
                Limit=TOP_HITS,
            )
            found += [
                TopHit(
                    pathway_id=item["pathway_id"]["S"],
                    trigger_type=item["trigger_type"]["S"],
                    hit_count=int(item["hit_count"]["N"]),
                )
                for item in response.get("Items", [])
            ]
        return heapq.nsmallest(TOP_HITS, found, key=lambda top: (-top.hit_count, top.pathway_id))

    # ---- the one-off recount ------------------------------------------------------------------------

    def recount(self, actor: str = RECOUNT_ACTOR) -> dict[str, int]:
        """Rebuild the counters from every pathway (a full, strongly consistent scan), audited; for upgrades.

        The replacement is conditional on no counted write having landed during the scan; when one did,
        the scan is repeated (``RECOUNT_ATTEMPTS``), then LedgerContention. Active reused pathways without
        ``hit_shard`` get it on the way, and demoted ones lose it, so the top-hits index holds them all.
        """
        skips = Skips("pathway_recount")
        for _ in range(RECOUNT_ATTEMPTS):
            seen = self.counters.read()
            counts: Counter[str] = Counter()
            for item in self.store.scan(consistent=True):
                pathway = next(skips.readable([item], lambda i: to_pathway(i)[0]), None)
                if pathway is None:
                    continue
                counts.update(counted(Counted.of(pathway)))
                self._place_in_hit_index(pathway, "hit_shard" in item)
            try:
                self._s.ledger.append(
                    AuditEntry(
                        action="memory.job.pathway_counters.recounted",
                        actor=actor,
                        subject="pathways:counters",
                        payload={
                            "total": counts["total"],
                            "active": counts["active"],
                            "embedded": counts["embedded"],
                            "skipped": skips.count,
                        },
                    ),
                    self.counters.replace_items(counts, seen),
                )
            except ConditionFailed:
                continue  # a write was counted during the scan: read again
            return {name: count for name, count in sorted(counts.items()) if count}
        raise LedgerContention("the library kept changing during the recount; nothing was replaced, retry")

    def _place_in_hit_index(self, pathway: Pathway, indexed: bool) -> None:
        """Give an active reused pathway its ``hit_shard``, take it from a demoted one (conditional, idempotent)."""
        wanted = pathway.active and pathway.hit_count > 0
        if wanted == indexed:
            return
        update: dict[str, Any] = {
            "TableName": self.store.table,
            "Key": {"pathway_id": {"S": pathway.pathway_id}},
        }
        if wanted:
            update |= {
                "UpdateExpression": "SET hit_shard = :shard",
                "ConditionExpression": "attribute_not_exists(demoted_at) AND hit_count > :zero",
                "ExpressionAttributeValues": {":shard": {"S": hit_shard_of(pathway.pathway_id)}, ":zero": {"N": "0"}},
            }
        else:
            update |= {"UpdateExpression": "REMOVE hit_shard", "ConditionExpression": "attribute_exists(demoted_at)"}
        # A pathway that changed meanwhile was placed by that change.
        with contextlib.suppress(self._s.aws.dynamodb.exceptions.ConditionalCheckFailedException):
            self._s.aws.dynamodb.update_item(**update)
