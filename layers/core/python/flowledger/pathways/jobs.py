"""The pathway jobs: embedding backfill with snapshot publication (hourly) and decay (daily)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from flowledger.errors import ConditionFailed
from flowledger.ids import new_id
from flowledger.ledger.events import AuditEntry, parse_timestamp, timestamp
from flowledger.ledger.row_failures import ROW_ERRORS, UNEXPECTED, RowFailures
from flowledger.pathways.matcher import query_text
from flowledger.pathways.models import Pathway
from flowledger.pathways.snapshot import SnapshotRows, SnapshotStore
from flowledger.pathways.stats import Counted, counters_of, moved
from flowledger.pathways.store import PathwayStore, pack_vector, to_pathway
from flowledger.services import Services

EMBED_BATCH = 64
BACKFILL_ACTOR = "system:pathway_embedding_backfill"
DECAY_ACTOR = "system:pathway_decay"


def _lifecycle(services: Services, job: str, phase: str, payload: dict[str, Any] | None = None) -> None:
    services.ledger.append(
        AuditEntry(
            action=f"memory.job.{job}.{phase}",
            actor=f"system:{job}",
            subject=f"job:{job}",
            payload=payload or {},
        )
    )


def _run(services: Services, job: str, body: Callable[[], dict[str, int]]) -> dict[str, int]:
    """started, then completed with the counts, or error (and the exception goes on)."""
    _lifecycle(services, job, "started")
    try:
        result = body()
    except Exception as exc:
        _lifecycle(services, job, "error", {"error": type(exc).__name__})
        raise
    _lifecycle(services, job, "completed", dict(result))
    return result


def backfill_job(services: Services) -> dict[str, int]:
    """Embed active pathways the current model has not embedded, then publish each family's snapshot.

    Idempotent: a pathway already embedded by this model is left alone, and the update is
    conditional on that, so two runs at once embed each pathway once. An item that no longer reads
    as a pathway is logged by id, counted in ``skipped`` and left out of the snapshot. For the same
    reason a run stopped by a fault resumes: the next one embeds only what is still un-embedded, and
    publishes the snapshots the stopped run did not reach.
    """
    return _run(services, "pathway_embedding_backfill", lambda: _backfill(services))


def _backfill(services: Services) -> dict[str, int]:
    model = services.pathway_embeddings
    store = PathwayStore.of(services)
    # The snapshot is "as of" before the scan: whatever changes during it is read as a change since.
    as_of = timestamp(services.clock())
    families: dict[str, SnapshotRows] = {}
    todo: list[Pathway] = []
    vectors: dict[str, bytes] = {}
    skips = RowFailures(services, "pathway_embedding_backfill", "pathway")
    for pathway, vector in skips.readable(store.scan(), to_pathway):
        family = families.setdefault(pathway.trigger_type, SnapshotRows(model.name, pathway.trigger_type))
        if not pathway.active:
            continue
        if vector is None or pathway.embedding_model != model.name:
            todo.append(pathway)
        else:
            vectors[pathway.pathway_id] = vector
        family.ids.append(pathway.pathway_id)
        family.refs.append(pathway.trigger_ref)
        family.hit_counts.append(pathway.hit_count)
        family.last_activity.append(pathway.last_hit_at or pathway.created_at)
    embedded = 0
    for start in range(0, len(todo), EMBED_BATCH):
        batch = todo[start : start + EMBED_BATCH]
        for pathway, values in zip(
            batch, model.embed([query_text(p.trigger_type, p.trigger_ref) for p in batch]), strict=True
        ):
            try:
                packed = pack_vector(values)
                if _store_embedding(services, store, pathway, model.name, packed):
                    embedded += 1
            except ROW_ERRORS as exc:  # one pathway that cannot be stored fails alone (audited)
                skips.record(pathway.pathway_id, UNEXPECTED, exc)
                continue
            vectors[pathway.pathway_id] = packed
    snapshots = SnapshotStore.of(services)
    for family in families.values():
        family.vectors = [vectors.get(pathway_id) for pathway_id in family.ids]
        version = new_id("sv")
        snapshots.publish(family, version, as_of)
        services.ledger.append(
            AuditEntry(
                action="reasoning.pathway.snapshot_published",
                actor=BACKFILL_ACTOR,
                subject=f"family:{family.trigger_type}",
                payload={"version": version, "pathways": len(family.ids), "model": model.name},
            )
        )
    return {
        "embedded": embedded,
        "families": len(families),
        "pathways": sum(len(f.ids) for f in families.values()),
        "skipped": skips.count,
        "rows_failed": skips.count,
    }


def _store_embedding(services: Services, store: PathwayStore, pathway: Pathway, model: str, packed: bytes) -> bool:
    # Conditional on the model it had when read, so the counters move from that model to this one.
    previous = pathway.embedding_model
    embedded = Counted.of(pathway.model_copy(update={"embedding_model": model}))
    try:
        services.ledger.append(
            AuditEntry(
                action="reasoning.pathway.embedded",
                actor=BACKFILL_ACTOR,
                subject=f"pathway:{pathway.pathway_id}",
                payload={"model": model, "previous_model": pathway.embedding_model},
            ),
            [
                {
                    "Update": {
                        "TableName": store.table,
                        "Key": {"pathway_id": {"S": pathway.pathway_id}},
                        "UpdateExpression": "SET embedding = :v, embedding_model = :m, changed_at = :now",
                        "ConditionExpression": "attribute_exists(pathway_id) AND attribute_not_exists(demoted_at) AND "
                        + ("attribute_not_exists(embedding_model)" if previous is None else "embedding_model = :was"),
                        "ExpressionAttributeValues": {
                            ":v": {"B": packed},
                            ":m": {"S": model},
                            ":now": {"S": timestamp(services.clock())},
                            **({":was": {"S": previous}} if previous is not None else {}),
                        },
                    }
                },
                *counters_of(services).update_item(moved(Counted.of(pathway), embedded), pathway.pathway_id),
            ],
        )
    except ConditionFailed:
        return False  # demoted meanwhile, or another run embedded it first (the next run sees which)
    return True


def decay_job(services: Services) -> dict[str, int]:
    """Demote cold and stale pathways: non-destructive (``demoted_at`` + ``demotion_reason``), idempotent.

    An item that no longer reads as a pathway is logged by id, counted in ``skipped`` and left alone.

    Resumes where a fault stopped it, with no cursor: each demotion is one transaction with its event,
    conditional on ``demoted_at`` being absent, and the scan passes over demoted pathways. A run stopped
    midway (throttled, or an answer lost after the write applied) leaves each pathway demoted with its
    event or untouched; the next run demotes the untouched ones only (tests/integration/test_job_resume.py).
    """
    return _run(services, "pathway_decay", lambda: _decay(services))


def _decay(services: Services) -> dict[str, int]:
    settings = services.settings
    now = services.clock()
    cold_before = timestamp(now - timedelta(days=settings.pathway_cold_days))
    stale_before = timestamp(now - timedelta(days=settings.pathway_stale_days))
    cold_reason = f"cold_no_hits_{settings.pathway_cold_days}d"
    stale_reason = f"stale_no_recent_hits_{settings.pathway_stale_days}d"
    store = PathwayStore.of(services)
    counts = {"scanned": 0, "demoted_cold": 0, "demoted_stale": 0}
    skips = RowFailures(services, "pathway_decay", "pathway")
    for pathway, _ in skips.readable(store.scan(), to_pathway):
        counts["scanned"] += 1
        if not pathway.active:
            continue
        if pathway.hit_count == 0 and pathway.created_at < cold_before:
            reason, key = cold_reason, "demoted_cold"
        elif pathway.last_hit_at is not None and pathway.last_hit_at < stale_before:
            reason, key = stale_reason, "demoted_stale"
        else:
            continue
        try:
            demoted = _demote(services, store, pathway, reason)
        except ROW_ERRORS as exc:  # one pathway that cannot be demoted fails alone (audited)
            skips.record(pathway.pathway_id, UNEXPECTED, exc)
            continue
        counts[key] += demoted
    return {**counts, "skipped": skips.count, "rows_failed": skips.count}


def _demote(services: Services, store: PathwayStore, pathway: Pathway, reason: str) -> bool:
    now = services.clock()
    model = pathway.embedding_model
    age_days = int((now - parse_timestamp(pathway.created_at)).total_seconds() // 86400)
    try:
        services.ledger.append(
            AuditEntry(
                action="reasoning.pathway.demoted",
                actor=DECAY_ACTOR,
                subject=f"pathway:{pathway.pathway_id}",
                payload={
                    "pathway_id": pathway.pathway_id,
                    "reason": reason,
                    "hit_count": pathway.hit_count,
                    "age_days": age_days,
                    "trigger_type": pathway.trigger_type,
                },
            ),
            [
                {
                    "Update": {
                        "TableName": store.table,
                        "Key": {"pathway_id": {"S": pathway.pathway_id}},
                        # Out of the top-hits index too: a demoted pathway is no longer reused.
                        "UpdateExpression": (
                            "SET demoted_at = :now, demotion_reason = :reason, changed_at = :now REMOVE hit_shard"
                        ),
                        # Not if it was hit since it was read: a reuse keeps it. And only with the model it
                        # was read with, so the counters take it from that model.
                        "ConditionExpression": "attribute_not_exists(demoted_at) AND hit_count = :seen AND "
                        + ("attribute_not_exists(embedding_model)" if model is None else "embedding_model = :model"),
                        "ExpressionAttributeValues": {
                            ":now": {"S": timestamp(now)},
                            ":reason": {"S": reason},
                            ":seen": {"N": str(pathway.hit_count)},
                            **({":model": {"S": model}} if model is not None else {}),
                        },
                    }
                },
                *counters_of(services).update_item(
                    moved(Counted.of(pathway), Counted.of(pathway)._replace(active=False)), pathway.pathway_id
                ),
            ],
        )
    except ConditionFailed:
        return False
    return True
