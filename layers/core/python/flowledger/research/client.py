"""Client SDK for the loop's admin routes: async, SigV4-signed with botocore's signer, fail-soft.

Every method returns the response body, or None on a transport error or a non-2xx answer (logged
once per client), so calling agents never block on the queue.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

logger = logging.getLogger("flowledger.research.client")
SERVICE = "execute-api"


class MemoryClient:
    def __init__(
        self,
        base_url: str,
        region: str,
        credentials: Credentials | None = None,
        timeout_seconds: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if credentials is None:
            import botocore.session

            credentials = botocore.session.get_session().get_credentials()
        self._base_url = base_url.rstrip("/")
        self._signer = SigV4Auth(credentials, SERVICE, region)
        self._client = httpx.AsyncClient(timeout=timeout_seconds, transport=transport)
        self._warned = False

    async def aclose(self) -> None:
        await self._client.aclose()

    async def enqueue_deeper_research(
        self,
        *,
        idempotency_key: str,
        trigger_type: str,
        trigger_ref: str,
        reason: str,
        question_framing: str,
        dispatched_from_backlog: bool = False,
    ) -> dict[str, Any] | None:
        return await self._call(
            "POST",
            "/admin/v1/reasoning/research/deeper-request",
            {
                "idempotency_key": idempotency_key,
                "trigger_type": trigger_type,
                "trigger_ref": trigger_ref,
                "reason": reason,
                "question_framing": question_framing,
                "dispatched_from_backlog": dispatched_from_backlog,
            },
        )

    async def pull_next_research_request(self, trigger_type: str | None = None) -> dict[str, Any] | None:
        return await self._call(
            "POST", "/admin/v1/reasoning/research/backlog/next", {"trigger_type": trigger_type} if trigger_type else {}
        )

    async def complete_research_request(
        self, request_id: str, *, flow_id: str | None = None, error: str | None = None
    ) -> dict[str, Any] | None:
        body = {k: v for k, v in (("flow_id", flow_id), ("error", error)) if v}
        return await self._call("POST", f"/admin/v1/reasoning/research/backlog/{request_id}/complete", body)

    async def mark_claim_for_review(
        self, *, claim_id: str, rejection_summary: str, flow_id: str | None = None
    ) -> dict[str, Any] | None:
        body = {
            "claim_id": claim_id,
            "rejection_summary": rejection_summary,
            **({"flow_id": flow_id} if flow_id else {}),
        }
        return await self._call("POST", "/admin/v1/reasoning/claims-pending-review", body)

    async def list_claims_pending_review(self) -> dict[str, Any] | None:
        return await self._call("GET", "/admin/v1/reasoning/claims-pending-review", None)

    async def resolve_claim_review(
        self, claim_id: str, resolution: str, note: str | None = None
    ) -> dict[str, Any] | None:
        body = {"resolution": resolution, **({"note": note} if note else {})}
        return await self._call("PATCH", f"/admin/v1/reasoning/claims-pending-review/{claim_id}", body)

    async def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any] | None:
        data = json.dumps(body).encode() if body is not None else b""
        request = AWSRequest(
            method=method,
            url=f"{self._base_url}{path}",
            data=data,
            headers={"Content-Type": "application/json"} if body is not None else {},
        )
        self._signer.add_auth(request)
        try:
            response = await self._client.request(method, request.url, content=data, headers=dict(request.headers))
        except httpx.TransportError as exc:
            self._soft_fail(f"{method} {path}: {type(exc).__name__}")
            return None
        if response.status_code >= 300:
            self._soft_fail(f"{method} {path}: HTTP {response.status_code}")
            return None
        result: dict[str, Any] = response.json()
        return result

    def _soft_fail(self, what: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("memory client call failed (further failures are not logged): %s", what)
