"""OTLP ingest: agent spans sent over OTLP/HTTP to Flowledger's receiver and to Arize Phoenix's, same bodies.

The spans are an agent's, in the GenAI semantic conventions, made with the OpenTelemetry SDK from a seeded id
generator and fixed clocks, so every run sends the same bytes: traces of 50 spans, an ``invoke_agent`` root over
``chat`` model calls (model, token counts, some hundreds of bytes of input and output messages) each followed
by the ``execute_tool`` call it asked for (tool name, arguments, result). They are sent in the order the SDK
finishes them (children before their root), 512 spans a request as its BatchSpanProcessor sends them, so a
trace can straddle two requests with its children in the first. One client sends the same protobuf bodies to
each receiver in turn, one request after another, after a warm-up request.

Flowledger: ``POST /api/otlp/v1/traces`` on a real ``flowledger serve`` (gateway, the reasoning function in its
workers, the embedded store), which answers once every span is a step of its trace's flow, sealed and audited
in the hash-chained ledger, or is held until its parent comes. Every answer must say 0 spans rejected; the
first request is then replayed (0 rejected again), and at the end each flow's ``step_count`` must be its
trace's spans: every span written, the replay's none twice. Phoenix (``arize-phoenix`` pinned below, in its own
venv under .build/bench-venvs made on first use, SQLite in a temporary working dir, telemetry and external
resources off): ``POST /v1/traces``, which answers as soon as the body parses and writes the spans to SQLite
afterwards, in the background. So both rates are to stored, from the first request until every span is:
Flowledger's by the flows' ``step_count`` in its signed admin flows list (every span is there at the last
answer unless one still waits for its parent), Phoenix's by the span count of its GraphQL API. The rate of
answers is printed too; Phoenix's is no ingest rate.

Printed for each: spans/s stored and answered, per-span overhead (request time / spans), p50 and p95 request
latency, the receiver's CPU a span (its every process, from /proc), and Flowledger/Phoenix. Target: Flowledger's
spans/s at least 1.0x Phoenix's to stored. Flowledger does more a span by design (each a step written in a
DynamoDB transaction of 49 steps with its own audit event, contents sealed under the flow's data key, every
event chained to the last by hash; Phoenix inserts rows), so 0.25x was the guess before measuring. Measured on
the 2-core machine (2026-12-06): Phoenix stores some 120-130 spans/s with one core busy, Flowledger 260-300 with
about half Phoenix's CPU a span, 2.1-2.3x in three runs. Parity keeps clear of this shared machine's noise (a
third between identical runs) and still fails a change that halves the receiver's rate.

Then one trace of 20,000 spans (the most a flow holds): a root and 19,999 children, the root in the last
request, so every earlier span arrives before its parent. Printed: its spans/s, its requests' latency, and the
resident memory (VmRSS, and the peak VmHWM, from /proc) of the server process and of its worker processes before
the trace, after 10 requests (5,120 spans) and after the last. The embedded store is in memory (moto), so the
server process grows with what it stores, as DynamoDB's storage would on AWS: printed, a span's worth, not a
target. The receiver runs in the workers (the reasoning Lambda on AWS), which must not grow with the trace.
Target: the workers' peak grows by under 64 MiB from 5,120 to 20,000 spans, twice the most measured here (4, 28
and 31 MiB in three runs). The 14,880 later spans are 13 MiB of protobuf and 25 MiB as mapped steps (tracemalloc)
before any step body, sealed content or DynamoDB request is built from them: a receiver that kept the trace, or
wrote every held child in one request, would grow by a multiple of that.

If Phoenix cannot be installed or started, Flowledger's figures are printed, with why Phoenix's are missing,
and the run counts as missed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.util.types import Attributes
from serving import free_port, wait_for

from flowledger.local.datadir import DataDir
from flowledger.otlp.ingest import flow_id_of

ROOT = Path(__file__).resolve().parents[1]
FLOWLEDGER = [sys.executable, "-m", "flowledger.cli"]
PHOENIX_VERSION = "20.26.1"
PHOENIX_VENV = ROOT / ".build" / "bench-venvs" / "phoenix"
STORE_SECONDS = 180  # after its last answer, for a receiver to store every span it took
BATCH_SPANS = 512  # the SDK BatchSpanProcessor's max_export_batch_size
TRACE_SPANS = 50
TRACES = 100  # 5,000 spans to each receiver
BIG_TRACE_SPANS = 20_000  # MAX_STEPS_PER_FLOW
CHECKPOINT_REQUESTS = 10  # the big trace's memory is read after these (5,120 spans) and at its end
TARGET_RATIO = 1.0
TARGET_GROWTH_MIB = 64
PROTOBUF = {"Content-Type": "application/x-protobuf"}
START_NS = 1_796_547_600 * 10**9  # 2026-12-06 09:00 UTC
PHRASES = (
    "the order shipped from the north warehouse",
    "the customer asks for a refund on the damaged item",
    "the tracking number shows a delayed delivery",
    "the warranty covers a replacement within a year",
    "the card payment was declined twice",
    "the subscription renews at the start of next month",
    "a return label went out by email",
    "the ticket is escalated to priority support",
    "the invoice lists two items and one credit",
    "the delivery address changed after checkout",
)
TOOLS = ("lookup_order", "search_knowledge_base", "get_customer", "create_ticket", "check_inventory")


class SeededIds(IdGenerator):
    """Trace and span ids from a seeded generator, so every run makes the same spans."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) | 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) | 1


def text(rng: random.Random, clauses: int) -> str:
    """A sentence of a support conversation, some 45 bytes a clause."""
    return "; ".join(rng.choice(PHRASES) for _ in range(clauses)).capitalize() + "."


def compact(value: object) -> str:
    """JSON as the GenAI conventions carry it in a string attribute."""
    return json.dumps(value, separators=(",", ":"))


def chat_attributes(rng: random.Random, tool: str, call_id: str) -> Attributes:
    """A model call that asks for ``tool``: the conversation in, the tool call out (GenAI message format)."""
    messages_in = [
        {"role": "system", "parts": [{"type": "text", "content": text(rng, 3)}]},
        {"role": "user", "parts": [{"type": "text", "content": text(rng, 4)}]},
    ]
    messages_out = [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": text(rng, 2)},
                {"type": "tool_call", "id": call_id, "name": tool, "arguments": {"query": text(rng, 1)}},
            ],
            "finish_reason": "tool_call",
        }
    ]
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.usage.input_tokens": rng.randint(400, 3000),
        "gen_ai.usage.output_tokens": rng.randint(20, 300),
        "gen_ai.response.finish_reasons": ["tool_call"],
        "gen_ai.input.messages": compact(messages_in),
        "gen_ai.output.messages": compact(messages_out),
    }


def tool_attributes(rng: random.Random, tool: str, call_id: str) -> Attributes:
    """The tool call a model call asked for: its arguments in, its result out."""
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.arguments": compact({"query": text(rng, 1), "limit": rng.randint(1, 10)}),
        "gen_ai.tool.call.result": compact({"status": "ok", "items": [text(rng, 2) for _ in range(3)]}),
    }


def agent_trace(tracer: trace.Tracer, rng: random.Random, spans: int, start_ns: int) -> int:
    """One trace of ``spans`` spans, from ``start_ns``: the agent's root over its model and tool calls, one
    after another. Returns when it ended."""
    root = tracer.start_span(
        "invoke_agent Support Agent",
        start_time=start_ns,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "Support Agent",
            "gen_ai.agent.id": "asst_support_7",
            "gen_ai.conversation.id": f"conv_{rng.getrandbits(48):012x}",
        },
    )
    inside, clock = trace.set_span_in_context(root), start_ns + 5_000_000
    for k in range(spans - 1):
        tool, call_id = TOOLS[k // 2 % len(TOOLS)], f"call_{k // 2:05d}"
        if k % 2 == 0:
            name, kind, took_ms = "chat gpt-4o-mini", trace.SpanKind.CLIENT, rng.randint(400, 1500)
            attributes = chat_attributes(rng, tool, call_id)
        else:
            name, kind, took_ms = f"execute_tool {tool}", trace.SpanKind.INTERNAL, rng.randint(20, 300)
            attributes = tool_attributes(rng, tool, call_id)
        child = tracer.start_span(name, context=inside, kind=kind, start_time=clock, attributes=attributes)
        clock += took_ms * 1_000_000
        child.end(end_time=clock)
        clock += 1_000_000
    root.end(end_time=clock)
    return clock


def finished_spans(seed: int, traces: int, spans: int) -> tuple[ReadableSpan, ...]:
    """``traces`` agent traces of ``spans`` spans each, in the order the SDK finished them."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "support-agent"}), id_generator=SeededIds(seed))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer, rng, clock = provider.get_tracer("bench.otlp"), random.Random(seed), START_NS
    for _ in range(traces):
        clock = agent_trace(tracer, rng, spans, clock)
    provider.shutdown()
    return memory.get_finished_spans()


def bodies_of(spans: tuple[ReadableSpan, ...]) -> list[bytes]:
    """The export requests, BATCH_SPANS spans each, serialized."""
    return [encode_spans(spans[i : i + BATCH_SPANS]).SerializeToString() for i in range(0, len(spans), BATCH_SPANS)]


def spans_per_flow(spans: tuple[ReadableSpan, ...]) -> dict[str, int]:
    """How many steps each trace's flow should hold: one a span."""
    counts: dict[str, int] = {}
    for span in spans:
        flow_id = flow_id_of(format(span.context.trace_id, "032x"))
        counts[flow_id] = counts.get(flow_id, 0) + 1
    return counts


def p95(values: list[float]) -> float:
    """Within the values measured: a few requests are too few to extrapolate past the slowest."""
    return statistics.quantiles(values, n=100, method="inclusive")[94]


@dataclass(frozen=True)
class Run:
    """One receiver's requests: the spans they carried, each request's seconds, the seconds from the first request
    to the last answer and to every span stored, and the CPU seconds the receiver's processes took until then."""

    spans: int
    seconds: list[float]
    answered_in: float
    stored_in: float
    cpu: float

    @property
    def spans_per_second(self) -> float:
        """Spans stored a second: the ingest rate."""
        return self.spans / self.stored_in

    @property
    def ms_per_span(self) -> float:
        """Request time a span: what the sender waits."""
        return sum(self.seconds) * 1000 / self.spans

    def row(self, name: str) -> str:
        """One row of the comparison table."""
        return (
            f"{name:<26} {self.spans_per_second:>9,.0f} {self.spans / self.answered_in:>9,.0f}"
            f" {self.ms_per_span:>8.3f} {statistics.median(self.seconds) * 1000:>8.1f}"
            f" {p95(self.seconds) * 1000:>8.1f} {self.cpu * 1000 / self.spans:>8.2f}"
        )


class NotStored(Exception):
    """A receiver answered for spans it did not store in time; the message says how many it did."""


class Clock:
    """Seconds, and CPU seconds of a receiver's processes, from when it is made."""

    def __init__(self, pid: int) -> None:
        self._pid, self._cpu, self._began = pid, cpu_seconds(pid), time.perf_counter()

    def run(self, spans: int, seconds: list[float], stored: Callable[[], int]) -> Run:
        """The run of these requests, answered by now, timed until ``stored()`` counts every span stored."""
        answered = time.perf_counter()
        done, cpu = when_stored(stored, spans, self._pid)
        return Run(spans, seconds, answered - self._began, done - self._began, cpu - self._cpu)


def when_stored(stored: Callable[[], int], spans: int, pid: int) -> tuple[float, float]:
    """Wait until ``stored()`` counts ``spans``; the time, and the CPU seconds of ``pid``'s processes, when the
    look that did began: the first, for a receiver that answers once it stored. NotStored past STORE_SECONDS."""
    deadline = time.perf_counter() + STORE_SECONDS
    while True:
        at, cpu = time.perf_counter(), cpu_seconds(pid)
        count = stored()
        if count >= spans:
            return at, cpu
        if at > deadline:
            raise NotStored(f"{count:,} of {spans:,} spans stored {STORE_SECONDS} s after the last answer")
        time.sleep(0.25)  # often enough for a rate over many seconds; each look costs the receiver a query


class Refused(Exception):
    """A receiver did not take a request whole; the message says what it answered."""


def post(client: httpx.Client, url: str, body: bytes, headers: dict[str, str]) -> float:
    """Send one export request and return its seconds; Refused unless 200 with no span rejected."""
    began = time.perf_counter()
    response = client.post(url, content=body, headers={**PROTOBUF, **headers})
    took = time.perf_counter() - began
    if response.status_code != 200:
        raise Refused(f"{url} answered {response.status_code}: {response.text[:300]}")
    answer = ExportTraceServiceResponse()
    answer.ParseFromString(response.content)
    rejected = answer.partial_success.rejected_spans
    if rejected:
        raise Refused(f"{url} rejected {rejected} spans: {answer.partial_success.error_message[:300]}")
    return took


def send(client: httpx.Client, url: str, bodies: list[bytes], headers: dict[str, str]) -> list[float]:
    """Send the requests one after another; each one's seconds. Refused names the request that was."""
    seconds = []
    for n, body in enumerate(bodies, 1):
        try:
            seconds.append(post(client, url, body, headers))
        except Refused as exc:
            raise Refused(f"request {n} of {len(bodies)}: {exc}") from None
    return seconds


# A receiver's processes, from /proc: the server and those it spawned (serve's workers), their CPU and memory.


def resident_kib(pid: int) -> tuple[int, int]:
    """A process's resident set now (VmRSS) and at its peak (VmHWM), in KiB; zeros once it has ended."""
    fields: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of ``pid`` and every process under it, so far."""
    total = 0
    for each in (pid, *descendants(pid)):
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
    return total / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``: serve's workers are processes it spawns."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # after the command name, which is in parentheses and may hold spaces: state, then the parent
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # it ended meanwhile
    found, frontier = [], [pid]
    while frontier:
        below = frontier.pop()
        children = [child for child, parent in parents.items() if parent == below]
        found += children
        frontier += children
    return found


@dataclass(frozen=True)
class Memory:
    """MiB resident (VmRSS) and at the peak so far (VmHWM): the server process, and its workers summed."""

    server: float
    server_peak: float
    workers: float
    workers_peak: float

    def line(self, when: str) -> str:
        """One row of the memory table."""
        return f"{when:<22} {self.server:>8.0f} {self.server_peak:>8.0f} {self.workers:>9.0f} {self.workers_peak:>9.0f}"


def memory_of(pid: int) -> Memory:
    """The server's memory and its workers' (summed: the peak of the sum is at most the sum of the peaks)."""
    server, workers = resident_kib(pid), [resident_kib(worker) for worker in descendants(pid)]
    return Memory(
        server[0] / 1024,
        server[1] / 1024,
        sum(rss for rss, _ in workers) / 1024,
        sum(peak for _, peak in workers) / 1024,
    )


# Flowledger.


@dataclass(frozen=True)
class Flowledger:
    """Flowledger's figures: the 50-span traces, the big trace, and the memory it took."""

    traces: Run  # the 50-span traces
    big: Run | None  # the 20,000-span trace; None when it failed, as ``failure`` says
    memory: list[tuple[str, Memory]]  # before the big trace, at its checkpoint, at its end (or failure)
    failure: str = ""


def run_flowledger(
    warmup: tuple[ReadableSpan, ...], spans: tuple[ReadableSpan, ...], big: tuple[ReadableSpan, ...]
) -> Flowledger:
    """Start ``flowledger serve`` in a fresh data dir, send it the warm-up, the traces, a replay and the big trace."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OPENAI_", "FLOWLEDGER_"))}
    expected, big_expected = spans_per_flow(spans), spans_per_flow(big)
    with tempfile.TemporaryDirectory() as scratch:
        data_dir, port = Path(scratch) / "data", free_port()
        server = subprocess.Popen(
            [*FLOWLEDGER, "serve", "--port", str(port), "--data-dir", str(data_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=environment,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for(f"{base}/health", server)
            steps = FlowSteps(base, DataDir(data_dir))
            url = f"{base}/api/otlp/v1/traces"
            bearer = {"Authorization": f"Bearer {DataDir(data_dir).token('bench-otlp', ['reasoning.write'])}"}
            with httpx.Client(timeout=120) as client:
                send(client, url, bodies_of(warmup), bearer)
                bodies, clock = bodies_of(spans), Clock(server.pid)
                traces = clock.run(len(spans), send(client, url, bodies, bearer), lambda: steps.stored(expected))
                post(client, url, bodies[0], bearer)  # the replay: the last check says it wrote nothing
                memory = [("before", memory_of(server.pid))]
                try:
                    big_run = big_trace(
                        client, url, bearer, big, server.pid, memory, lambda: steps.stored(big_expected)
                    )
                except (Refused, NotStored) as exc:  # the comparison stands; this target is missed
                    memory.append(("when it failed", memory_of(server.pid)))
                    steps.check(expected)
                    return Flowledger(traces, None, memory, str(exc))
            steps.check({**expected, **big_expected})
        finally:
            server.terminate()
            server.wait(timeout=30)
    return Flowledger(traces, big_run, memory)


def big_trace(
    client: httpx.Client,
    url: str,
    bearer: dict[str, str],
    big: tuple[ReadableSpan, ...],
    pid: int,
    memory: list[tuple[str, Memory]],
    stored: Callable[[], int],
) -> Run:
    """Send the big trace, reading the memory of ``pid``'s processes after CHECKPOINT_REQUESTS and at the end."""
    bodies, clock = bodies_of(big), Clock(pid)
    first = send(client, url, bodies[:CHECKPOINT_REQUESTS], bearer)
    memory.append((f"after {CHECKPOINT_REQUESTS * BATCH_SPANS:,} spans", memory_of(pid)))
    rest = send(client, url, bodies[CHECKPOINT_REQUESTS:], bearer)
    run = clock.run(len(big), first + rest, stored)
    memory.append((f"after {len(big):,} spans", memory_of(pid)))
    return run


class FlowSteps:
    """Each flow's ``step_count``, read over the signed admin API: from the flows list, not each flow's
    overview, which reckons an active flow's radar from its steps (for the 20,000-step flow, past the
    gateway's 29 s here)."""

    def __init__(self, server: str, directory: DataDir) -> None:
        sys.path.insert(0, str(ROOT))  # tests.signing: SigV4 for the admin reads
        from tests.signing import sigv4_headers

        self._server, self._credentials, self._sign = server, directory.admin_credentials(), sigv4_headers

    def counts(self) -> dict[str, int]:
        """Every flow's steps."""
        counts, query = dict[str, int](), {"limit": "100"}
        with httpx.Client(timeout=30) as session:
            while True:
                url = str(httpx.URL(f"{self._server}/admin/v1/reasoning/flows", params=query))
                response = session.get(url, headers=self._sign(self._credentials, "GET", url))
                if response.status_code != 200:
                    raise NotStored(f"listing the flows: {response.status_code} {response.text[:300]}")
                page = response.json()
                counts.update({flow["flow_id"]: flow["step_count"] for flow in page["flows"]})
                if not page["next_cursor"]:
                    return counts
                query["cursor"] = page["next_cursor"]

    def stored(self, expected: dict[str, int]) -> int:
        """How many of the spans expected (flow: spans) are steps."""
        counts = self.counts()
        return sum(min(counts.get(flow_id, 0), spans) for flow_id, spans in expected.items())

    def check(self, expected: dict[str, int]) -> None:
        """Each flow holds exactly its trace's spans: none lost, none written twice."""
        counts = self.counts()
        for flow_id, spans in expected.items():
            if counts.get(flow_id) != spans:
                raise NotStored(f"flow {flow_id} holds {counts.get(flow_id, 'no')} steps, not its trace's {spans}")


# Phoenix.


class PhoenixMissing(Exception):
    """Phoenix could not be installed, started or read; the message says why."""


def phoenix_command() -> Path:
    """``phoenix`` from its own venv at the pinned version, made (or brought to the pin) when it is not."""
    python = PHOENIX_VENV / "bin" / "python"
    probe = [str(python), "-c", "import importlib.metadata as m; print(m.version('arize-phoenix'))"]
    if python.exists() and subprocess.run(probe, capture_output=True, text=True).stdout.strip() == PHOENIX_VERSION:
        return PHOENIX_VENV / "bin" / "phoenix"
    print(f"installing arize-phoenix=={PHOENIX_VERSION} into {PHOENIX_VENV}", flush=True)
    for step in (
        ["python3.11", "-m", "venv", str(PHOENIX_VENV)],
        [str(python), "-m", "pip", "install", "--quiet", f"arize-phoenix=={PHOENIX_VERSION}"],
    ):
        try:
            done = subprocess.run(step, capture_output=True, text=True)
        except OSError as exc:
            raise PhoenixMissing(f"{step[0]}: {exc}") from None
        if done.returncode != 0:
            raise PhoenixMissing(f"`{' '.join(step[:5])}` failed: {(done.stderr or done.stdout).strip()[-500:]}")
    return PHOENIX_VENV / "bin" / "phoenix"


def run_phoenix(warmup: tuple[ReadableSpan, ...], spans: tuple[ReadableSpan, ...]) -> Run:
    """Start Phoenix in a temporary working dir, send it the warm-up and the traces."""
    command = phoenix_command()
    with tempfile.TemporaryDirectory() as scratch:
        port = free_port()
        environment = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_", "VIRTUAL_ENV"))},
            "PHOENIX_WORKING_DIR": scratch,  # its SQLite database, phoenix.db, is made here
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(free_port()),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",  # offline: no web fonts, pixels or downloads
            "PHOENIX_LOG_MIGRATIONS": "false",
        }
        log = Path(scratch) / "phoenix.log"
        with log.open("wb") as output:
            server = subprocess.Popen([str(command), "serve"], stdout=output, stderr=output, env=environment)
        try:
            base = f"http://127.0.0.1:{port}"
            try:
                wait_for(f"{base}/healthz", server)
            except SystemExit as exc:  # wait_for ends a benchmark; here Phoenix's absence is reported instead
                tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
                raise PhoenixMissing(f"{exc}{': ' + tail if tail else ''}") from None
            with httpx.Client(timeout=120) as client:
                send(client, f"{base}/v1/traces", bodies_of(warmup), {})
                when_stored(lambda: phoenix_spans(client, base), len(warmup), server.pid)
                clock = Clock(server.pid)
                seconds = send(client, f"{base}/v1/traces", bodies_of(spans), {})
                return clock.run(len(spans), seconds, lambda: phoenix_spans(client, base) - len(warmup))
        finally:
            server.terminate()
            server.wait(timeout=30)


def phoenix_spans(client: httpx.Client, base: str) -> int:
    """The spans Phoenix has stored, by its GraphQL API."""
    query = {"query": "{ projects { edges { node { recordCount } } } }"}
    response = client.post(f"{base}/graphql", json=query)
    if response.status_code != 200:
        raise PhoenixMissing(f"Phoenix's GraphQL API answered {response.status_code}: {response.text[:300]}")
    return sum(edge["node"]["recordCount"] for edge in response.json()["data"]["projects"]["edges"])


def lag(run: Run) -> str:
    """When the last span was stored, against the last answer."""
    late = run.stored_in - run.answered_in
    return "by the last answer" if late < 0.05 else f"{late:.1f} s after the last answer"


def report_comparison(ours: Run, theirs: Run | None) -> bool:
    """Print the 50-span traces' figures; whether the target was met (not without Phoenix's)."""
    print(
        f"{f'{ours.spans:,} spans':<26} {'stored/s':>9} {'answers/s':>9} {'ms/span':>8}"
        f" {'p50 ms':>8} {'p95 ms':>8} {'cpu ms':>8}"
    )
    print(ours.row("flowledger (serve)"))
    if theirs is not None:
        print(theirs.row(f"phoenix {PHOENIX_VERSION} (SQLite)"))
    print("(stored/s: first request to every span stored; ms/span: request time; cpu ms: the receiver's, a span)")
    print("Flowledger: every answer 0 rejected, the replay too; every flow holds one step per span of its trace")
    print(f"Flowledger: {ours.spans:,} spans stored {lag(ours)}")
    if theirs is None:
        return False
    ratio = ours.spans_per_second / theirs.spans_per_second
    print(
        f"flowledger/phoenix: {ratio:.2f}x the spans/s stored (target >= {TARGET_RATIO}x),"
        f" {ours.cpu / theirs.cpu:.2f}x the CPU a span,"
        f" {ours.ms_per_span / theirs.ms_per_span:.0f}x the request time a span (Phoenix answers, then stores)"
    )
    if ratio < TARGET_RATIO:
        print(f"TARGET MISSED: Flowledger ingests under {TARGET_RATIO}x Phoenix's spans/s")
        return False
    return True


def report_big_trace(ours: Flowledger) -> bool:
    """Print the 20,000-span trace's figures; whether it was stored with the workers' memory flat."""
    big = ours.big
    if big is not None:
        print(
            f"one trace of {big.spans:,} spans to Flowledger: {big.spans_per_second:,.0f} spans/s,"
            f" {big.ms_per_span:.2f} ms a span, {big.cpu * 1000 / big.spans:.2f} ms of CPU a span"
        )
        print(
            f"  its {len(big.seconds)} requests: p50 {statistics.median(big.seconds):.1f} s,"
            f" p95 {p95(big.seconds):.1f} s, max {max(big.seconds):.1f} s; every span stored {lag(big)}"
        )
    print(f"{'memory (MiB)':<22} {'server':>8} {'peak':>8} {'workers':>9} {'peak':>9}")
    for when, memory in ours.memory:
        print(memory.line(when))
    if big is None:
        print(f"TARGET MISSED: the trace of {BIG_TRACE_SPANS:,} spans was not stored: {ours.failure}")
        return False
    checkpoint, end = ours.memory[1][1], ours.memory[2][1]
    growth, later = end.workers_peak - checkpoint.workers_peak, big.spans - CHECKPOINT_REQUESTS * BATCH_SPANS
    print(
        f"the last {later:,} spans: workers' peak +{growth:.0f} MiB (target < {TARGET_GROWTH_MIB}),"
        f" the server (its in-memory store) +{end.server - checkpoint.server:.0f} MiB,"
        f" {(end.server - checkpoint.server) * 1024 / later:.0f} KiB a span"
    )
    if growth >= TARGET_GROWTH_MIB:
        print("TARGET MISSED: the receiver's memory grows with the trace")
        return False
    return True


def main() -> int:
    spans, big = finished_spans(1, TRACES, TRACE_SPANS), finished_spans(3, 1, BIG_TRACE_SPANS)
    warmup = finished_spans(2, BATCH_SPANS // TRACE_SPANS, TRACE_SPANS)  # one request of whole traces
    requests = math.ceil(len(spans) / BATCH_SPANS)
    print(f"{len(spans):,} spans: {TRACES} agent traces of {TRACE_SPANS}, {requests} requests of {BATCH_SPANS} at most")
    try:
        ours = run_flowledger(warmup, spans, big)
    except (Refused, NotStored) as exc:
        print(f"TARGET MISSED: Flowledger did not store what it was sent: {exc}")
        return 1
    theirs: Run | None = None
    missing = ""
    try:
        theirs = run_phoenix(warmup, spans)
    except (PhoenixMissing, Refused, NotStored) as exc:
        missing = str(exc)
    compared = report_comparison(ours.traces, theirs)
    if theirs is None:
        print(f"TARGET MISSED: Phoenix's figures are missing: {missing}")
    flat = report_big_trace(ours)
    return 0 if compared and flat else 1


if __name__ == "__main__":
    sys.exit(main())
