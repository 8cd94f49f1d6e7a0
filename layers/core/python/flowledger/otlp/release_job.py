"""The ``otlp_release`` job: spans that waited their full time for a parent (``otlp.waiting``) in flows no
request has touched since are written under their flow, marked orphan, by their own writer."""

from __future__ import annotations

from typing import Any

from flowledger.services import Services


def release_job(services: Services) -> dict[str, Any]:
    """Release every flow's spans whose wait is over; how many flows, spans written and spans refused."""
    # Imported here: the OTLP messages load only when there is work, not with every job of the jobs function.
    from flowledger.otlp.ingest import FlowTally, release
    from flowledger.otlp.waiting import WaitingRoom
    from flowledger.reasoning.service import FlowService

    room, flows, now = WaitingRoom(services), FlowService(services), services.clock().timestamp()
    released = refused = count = 0
    for flow_id in room.due_flows(now):
        tally = FlowTally()
        release(flows, room, flow_id, now, tally)
        count, released, refused = count + 1, released + tally.released, refused + tally.released_refused
    return {"flows": count, "released": released, "refused": refused}
