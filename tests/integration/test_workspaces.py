"""Workspaces through the local gateway (real token verifier, the deployed documents function) on moto:
one personal workspace each, members with roles that owners manage, revocation that takes effect
at once, public visibility distinct from listing, and nothing written by a refused change."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from flowledger.api.registry import capability_handler, rest_routes
from flowledger.api.tokens import TokenVerifier, mint_token
from flowledger.chat.runs import RunStore
from flowledger.identity import Principal
from flowledger.local.datadir import LOCAL_AUDIENCE, LOCAL_ISSUER, DataDir
from flowledger.local.functions import LocalLambdaContext
from flowledger.local.gateway import LocalGateway
from flowledger.local.sigv4 import SigV4Verifier
from flowledger.services import Services, bootstrap
from flowledger.workspaces.service import WorkspaceService

BASE = "http://gateway.test"


class InProcessFunctions:
    """The deployed handlers, invoked in this process one at a time."""

    async def invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any]:
        return capability_handler(function)(event, LocalLambdaContext(function, "req"))  # type: ignore[arg-type]


@dataclass
class Api:
    """Calls through the local gateway as a named user with the ``documents`` scope."""

    gateway: LocalGateway
    data_dir: DataDir
    services: Services

    def token(self, sub: str, scopes: tuple[str, ...] = ("documents",)) -> str:
        return mint_token(
            private_key_pem=self.data_dir.private_key_pem(),
            kid=self.data_dir.key_id(),
            issuer=LOCAL_ISSUER,
            audience=LOCAL_AUDIENCE,
            sub=sub,
            scopes=list(scopes),
        )

    def call(self, sub: str, method: str, path: str, body: Any = None, **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token(sub)}", "Accept": "application/json"}
        content = b""
        if body is not None:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"

        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.gateway)
            async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
                return await client.request(method, path, content=content, headers=headers, params=params or None)

        return asyncio.run(send())

    def events(self, action: str) -> list[Any]:
        ledger = self.services.ledger
        return [e for c in ledger.chain_ids() for e in ledger.read_chain(c) if e.action == action]


def make_api(services: Services, data_dir: DataDir, jwks_url: str) -> Api:
    """The local gateway in front of the deployed functions, verifying tokens against the loopback JWKS."""
    gateway = LocalGateway(
        routes=rest_routes(),
        functions=InProcessFunctions(),
        tokens=TokenVerifier(jwks_url, LOCAL_ISSUER, LOCAL_AUDIENCE),
        sigv4=SigV4Verifier(data_dir.admin_credentials()),
    )
    return Api(gateway, data_dir, services)


@pytest.fixture(name="api")
def workspaces_api(services: Services, data_dir: DataDir, jwks_url: str) -> Api:
    return make_api(services, data_dir, jwks_url)


def workspace(api: Api, owner: str, **body: Any) -> str:
    response = api.call(owner, "POST", "/api/workspaces", {"name": "Team notes", "kind": "group", **body})
    assert response.status_code == 201, response.text
    return str(response.json()["workspace_id"])


def member(api: Api, owner: str, workspace_id: str, user: str, role: str) -> httpx.Response:
    return api.call(owner, "PUT", f"/api/workspaces/{workspace_id}/members/{user}", {"role": role})


def user(sub: str) -> Principal:
    return Principal(kind="user", id=sub, scopes=frozenset({"documents"}))


def test_each_user_has_one_personal_workspace(api: Api) -> None:
    first = api.call("ann", "POST", "/api/workspaces", {"kind": "personal", "name": "Mine"})
    assert first.status_code == 201 and first.json()["owner"] == "ann" and first.json()["role"] == "owner"
    again = api.call("ann", "POST", "/api/workspaces", {"kind": "personal", "name": "Mine too"})
    assert again.status_code == 409 and again.json()["error"] == "conflict"
    assert api.call("bob", "POST", "/api/workspaces", {"kind": "personal", "name": "Mine"}).status_code == 201
    assert len(api.events("documents.workspace.created")) == 2
    personal = first.json()["workspace_id"]
    assert member(api, "ann", personal, "bob", "viewer").status_code == 409  # a personal workspace has no members


def test_only_owners_manage_members_and_a_viewer_reads(api: Api) -> None:
    workspace_id = workspace(api, "ann")
    assert api.call("bob", "GET", f"/api/workspaces/{workspace_id}").status_code == 404  # not a member: no such
    assert member(api, "ann", workspace_id, "bob", "editor").status_code == 200
    read = api.call("bob", "GET", f"/api/workspaces/{workspace_id}")
    assert read.status_code == 200 and read.json()["role"] == "editor"
    refused = member(api, "bob", workspace_id, "carol", "viewer")
    assert refused.status_code == 403 and "owner" in refused.json()["message"]
    event = api.events("documents.workspace.member_added")
    assert [(e.actor, e.subject, e.refs, e.payload["role"]) for e in event] == [
        ("user:ann", f"workspace:{workspace_id}", {"user_id": "bob"}, "editor")
    ]


def test_a_revoked_member_loses_access_at_once(api: Api) -> None:
    workspace_id = workspace(api, "ann")
    member(api, "ann", workspace_id, "bob", "viewer")
    service = WorkspaceService(api.services)
    assert service.may_read(user("bob"), f"workspace:{workspace_id}")
    assert f"workspace:{workspace_id}" in service.readable_scopes(user("bob"))
    revoked = api.call("ann", "DELETE", f"/api/workspaces/{workspace_id}/members/bob")
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    assert api.call("bob", "GET", f"/api/workspaces/{workspace_id}").status_code == 404
    assert not service.may_read(user("bob"), f"workspace:{workspace_id}")
    assert f"workspace:{workspace_id}" not in service.readable_scopes(user("bob"))
    assert api.call("ann", "DELETE", f"/api/workspaces/{workspace_id}/members/bob").status_code == 404
    [event] = api.events("documents.workspace.member_revoked")
    assert (event.actor, event.refs, event.payload) == ("user:ann", {"user_id": "bob"}, {"previous_role": "viewer"})


def test_a_workspace_keeps_at_least_one_owner(api: Api) -> None:
    workspace_id = workspace(api, "ann")
    assert member(api, "ann", workspace_id, "ann", "editor").status_code == 409
    assert api.call("ann", "DELETE", f"/api/workspaces/{workspace_id}/members/ann").status_code == 409
    assert member(api, "ann", workspace_id, "bob", "owner").status_code == 200
    # With a second owner, the first may step down; then bob is the last one.
    assert member(api, "ann", workspace_id, "ann", "viewer").status_code == 200
    assert api.call("bob", "DELETE", f"/api/workspaces/{workspace_id}/members/bob").status_code == 409
    assert member(api, "ann", workspace_id, "carol", "viewer").status_code == 403  # ann is a viewer now


def test_public_visibility_is_distinct_from_listing(api: Api) -> None:
    hidden = workspace(api, "ann", kind="public", name="Library", visible=False)
    assert api.call("bob", "GET", f"/api/workspaces/{hidden}").status_code == 404
    changed = api.call("ann", "PATCH", f"/api/workspaces/{hidden}", {"visible": True})
    assert changed.status_code == 200 and changed.json()["visible"] is True and changed.json()["listed"] is False
    seen = api.call("bob", "GET", f"/api/workspaces/{hidden}")
    assert seen.status_code == 200 and seen.json()["role"] is None  # readable by anyone, though not a member
    listing = api.call("bob", "GET", "/api/workspaces")
    assert hidden not in [w["workspace_id"] for w in listing.json()["workspaces"]]  # visible, not listed
    assert api.call("ann", "PATCH", f"/api/workspaces/{hidden}", {"listed": True}).status_code == 200
    assert hidden in [w["workspace_id"] for w in api.call("bob", "GET", "/api/workspaces").json()["workspaces"]]
    # Hiding it again also unlists it: bob can neither read nor see it.
    hide = api.call("ann", "PATCH", f"/api/workspaces/{hidden}", {"visible": False})
    assert hide.status_code == 200 and hide.json()["listed"] is False
    assert api.call("bob", "GET", f"/api/workspaces/{hidden}").status_code == 404
    assert hidden not in [w["workspace_id"] for w in api.call("bob", "GET", "/api/workspaces").json()["workspaces"]]
    assert not WorkspaceService(api.services).may_read(user("bob"), f"workspace:{hidden}")
    payloads = [e.payload for e in api.events("documents.workspace.visibility_changed")]
    assert payloads == [
        {"visible": True, "listed": False},
        {"visible": True, "listed": True},
        {"visible": False, "listed": False},
    ]


def test_visibility_rules_are_4xx(api: Api) -> None:
    group = workspace(api, "ann")
    assert api.call("ann", "PATCH", f"/api/workspaces/{group}", {"visible": True}).status_code == 409
    public = workspace(api, "ann", kind="public", name="Library")
    bad = api.call("ann", "PATCH", f"/api/workspaces/{public}", {"visible": False, "listed": True})
    assert bad.status_code == 422
    assert api.call("ann", "PATCH", f"/api/workspaces/{public}", {}).status_code == 422
    made = api.call("ann", "POST", "/api/workspaces", {"kind": "group", "name": "x", "visible": True})
    assert made.status_code == 422
    assert api.events("documents.workspace.visibility_changed") == []


def test_the_listing_pages_through_memberships_then_listed_public_ones(api: Api) -> None:
    mine = [workspace(api, "ann", name=f"Team {n}") for n in range(3)]
    shared = workspace(api, "bob", name="Shared")
    member(api, "bob", shared, "ann", "viewer")
    listed = workspace(api, "carol", kind="public", name="Open", listed=True)
    also_member = workspace(api, "carol", kind="public", name="Open too", listed=True)
    member(api, "carol", also_member, "ann", "editor")
    workspace(api, "dan", name="Not ann's")
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(20):
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.call("ann", "GET", "/api/workspaces", **params).json()
        seen += [w["workspace_id"] for w in page["workspaces"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted([*mine, shared, listed, also_member])
    assert len(seen) == len(set(seen))  # a listed workspace ann belongs to comes once
    assert api.call("ann", "GET", "/api/workspaces", cursor="bm90LWEtY3Vyc29y").status_code == 422


def test_conversation_scopes_belong_to_the_session_owner(api: Api) -> None:
    RunStore(api.services).create(
        "ses_01JD0000000000000000000001", "run_01JD0000000000000000000001", "ann", "q", "m", True
    )
    service = WorkspaceService(api.services)
    scope = "conversation:ses_01JD0000000000000000000001"
    assert service.may_read(user("ann"), scope)
    assert not service.may_read(user("bob"), scope)
    assert not service.may_read(user("ann"), "conversation:ses_01JD0000000000000000000002")  # unused session
    assert not service.may_read(user("ann"), "tenant:everything")
    ids = ("ses_01JD0000000000000000000001", "ses_01JD0000000000000000000002")
    assert service.readable_scopes(user("ann"), ids) == [scope]
    assert service.readable_scopes(user("bob"), ids) == []


def test_a_name_dynamodb_cannot_store_is_422_and_writes_nothing(api: Api) -> None:
    response = api.call("ann", "POST", "/api/workspaces", b'{"kind": "group", "name": "bad \\ud800 name"}')
    assert response.status_code == 422 and response.json()["fields"][0]["loc"][-1] == "name"
    assert api.events("documents.workspace.created") == []


def test_a_failed_membership_write_leaves_nothing(api: Api) -> None:
    workspace_id = workspace(api, "ann")

    def refuse(**kwargs: Any) -> None:
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "injected"}}, "TransactWriteItems")

    # The function's own client (its bootstrap is cached while warm) refuses the audited write.
    client = bootstrap().aws.dynamodb
    client.meta.events.register("before-call.dynamodb.TransactWriteItems", refuse)
    try:
        assert member(api, "ann", workspace_id, "bob", "editor").status_code == 500
    finally:
        client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", refuse)
    assert api.call("bob", "GET", f"/api/workspaces/{workspace_id}").status_code == 404
    assert api.events("documents.workspace.member_added") == []


def test_an_owner_demoted_while_adding_a_member_adds_nobody(api: Api) -> None:
    workspace_id = workspace(api, "ann")
    member(api, "ann", workspace_id, "bob", "owner")
    dynamodb, table = api.services.aws.dynamodb, api.services.aws.table_name("workspaces")
    demoted: list[bool] = []

    def bob_demotes_ann_first(**kwargs: Any) -> None:
        # Between ann's role check and her write, a concurrent request makes her a viewer.
        if not demoted:
            demoted.append(True)
            dynamodb.update_item(
                TableName=table,
                Key={"workspace_id": {"S": workspace_id}, "sk": {"S": "member#ann"}},
                UpdateExpression="SET #r = :v",
                ExpressionAttributeNames={"#r": "role"},
                ExpressionAttributeValues={":v": {"S": "viewer"}},
            )

    client = bootstrap().aws.dynamodb
    client.meta.events.register("before-call.dynamodb.TransactWriteItems", bob_demotes_ann_first)
    try:
        assert member(api, "ann", workspace_id, "carol", "editor").status_code == 409
    finally:
        client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", bob_demotes_ann_first)
    assert api.call("carol", "GET", f"/api/workspaces/{workspace_id}").status_code == 404
