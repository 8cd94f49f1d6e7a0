"""Audited writes at 1 to 1,000 concurrent writers, on a model of DynamoDB: throughput, latency, waste.

The locked moto server (``ledger.py``) answers one request at a time, so it can count requests but not
show how the ledger behaves when a thousand Lambda environments write at once. This benchmark runs the
ledger's own append code (``flowledger.ledger.store.Ledger``) against ``dynamodb_model``: DynamoDB's
transactions, billing and per-partition limits in simulated time (its latencies are assumptions, stated
there). Each writer is one Lambda execution environment: a ``Ledger`` of its own (its own head cache and
lease) writing audited writes back to back.

Designs side by side: today's (16 chains, no leases), the same code with 1,024 chains, chains leased to
writers (``flowledger.ledger.leases``) with 1,024 chains (the most a witness takes), and with 2,048.
The model is calibrated against the real embedded store at one writer.

Targets, for the leased design at 1,000 writers: at least 10,000 audited writes/s, p99 at most 100 ms, and
at most 5 % of write units spent on cancelled transactions; and the calibration within 2 %. Exit 1 when
one is missed.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError
from dynamodb_model import Capacity, Engine, Latencies, ModelDynamoDB, ModelMeter, SdkRetries
from ledger import Meter

from flowledger.config import load_settings
from flowledger.errors import LedgerContention
from flowledger.ledger.events import AuditEntry
from flowledger.ledger.leases import ChainLeases
from flowledger.ledger.store import Ledger
from flowledger.local.datadir import EMBEDDED_CREDENTIALS
from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import build_services
from flowledger.store.provision import create_table
from flowledger.store.tables import table_spec

WRITERS = (1, 10, 100, 1000)
TODAY_CHAINS = 16  # FLOWLEDGER_LEDGER_SHARDS' default
CHAINS = 1024  # a chain for each of 1,000 writers, and the most a witness takes (WITNESSED_CHAINS)
# Amazon DynamoDB on-demand, Standard table class, us-east-1, since 1 November 2024 (aws.amazon.com/dynamodb/pricing):
# a million write request units (a transactional write takes 2 a KB) and a million read request units.
DOLLARS_PER_MILLION_WRU = 0.625
DOLLARS_PER_MILLION_RRU = 0.125
LEASE_SECONDS = 60.0
CALIBRATION_WRITES = 300
TARGET_RATE = 10_000  # audited writes/s at 1,000 writers
TARGET_P99_MS = 100.0
TARGET_CANCELLED_SHARE = 0.05
CALIBRATION_TOLERANCE = 0.02


def audited_write(table: str, writer: int, n: int) -> tuple[AuditEntry, list[dict[str, Any]]]:
    """A recorded step: the step's item in ``steps`` and its event, as the recorder writes each step of a flow.

    Each writer records one flow, so no index key is shared between writers (the model bills index writes but
    does not throttle them: a workload with one hot index key, say every item's status "pending", would be
    throttled there by DynamoDB first, whatever the ledger did).
    """
    flow_id = f"flow-{writer:04d}"
    item = {
        "flow_id": {"S": flow_id},
        "step_id": {"S": f"{n:08d}"},
        "created_at": {"S": "2026-12-06T12:00:00.000000Z"},
        "kind": {"S": "tool_call"},
        "name": {"S": "lookup_order"},
        "status": {"S": "completed"},
        "summary": {"S": "looked up the order's state and its last three events"},
    }
    entry = AuditEntry(
        action="reasoning.step.created",
        actor="arn:aws:iam::1:role/reasoning",
        subject=f"flow:{flow_id}",
        payload={"kind": "tool_call"},
    )
    return entry, [{"Put": {"TableName": table, "Item": item}}]


def throttling(exc: ClientError) -> bool:
    """Whether an error from ``append`` is DynamoDB refusing it for capacity: a transaction cancelled for
    throttling (never retried by the SDK), or a single-item request (a head read, a lease claim) still
    throttled after the SDK's retries."""
    error = exc.response.get("Error", {}).get("Code")
    reasons = {reason.get("Code") for reason in exc.response.get("CancellationReasons", [])}
    return error == "ProvisionedThroughputExceededException" or (
        error == "TransactionCanceledException" and "ThrottlingError" in reasons
    )


@dataclass(frozen=True)
class Design:
    name: str
    chains: int
    leased: bool = False

    def ledger(self, dynamodb: Any, tables: Callable[[str], str], clock: Any, sleep: Callable[[float], None]) -> Ledger:
        """This design's ledger for one writer, on ``dynamodb`` (the model or a real client)."""
        if not self.leased:
            return Ledger(dynamodb, tables("ledger"), self.chains, clock, sleep=sleep)
        # Leases are reckoned in the same (simulated) time as everything else.
        leases = ChainLeases(
            dynamodb, tables("ledger_leases"), seconds=LEASE_SECONDS, clock=lambda: clock().timestamp()
        )
        return Ledger(dynamodb, tables("ledger"), self.chains, clock, sleep=sleep, leases=leases)


@dataclass
class Result:
    design: Design
    writers: int
    seconds: float
    latencies: list[float] = field(default_factory=list)  # seconds, committed writes
    outcomes: Counter[str] = field(default_factory=Counter)  # committed, contention, throttled
    meter: ModelMeter = field(default_factory=ModelMeter)

    @property
    def committed(self) -> int:
        return self.outcomes["committed"]

    def per_write(self, value: float) -> float:
        return value / self.committed if self.committed else float("nan")

    @property
    def rate(self) -> float:
        return self.committed / self.seconds

    def percentile_ms(self, q: float) -> float:
        if len(self.latencies) < 2:
            return 1000 * self.latencies[0] if self.latencies else float("nan")
        return 1000 * statistics.quantiles(self.latencies, n=1000, method="inclusive")[round(q * 1000) - 1]

    @property
    def cancelled_share(self) -> float:
        return self.meter.wcu_cancelled / self.meter.wcu_total if self.meter.wcu_total else 0.0

    @property
    def hottest_wcu_per_second(self) -> float:
        return max(self.meter.partition_wcu.values(), default=0) / self.seconds


@dataclass(frozen=True)
class Setup:
    """What every simulated run shares: the model's assumptions and the run's shape."""

    latencies: Latencies
    capacity: Capacity
    retries: SdkRetries
    warmup: float
    think: float
    seed: int


def simulate(design: Design, writers: int, setup: Setup, seconds: float, writes: int | None = None) -> Result:
    """``writers`` writers on the model for ``warmup + seconds`` simulated seconds; the warm-up is not counted.

    With ``writes``, each writer stops after that many writes instead, and everything is counted.
    Writers start at random within the first half of the warm-up, as Lambda environments come up.
    """
    random.seed(setup.seed)  # the ledger's own choices (chains, backoff, leases) draw on `random`
    engine = Engine()
    model = ModelDynamoDB(
        engine, latencies=setup.latencies, capacity=setup.capacity, retries=setup.retries, seed=setup.seed
    )
    warmup = 0.0 if writes is not None else setup.warmup
    end = warmup + seconds
    result = Result(design, writers, seconds)

    def writer(number: int) -> None:
        ledger = design.ledger(model, str, engine.clock, engine.sleep)
        for n in itertools.count():
            if (writes is not None and n >= writes) or (writes is None and engine.now() >= end):
                return
            entry, domain = audited_write("steps", number, n)
            started = engine.now()
            try:
                ledger.append(entry, domain)
                outcome = "committed"
            except LedgerContention:
                outcome = "contention"
            except ClientError as exc:
                if not throttling(exc):
                    raise
                outcome = "throttled"
            if warmup <= engine.now() < end or writes is not None:
                result.outcomes[outcome] += 1
                if outcome == "committed":
                    result.latencies.append(engine.now() - started)
            if setup.think:
                engine.sleep(setup.think)

    def bookkeeper() -> None:
        """Opens the counted window at the end of the warm-up, and freezes the meter at its end."""
        engine.sleep(warmup)
        model.meter.reset()
        engine.sleep(seconds)
        result.meter = model.meter.copy()

    spread = random.Random(setup.seed + 1)
    for number in range(writers):
        engine.spawn(lambda number=number: writer(number), delay=spread.uniform(0, warmup / 2))  # type: ignore[misc]
    if writes is None:
        engine.spawn(bookkeeper)
    # The model keeps every item written, and Python's cyclic collector would walk that growing heap over and
    # over (half the wall time); the few cycles a run makes (caught exceptions) are collected once, after it.
    gc.disable()
    try:
        engine.run()
    finally:
        gc.enable()
        gc.collect()
    if writes is not None:
        result.meter = model.meter
        result.seconds = engine.now()
    return result


# -- Calibration against the real embedded store ---------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    design: Design
    real: tuple[float, float]  # requests per write, transactional WCU per write (Meter's rule)
    model: tuple[float, float]

    @property
    def agrees(self) -> bool:
        return all(abs(m - r) <= CALIBRATION_TOLERANCE * r for r, m in zip(self.real, self.model, strict=True))


def real_run(endpoint: str, design: Design, writes: int) -> tuple[float, float]:
    """One writer's ``writes`` audited writes on the locked moto server: requests and WCU (Meter) per write."""
    run_id = f"scale{design.chains}{'l' if design.leased else ''}{int(time.time())}"
    settings = load_settings(aws_endpoint_url=endpoint, resource_prefix=f"bench{run_id}", ledger_shards=design.chains)
    services = build_services(settings, EMBEDDED_CREDENTIALS)
    aws = services.aws
    for table in ("ledger", "steps", *(("ledger_leases",) if design.leased else ())):
        create_table(aws, table_spec(table))
    meter = Meter(aws.dynamodb)
    ledger = design.ledger(aws.dynamodb, aws.table_name, services.clock, time.sleep)
    for n in range(writes):
        entry, domain = audited_write(aws.table_name("steps"), 0, n)
        ledger.append(entry, domain)
    return sum(meter.calls.values()) / writes, meter.write_units / writes


def calibrate(designs: Sequence[Design], setup: Setup) -> list[Calibration]:
    server = LockedMotoServer()
    endpoint = server.start()
    try:
        found = []
        for design in designs:
            real = real_run(endpoint, design, CALIBRATION_WRITES)
            modelled = simulate(design, 1, setup, 0.0, writes=CALIBRATION_WRITES)
            meter = modelled.meter
            found.append(
                Calibration(
                    design,
                    real,
                    (sum(meter.calls.values()) / modelled.committed, meter.meter_rule_wcu / modelled.committed),
                )
            )
        return found
    finally:
        server.stop()


# -- Report --------------------------------------------------------------------------------------------------


def row(result: Result) -> str:
    meter = result.meter
    failed = f"{result.outcomes['contention']}/{result.outcomes['throttled']}"
    return (
        f"{result.design.name:<13} {result.writers:>7} {result.design.chains:>6} {result.rate:>9,.0f} "
        f"{result.percentile_ms(0.5):>7.1f} {result.percentile_ms(0.99):>7.1f} {failed:>11} "
        f"{result.per_write(sum(meter.cancelled.values())):>10.2f} {result.per_write(meter.wcu_total):>9.2f} "
        f"{100 * result.cancelled_share:>8.1f} {sum(meter.throttled.values()):>9} "
        f"{result.hottest_wcu_per_second:>9,.0f} {cost_per_million(result):>8.2f}"
    )


def cost_per_million(result: Result) -> float:
    """On-demand dollars a million committed audited writes cost in write and read units, waste included."""
    meter = result.meter
    units = result.per_write(meter.wcu_total) * DOLLARS_PER_MILLION_WRU
    return units + result.per_write(meter.rcu) * DOLLARS_PER_MILLION_RRU


HEADER = (
    f"{'design':<13} {'writers':>7} {'chains':>6} {'writes/s':>9} {'p50 ms':>7} {'p99 ms':>7} "
    f"{'failed c/t':>11} {'canc/write':>10} {'WCU/write':>9} {'%WCU can':>8} {'throttles':>9} {'hot WCU/s':>9} "
    f"{'$/M':>8}"
)
LEGEND = """\
writes/s: committed audited writes per simulated second; p50/p99: latency of a committed write, from the call
to append to its return (head reads, backoff and lease claims included); failed c/t: appends that raised
LedgerContention / a throttling error; canc/write: cancelled transactions per committed write; WCU/write: every
write unit (committed, cancelled, index, lease writes) per committed write; %WCU can: share on cancelled
transactions; throttles: throttled requests (SDK attempts); hot WCU/s: the busiest partition key's write units;
$/M: on-demand dollars per million committed audited writes (write and read units, waste included; us-east-1)"""


def detail(result: Result) -> str:
    """Where the requests and write units of a row went, per committed write."""
    meter, per = result.meter, result.per_write
    calls = ", ".join(f"{op} {per(n):.2f}" for op, n in sorted(meter.calls.items()))
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(meter.cancelled.items())) or "none"
    hottest_index = max(meter.index_partition_wcu.items(), key=lambda kv: kv[1], default=None)
    index = (
        f"{hottest_index[0][0]}.{hottest_index[0][1]} {hottest_index[1] / result.seconds:,.0f}"
        if hottest_index
        else "-"
    )
    return (
        f"  {result.design.name} {result.writers:>4}: requests {calls}; cancelled: {reasons}\n"
        f"  {'':<{len(result.design.name)}}       WCU: committed {per(meter.wcu_committed):.2f}, "
        f"cancelled {per(meter.wcu_cancelled):.2f}, index {per(meter.wcu_index):.2f}, "
        f"PutItem/DeleteItem {per(meter.wcu_single):.2f} (failed conditions {per(meter.wcu_single_failed):.2f}); "
        f"RCU {per(meter.rcu):.2f}; hottest index key WCU/s: {index}"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = Latencies()
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--writers", type=int, nargs="+", default=list(WRITERS), help="concurrent writer counts")
    parser.add_argument("--chains", type=int, default=CHAINS, help="chains of the many-chain designs")
    parser.add_argument("--today-chains", type=int, default=TODAY_CHAINS, help="chains of today's design")
    parser.add_argument("--seconds", type=float, default=2.0, help="simulated seconds counted per run")
    parser.add_argument(
        "--seconds-at-1000", type=float, default=1.0, help="simulated seconds counted at 1,000+ writers"
    )
    parser.add_argument("--warmup", type=float, default=0.5, help="simulated seconds run first and not counted")
    parser.add_argument("--think-ms", type=float, default=0.0, help="pause of each writer between its writes")
    parser.add_argument("--seed", type=int, default=1, help="seeds the model and the ledger's random choices")
    latencies = {
        "single_median": "GetItem/Query/PutItem/DeleteItem median",
        "single_p99": "single-item p99",
        "transact_median": "TransactWriteItems median",
        "transact_p99": "TransactWriteItems p99",
    }
    for name, what in latencies.items():  # --single-median-ms ...: the model's assumed latencies, in ms
        flag = f"--{name.replace('_', '-')}-ms"
        parser.add_argument(flag, type=float, default=1000 * getattr(defaults, name), help=f"{what} (assumed)")
    parser.add_argument("--partition-wcu", type=float, default=Capacity().partition_wcu, help="WCU/s per partition key")
    parser.add_argument(
        "--sdk-attempts",
        type=int,
        default=SdkRetries().max_attempts,
        help="SDK attempts of a throttled single-item request",
    )
    parser.add_argument(
        "--sdk-throttle-base",
        type=float,
        default=SdkRetries().throttle_base_seconds,
        help="SDK backoff scale for throttling (s)",
    )
    parser.add_argument("--no-calibration", action="store_true", help="skip the run on the embedded store")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    latencies = Latencies(
        single_median=args.single_median_ms / 1000,
        single_p99=args.single_p99_ms / 1000,
        transact_median=args.transact_median_ms / 1000,
        transact_p99=args.transact_p99_ms / 1000,
    )
    setup = Setup(
        latencies=latencies,
        capacity=Capacity(partition_wcu=args.partition_wcu),
        retries=SdkRetries(max_attempts=args.sdk_attempts, throttle_base_seconds=args.sdk_throttle_base),
        warmup=args.warmup,
        think=args.think_ms / 1000,
        seed=args.seed,
    )
    designs = [
        Design("today", args.today_chains),
        Design("today+chains", args.chains),
        Design("leased", args.chains, leased=True),
        Design("leased, 2x", 2 * args.chains, leased=True),
    ]
    print(
        f"audited writes (a flow's step + its event, a flow per writer) on a model of DynamoDB; "
        f"{args.seconds:g} simulated s per run ({args.seconds_at_1000:g} s at 1,000+ writers) "
        f"after {args.warmup:g} s of warm-up; seed {args.seed}"
    )
    print(
        f"model (assumed): single-item requests {latencies.single_median * 1000:g} ms median, "
        f"{latencies.single_p99 * 1000:g} ms p99; TransactWriteItems {latencies.transact_median * 1000:g} ms, "
        f"{latencies.transact_p99 * 1000:g} ms; {setup.capacity.partition_wcu:g} WCU/s per partition key; "
        f"SDK: {setup.retries.max_attempts} attempts on throttling"
    )
    print(
        f"designs: today = Ledger(shards={args.today_chains}), no leases; today+chains = the same code, "
        f"shards={args.chains}; leased = shards={args.chains} and ChainLeases({LEASE_SECONDS:g} s); "
        f"leased, 2x: {2 * args.chains} chains"
    )
    print(LEGEND)
    print(HEADER)
    results: list[Result] = []
    for design in designs:
        for writers in args.writers:
            seconds = args.seconds_at_1000 if writers >= 1000 else args.seconds
            result = simulate(design, writers, setup, seconds)
            results.append(result)
            print(row(result), flush=True)
    print("where the requests and write units went, per committed write:")
    for result in results:
        print(detail(result))
    for result in results:
        hottest = max(result.meter.index_partition_wcu.values(), default=0) / result.seconds
        if hottest > setup.capacity.partition_wcu:  # the model bills index writes, and does not throttle them
            print(
                f"WARNING: {result.design.name} at {result.writers} writers puts {hottest:,.0f} WCU/s on one index "
                "key, which DynamoDB would throttle: that row is optimistic"
            )

    failed = False
    print(
        f"targets (leased design, 1,000 writers): >= {TARGET_RATE:,} audited writes/s, p99 <= {TARGET_P99_MS:g} ms, "
        f"<= {100 * TARGET_CANCELLED_SHARE:g} % of WCU on cancelled transactions"
    )
    at_scale = [r for r in results if r.design is designs[2] and r.writers == 1000]
    if not at_scale:
        failed = True
        print("  MISSED: the leased design did not run at 1,000 writers")
    for result in at_scale:
        checks = [
            (f"{result.rate:,.0f} writes/s", result.rate >= TARGET_RATE),
            (f"p99 {result.percentile_ms(0.99):.1f} ms", result.percentile_ms(0.99) <= TARGET_P99_MS),
            (f"{100 * result.cancelled_share:.1f} % WCU cancelled", result.cancelled_share <= TARGET_CANCELLED_SHARE),
        ]
        for text, met in checks:
            print(f"  {'met' if met else 'MISSED'}: {text}")
            failed |= not met

    if not args.no_calibration:
        print(f"calibration: one writer, {CALIBRATION_WRITES} audited writes, the locked moto server vs the model")
        calibrated = [designs[0], designs[2]]
        for found in calibrate(calibrated, setup):
            (real_requests, real_units), (model_requests, model_units) = found.real, found.model
            verdict = "agrees" if found.agrees else "DISAGREES (missed)"
            print(
                f"  {found.design.name}: requests/write {real_requests:.3f} real, {model_requests:.3f} model; "
                f"transactional WCU/write {real_units:.2f} real, {model_units:.2f} model: {verdict}"
            )
            failed |= not found.agrees
    print(f"wall time {time.perf_counter() - began:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
