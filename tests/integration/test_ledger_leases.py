"""Chains leased to writers: a writer keeps its chain, a lease that ran out is taken over, and no lease is needed
for a chain to stay whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flowledger.ledger.chain import verify_chain
from flowledger.ledger.events import AuditEntry, parse_event_id
from flowledger.ledger.leases import ChainLeases
from flowledger.ledger.store import Ledger
from flowledger.services import Services


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def writer(services: Services, clock: Clock, shards: int) -> Ledger:
    """A writer in a process of its own: its own head cache and its own lease."""
    table = services.aws.table_name("ledger_leases")
    leases = ChainLeases(services.aws.dynamodb, table, seconds=60, clock=lambda: clock.now.timestamp())
    return Ledger(services.aws.dynamodb, services.aws.table_name("ledger"), shards, clock, leases=leases)


def entry(actor: str) -> AuditEntry:
    return AuditEntry(action="reasoning.claims_pending_review.marked", actor=actor, subject=f"claim:{actor}")


def holders(services: Services) -> dict[str, str]:
    items = services.aws.dynamodb.scan(TableName=services.aws.table_name("ledger_leases"))["Items"]
    return {item["chain_id"]["S"]: item["holder"]["S"] for item in items}


def test_each_writer_keeps_a_chain_of_its_own_and_renews_it(services: Services) -> None:
    clock = Clock()
    first, second = writer(services, clock, 8), writer(services, clock, 8)
    chains = {first.append(entry("a")).chain_id, second.append(entry("b")).chain_id}
    for _ in range(3):  # past the lease's 60 s three times over: renewed as it goes
        clock.now += timedelta(seconds=40)
        chains |= {first.append(entry("a")).chain_id, second.append(entry("b")).chain_id}
    assert len(chains) == 2
    assert len(set(holders(services).values())) == 2


def test_a_lease_that_ran_out_is_taken_over_and_its_old_holder_moves(services: Services) -> None:
    clock = Clock()
    frozen, late = writer(services, clock, 1), writer(services, clock, 1)
    assert frozen.append(entry("frozen")).chain_id == "chain-000"
    first_holder = holders(services)["chain-000"]
    late.append(entry("late"))  # the only chain is held: it shares it, unleased, and the chain stays whole
    assert holders(services) == {"chain-000": first_holder}
    clock.now += timedelta(seconds=61)  # the first writer's environment was frozen past its lease
    late.append(entry("late"))  # and the other writer took the chain over
    new_holder = holders(services)["chain-000"]
    assert new_holder != first_holder
    frozen.append(entry("frozen"))  # its renewal is refused: it shares the chain, reading its head first
    assert holders(services) == {"chain-000": new_holder}
    chain = list(frozen.read_chain("chain-000"))
    assert [event.actor for event in chain] == ["frozen", "late", "late", "frozen"]
    assert verify_chain("chain-000", chain).bad is None


def test_a_writer_moving_off_a_lost_chain_gives_its_lease_back(services: Services) -> None:
    clock = Clock()
    mine, rival = writer(services, clock, 4), writer(services, clock, 4)
    taken = mine.append(entry("mine")).chain_id
    rival._writer.chain, rival._writer.until = taken, None  # a writer that found no free chain and shares this one
    rival._writer.claim_after = clock.now.timestamp() + 60
    rival.append(entry("rival"))
    moved = mine.append(entry("mine")).chain_id  # its cached head is stale: it loses, releases and claims anew
    assert moved != taken
    assert taken not in holders(services)
    assert [e.actor for e in mine.read_chain(taken)] == ["mine", "rival"]


def test_chains_past_the_thousandth_take_events_and_are_named_by_their_ids(services: Services) -> None:
    clock = Clock()
    ledger = writer(services, clock, 4096)
    assert ledger.chain_ids()[-1] == "chain-4095"
    ledger._writer.chain = "chain-1023"  # placed there, as a writer that leased it would be
    event = ledger.append(entry("past-a-thousand"))
    assert (event.chain_id, parse_event_id(event.event_id)) == ("chain-1023", ("chain-1023", 1))
    assert verify_chain("chain-1023", list(ledger.read_chain("chain-1023"))).bad is None
