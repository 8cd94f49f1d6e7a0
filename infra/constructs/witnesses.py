"""Witnesses in the CDK app: the ones the checkpoint job submits to, and a witness deployed by this app.

``flowledger:witnesses`` (a JSON list of ``{"url", "vkey"}``) and ``flowledger:witnessQuorum`` (default:
every witness) become the jobs function's ``FLOWLEDGER_WITNESSES`` and ``FLOWLEDGER_WITNESS_QUORUM``.
``flowledger:witness`` (``{"name", "logs": [log verifier keys]}``) makes ``infra/witness_stack.py``'s stack.
Either, malformed, fails the synth with a message naming its key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aws_cdk import aws_lambda as lambda_
from constructs import Node
from pydantic import ValidationError

from flowledger.ledger.signed_note import NoteError, check_name
from flowledger.ledger.witnessing import WitnessEndpoint
from flowledger.witness.service import log_keys
from infra.constructs.context import context_object, json_context

WITNESSES_CONTEXT = "flowledger:witnesses"
QUORUM_CONTEXT = "flowledger:witnessQuorum"
WITNESS_CONTEXT = "flowledger:witness"


@dataclass(frozen=True)
class WitnessClients:
    """The witnesses the checkpoint job submits each checkpoint to, and the quorum it needs."""

    witnesses: tuple[WitnessEndpoint, ...] = ()
    quorum: int | None = None

    @classmethod
    def from_context(cls, node: Node) -> WitnessClients:
        value = json_context(node, WITNESSES_CONTEXT, expected='a JSON list of {"url", "vkey"}')
        if value is None:
            value = []
        if not isinstance(value, list):
            raise ValueError(f'{WITNESSES_CONTEXT} must be a JSON list of {{"url", "vkey"}}')
        try:
            witnesses = tuple(WitnessEndpoint.model_validate(entry) for entry in value)
        except ValidationError as exc:
            raise ValueError(f"{WITNESSES_CONTEXT}: {exc.errors()[0]['msg']}") from None
        quorum = node.try_get_context(QUORUM_CONTEXT)
        if quorum is None or quorum == "":
            return cls(witnesses)
        if not str(quorum).isdigit() or not 1 <= int(quorum) <= len(witnesses):
            raise ValueError(f"{QUORUM_CONTEXT} must be 1 to the number of {WITNESSES_CONTEXT} ({len(witnesses)})")
        return cls(witnesses, int(quorum))

    def apply(self, jobs: lambda_.Function) -> None:
        """Tell the jobs function (nothing when no witness is configured: the job then submits nowhere)."""
        if not self.witnesses:
            return
        jobs.add_environment("FLOWLEDGER_WITNESSES", json.dumps([w.model_dump() for w in self.witnesses]))
        if self.quorum is not None:
            jobs.add_environment("FLOWLEDGER_WITNESS_QUORUM", str(self.quorum))


@dataclass(frozen=True)
class WitnessSettings:
    """A witness this app deploys: its name, and the verifier keys of the logs it witnesses."""

    name: str
    logs: tuple[str, ...]

    @classmethod
    def from_context(cls, node: Node) -> WitnessSettings | None:
        value = context_object(node, WITNESS_CONTEXT, ("name", "logs"))
        if value is None:
            return None
        name, logs = value.get("name"), value.get("logs")
        if not isinstance(logs, list) or not logs or not all(isinstance(log, str) for log in logs):
            raise ValueError(f"{WITNESS_CONTEXT}: logs must be a non-empty list of the logs' verifier keys")
        try:
            check_name(str(name or ""))
            log_keys(logs)
        except NoteError as exc:
            raise ValueError(f"{WITNESS_CONTEXT}: {exc}") from None
        return cls(str(name), tuple(logs))
