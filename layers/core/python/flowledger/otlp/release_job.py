"""The ``otlp_release`` job: spans that waited their full time for a parent (``otlp.waiting``) in flows no
request has touched since are written under their flow, marked orphan, by their own writer."""

from __future__ import annotations

from typing import Any

from flowledger.services import Services

MAX_ROUNDS = 25  # of MAX_RELEASED_PER_REQUEST spans each: a flow's most steps, with room


def release_job(services: Services) -> dict[str, Any]:
    """Release every flow's spans whose wait is over, and those a request left for it (more than it writes were
    waiting for its spans); how many flows, spans written and spans refused."""
    # Imported here: the OTLP messages load only when there is work, not with every job of the jobs function.
    from flowledger.otlp.ingest import FlowTally, release
    from flowledger.otlp.waiting import WaitingRoom
    from flowledger.reasoning.service import FlowService

    room, flows, now = WaitingRoom(services), FlowService(services), services.clock().timestamp()
    released = refused = count = 0
    for flow_id in room.due_flows(now):
        tally = FlowTally()
        for _ in range(MAX_ROUNDS):  # a page of held spans a round, while rounds make progress
            before = tally.released + tally.released_refused
            more = release(flows, room, flow_id, now, tally)
            if not more or tally.released + tally.released_refused == before:
                break
        if not more:
            room.flag(flow_id, False)
        count, released, refused = count + 1, released + tally.released, refused + tally.released_refused
    return {"flows": count, "released": released, "refused": refused}
