"""``GET /api/chat/sessions``: the caller's own sessions, most recently active first, paginated.

Turns go through the chat app (the offline model) on moto, so the session headers are the ones a
real turn writes; the list reads them through the sparse ``by_owner`` index, never a scan.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from flowledger.api.chat_app import create_app
from flowledger.services import Services

pytestmark = pytest.mark.anyio


def ticking(start: datetime) -> Callable[[], datetime]:
    """A clock one second further on at every reading: each turn is strictly later than the last."""
    moments = iter(start + timedelta(seconds=n) for n in range(1_000_000))
    return lambda: next(moments)


@pytest.fixture
def app_services(services: Services) -> Services:
    return dataclasses.replace(services, clock=ticking(datetime(2026, 5, 1, tzinfo=UTC)))


def client(app: Any, sub: str, scope: str = "chat") -> httpx.AsyncClient:
    context = {"authorizer": {"sub": sub, "scope": scope, "patient_id": ""}}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://chat.test",
        headers={"x-amzn-request-context": json.dumps(context)},
        timeout=30,
    )


async def turn(http: httpx.AsyncClient, query: str, session_id: str | None = None) -> str:
    body = {"query": query, **({"session_id": session_id} if session_id else {})}
    response = await http.post("/api/chat", json=body, headers={"accept": "application/json"})
    assert response.status_code == 200, response.text
    return str(response.json()["session_id"])


async def every_page(http: httpx.AsyncClient, limit: int) -> list[dict[str, Any]]:
    pages, cursor = [], None
    while True:
        response = await http.get(
            "/api/chat/sessions", params={"limit": limit, **({"cursor": cursor} if cursor else {})}
        )
        assert response.status_code == 200, response.text
        pages.append(response.json())
        cursor = response.json()["next_cursor"]
        if not cursor:
            return pages


async def test_the_callers_sessions_most_recently_active_first_in_pages(app_services: Services) -> None:
    app = create_app(lambda: app_services)
    async with client(app, "alice") as alice, client(app, "bob") as bob:
        first = await turn(alice, "  hello\nthere  ")
        second = await turn(alice, "thanks")
        third = await turn(alice, "hi")
        bobs = await turn(bob, "hello from bob")
        await turn(alice, "and again", first)  # the first session is now the most recently active
        pages = await every_page(alice, 2)
        bob_pages = await every_page(bob, 50)
    assert [len(p["sessions"]) for p in pages][:2] == [2, 1]
    sessions = [s for p in pages for s in p["sessions"]]
    assert [s["session_id"] for s in sessions] == [first, third, second]
    # The title is the first question on one line, not the latest one.
    assert sessions[0]["title"] == "hello there"
    assert sessions[0]["created_at"] < sessions[0]["last_active_at"]
    assert sessions[1]["last_active_at"] > sessions[2]["last_active_at"]
    assert [s["session_id"] for p in bob_pages for s in p["sessions"]] == [bobs]
    assert '"owner"' not in json.dumps(pages)


async def test_the_list_is_one_query_on_the_owner_index(app_services: Services) -> None:
    app = create_app(lambda: app_services)
    calls: list[tuple[str, dict[str, Any]]] = []

    def record(event_name: str, params: dict[str, Any], **_: Any) -> None:
        calls.append((event_name.rsplit(".", 1)[-1], params))

    async with client(app, "alice") as alice:
        await turn(alice, "hello")
        app_services.aws.dynamodb.meta.events.register("before-call.dynamodb.*", record)
        try:
            response = await alice.get("/api/chat/sessions")
        finally:
            app_services.aws.dynamodb.meta.events.unregister("before-call.dynamodb.*", record)
    assert response.status_code == 200 and len(response.json()["sessions"]) == 1
    assert [name for name, _ in calls] == ["Query"]
    assert json.loads(calls[0][1]["body"])["IndexName"] == "by_owner"


async def test_a_cursor_never_leads_into_another_users_sessions(app_services: Services) -> None:
    app = create_app(lambda: app_services)
    async with client(app, "alice") as alice, client(app, "bob") as bob:
        for query in ("hello", "hi", "thanks"):
            await turn(alice, query)
        mine = await turn(bob, "hello from bob")  # newer than every session of alice's
        page = (await alice.get("/api/chat/sessions", params={"limit": 1})).json()
        assert page["next_cursor"]
        # Bob hands in alice's cursor: he reads his own partition from that position, never hers.
        response = await bob.get("/api/chat/sessions", params={"cursor": page["next_cursor"]})
    assert response.status_code == 200
    assert all(s["session_id"] == mine for s in response.json()["sessions"])
    assert response.json()["sessions"] == []  # bob's one session is newer than alice's cursor position


def _cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "0"},
        {"limit": "51"},
        {"limit": "ten"},
        {"cursor": "not base64 !"},
        {"cursor": _cursor({"session_id": "ses_01JD0000000000000000000000"})},
        {"cursor": _cursor(["not-a-session", "2026-05-01T00:00:00.000000Z"])},
        {"cursor": _cursor(["ses_01JD0000000000000000000000", ""])},
    ],
    ids=["limit-0", "limit-51", "limit-text", "cursor-garbage", "cursor-object", "cursor-bad-session", "cursor-empty"],
)
async def test_bad_limits_and_cursors_are_refused_with_a_message(
    app_services: Services, params: dict[str, str]
) -> None:
    app = create_app(lambda: app_services)
    async with client(app, "alice") as alice:
        response = await alice.get("/api/chat/sessions", params=params)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "invalid_input" and ("limit" in body["message"] or "cursor" in body["message"])


async def test_the_list_needs_the_chat_scope(app_services: Services) -> None:
    app = create_app(lambda: app_services)
    async with client(app, "alice", scope="documents") as alice:
        response = await alice.get("/api/chat/sessions")
    assert response.status_code == 403
