"""GET /admin/v1/pathways through the reasoning function on moto: every pathway once across pages, each
with its radar, narrowed by family, status and trigger-ref prefix; IAM only; foreign cursors refused."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from flowledger.jobs import run_job
from flowledger.services import Services
from tests.integration.test_pathways import T0, Call, call, clock, flow, same_services

__all__ = ["call", "clock", "same_services"]  # the fixtures, shared with the library's other tests
PATH = "/admin/v1/pathways"


def walk(call: Call, limit: int, **query: str) -> tuple[list[dict[str, Any]], int]:
    """Every pathway the list gives, following its cursors, and the number of pages read."""
    found: list[dict[str, Any]] = []
    pages, cursor = 0, None
    while True:
        status, page = call("GET", PATH, limit=str(limit), **query, **({"cursor": cursor} if cursor else {}))
        assert status == 200, page
        found += page["pathways"]
        pages += 1
        cursor = page["next_cursor"]
        if not cursor:
            return found, pages


def test_pages_list_every_pathway_once_with_its_radar_and_the_filters_narrow_them(
    call: Call, services: Services, clock: Callable[[datetime], None]
) -> None:
    clock(T0)
    for ref in ("chat/cold", "chat/used", "intake/a", "intake/b"):
        flow(call, ref)
    every, pages = walk(call, 2)
    assert sorted(p["trigger_ref"] for p in every) == ["chat/cold", "chat/used", "intake/a", "intake/b"]
    assert pages >= 2  # it paged, and no pathway came twice
    assert set(every[0]["dimensions"]) == {"confidence", "coverage", "maturity", "recency", "consensus", "risk"}
    family, _ = walk(call, 3, trigger_type="user_question")
    assert sorted(p["pathway_id"] for p in family) == sorted(p["pathway_id"] for p in every)
    assert walk(call, 3, trigger_type="lab_trend")[0] == []
    assert sorted(p["trigger_ref"] for p in walk(call, 2, ref_prefix="intake/")[0]) == ["intake/a", "intake/b"]

    used = next(p["pathway_id"] for p in every if p["trigger_ref"] == "chat/used")
    for other in ("intake/a", "intake/b"):
        hit = next(p["pathway_id"] for p in every if p["trigger_ref"] == other)
        assert call("POST", f"/admin/v1/reasoning/pathways/{hit}/hit")[0] == 200
    assert call("POST", f"/admin/v1/reasoning/pathways/{used}/hit")[0] == 200
    clock(T0 + timedelta(days=31))
    assert run_job("pathway_decay", services)["demoted_cold"] == 1  # chat/cold: never reused
    demoted = walk(call, 10, status="demoted")[0]
    assert [(p["trigger_ref"], p["demotion_reason"]) for p in demoted] == [("chat/cold", "cold_no_hits_30d")]
    active = walk(call, 10, status="active", trigger_type="user_question", ref_prefix="chat/")[0]
    assert [p["trigger_ref"] for p in active] == ["chat/used"]


def test_the_list_needs_an_iam_principal_and_refuses_what_it_never_returned(call: Call) -> None:
    assert call("GET", PATH, admin=False)[0] == 403
    for query in (
        {"cursor": "bm90LWpzb24"},  # not JSON
        {"cursor": "WyJ4Il0="},  # ["x"]: no pathway id
        {"cursor": "WyJwd18wMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMCJd", "trigger_type": "user_question"},  # a scan's
        {"status": "asleep"},
        {"limit": "0"},
        {"trigger_type": "Not A Family"},
    ):
        status, body = call("GET", PATH, **query)
        assert status == 422, (query, body)
