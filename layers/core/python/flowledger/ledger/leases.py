"""Chains leased to writers, so that no two writers append to one chain and none cancels another's write.

An append is a transaction conditional on the head its writer read. Writers that share a chain cancel
each other (and DynamoDB bills the cancelled transactions), and a chain takes one append per round trip
however many writers wait on it. A writer that holds a lease on its chain has it to itself: its cached
head stays current, every append is one request that commits, and the ledger's throughput grows with
its writers as long as there are more chains than writers (``FLOWLEDGER_LEDGER_SHARDS``).

A lease is one item per chain in the ``ledger_leases`` table: its holder (one writer: a thread of a
process) and until when it holds it. It is claimed and renewed by a conditional put that succeeds only
when the chain is free, its lease has run out, or the writer already holds it, and released by a
conditional delete. Leases only spread the load: the ledger's safety never rests on them. Every append
is still conditional on its position being free, so a writer whose lease ran out while it was frozen
(a Lambda environment between invocations) and a writer that found no free chain and shares one cannot
fork or gap a chain; they lose a race, and move.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

LEASE_SECONDS = 60.0  # how long a claimed chain stays its writer's without a renewal
# Chains a writer tries before it shares one: with a quarter more chains than writers a claim fails all 16 tries
# about once in 36 claims, and that writer shares a chain until its next try, a lease later.
CLAIM_TRIES = 16
_LOST = ("ConditionalCheckFailedException", "TransactionConflictException")  # another writer has it, or is taking it
_FREE = "attribute_not_exists(chain_id) OR #until < :now OR holder = :me"


class ChainLeases:
    """Claims, renews and releases chains' leases for writers named by a random holder id."""

    def __init__(
        self,
        dynamodb: Any,
        table_name: str,
        seconds: float = LEASE_SECONDS,
        tries: int = CLAIM_TRIES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if seconds <= 0:
            raise ValueError("a lease lasts a positive number of seconds")
        self._db = dynamodb
        self._table = table_name
        self.seconds = seconds
        self._tries = tries
        self._clock = clock

    def now(self) -> float:
        """The time leases are reckoned in (epoch seconds): wall time, not the ledger's clock for events."""
        return self._clock()

    def claim(self, holder: str, candidates: Sequence[str], now: float) -> tuple[str, float] | None:
        """One of ``candidates`` leased to ``holder`` and until when, trying up to ``tries`` of them at random;
        None when all those were held."""
        for chain_id in random.sample(candidates, min(self._tries, len(candidates))):
            until = self.renew(holder, chain_id, now)
            if until is not None:
                return chain_id, until
        return None

    def renew(self, holder: str, chain_id: str, now: float) -> float | None:
        """Hold ``chain_id`` for another ``seconds`` from ``now``: the new end, or None when another writer holds it."""
        until = now + self.seconds
        try:
            self._db.put_item(
                TableName=self._table,
                Item={"chain_id": {"S": chain_id}, "holder": {"S": holder}, "until": {"N": f"{until:.3f}"}},
                ConditionExpression=_FREE,
                ExpressionAttributeNames={"#until": "until"},
                ExpressionAttributeValues={":now": {"N": f"{now:.3f}"}, ":me": {"S": holder}},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _LOST:
                return None
            raise
        return until

    def release(self, holder: str, chain_id: str) -> None:
        """Give ``chain_id`` back, if ``holder`` still holds it, so the next writer need not wait out the lease."""
        try:
            self._db.delete_item(
                TableName=self._table,
                Key={"chain_id": {"S": chain_id}},
                ConditionExpression="holder = :me",
                ExpressionAttributeValues={":me": {"S": holder}},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in _LOST:
                raise
