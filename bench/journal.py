"""What the embedded store's journal costs and how fast a journaled store restarts.

Throughput: audited writes per second (flows opened through the API by 8 concurrent writers) on a
real `flowledger serve`, with the journal and without it (``FLOWLEDGER_JOURNAL=off``, which exists
for this comparison only), in the same run. Restart: a data dir with 100,000 journaled item writes
after its snapshot (written in-process straight to the journal, as the server would have journaled
them), then `flowledger serve` timed to /health and to its ready line.
Targets: journaled throughput at least 70 % of unjournaled; restart (to ready) under 5 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from serve_start import _until, flowledger
from serving import free_port

WRITERS = 8
WRITE_SECONDS = 8.0
JOURNALED_WRITES = 100_000
RATIO_TARGET = 0.70
RESTART_TARGET_SECONDS = 5.0


def environment(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OPENAI_", "FLOWLEDGER_"))}
    return {**clean, **extra}


def serve(data_dir: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str, float, float]:
    """A started server, its URL, and seconds to /health and to the ready line."""
    port, log = free_port(), data_dir.parent / f"serve-{data_dir.name}.log"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    with log.open("w") as sink:
        process = subprocess.Popen(
            [*flowledger(), "serve", "--port", str(port), "--data-dir", str(data_dir), "--workers", "2"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    health = _until(answers, process, began, log)
    ready = _until(lambda: "\nready in " in log.read_text(), process, began, log)
    return process, url, health, ready


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)


def writes_per_second(data_dir: Path, env: dict[str, str]) -> float:
    process, url, _, _ = serve(data_dir, env)
    try:
        token = subprocess.run(
            [*flowledger(), "token", "--sub", "bench", "--scopes", "reasoning.write", "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout.strip()
        counts = [0] * WRITERS
        deadline = time.monotonic() + WRITE_SECONDS

        def writer(n: int) -> None:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
                while time.monotonic() < deadline:
                    body = {"trigger_type": "user_question", "trigger_ref": f"bench/{n}", "trigger_summary": "Q"}
                    if client.post("/api/reasoning/flows", json=body).status_code == 201:
                        counts[n] += 1

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
        began = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return sum(counts) / (time.monotonic() - began)
    finally:
        stop(process)


def journal_writes(data_dir: Path, count: int) -> None:
    """``count`` item writes appended to the data dir's journal after its snapshot, as serve journals them."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.dynamo_type import DynamoType

    from flowledger.local.datadir import DataDir
    from flowledger.local.journal_effects import ItemWrite, item_record
    from flowledger.local.moto_server import LockedMotoServer

    directory = DataDir(data_dir)
    server = LockedMotoServer()
    server.bind()
    server.use_journal(directory.journal_dir, directory.state_file)
    server.restore(directory.state_file)
    store = server.journaled
    assert store is not None
    account, regions = next(iter(dynamodb_backends.items()))
    region, backend = next((r, b) for r, b in regions.items() if b.tables)
    table = next(t for name, t in backend.tables.items() if name.endswith("consents"))
    for i in range(count):
        item: dict[str, Any] = {
            table.hash_key_attr: {"S": f"bench-{i:06d}"},
            "status": {"S": "granted"},
            "scopes": {"SS": ["chat", "documents"]},
            "updated_at": {"N": str(1_700_000_000 + i)},
        }
        table.put_item(item)
        write = ItemWrite(
            account=account, region=region, keys=[(table.name, DynamoType(item[table.hash_key_attr]), None)]
        )
        store.journal.append(item_record(write))
    store.journal.sync(store.journal.written)
    server.stop()  # no snapshot: the restart replays every one of them


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        stop(serve(root / "warm" / "data", environment())[0])  # byte-code and file cache; not counted
        journaled = writes_per_second(root / "journaled" / "data", environment())
        unjournaled = writes_per_second(root / "unjournaled" / "data", environment(FLOWLEDGER_JOURNAL="off"))
        ratio = journaled / unjournaled
        process, _, base_health, base_ready = serve(root / "journaled" / "data", environment())
        stop(process)  # the same store, its journal empty: what a restart costs without replay
        journal_writes(root / "journaled" / "data", JOURNALED_WRITES)
        process, _, health, ready = serve(root / "journaled" / "data", environment())
        stop(process)
    print(f"audited writes (flow opens), {WRITERS} writers, {WRITE_SECONDS:.0f} s each, same run")
    print(f"  with the journal      {journaled:8.1f} writes/s")
    print(f"  without the journal   {unjournaled:8.1f} writes/s")
    print(f"  ratio                 {ratio:8.0%}   target >= {RATIO_TARGET:.0%}")
    print(f"restart with an empty journal: /health {base_health:.2f} s, ready line {base_ready:.2f} s")
    print(f"restart with {JOURNALED_WRITES:,} journaled writes after the snapshot")
    print(f"  to /health            {health:8.2f} s")
    print(f"  to the ready line     {ready:8.2f} s   target <= {RESTART_TARGET_SECONDS:.1f} s")
    print(f"  replay's share        {ready - base_ready:8.2f} s")
    missed = []
    if ratio < RATIO_TARGET:
        missed.append(f"journaled throughput {ratio:.0%} of unjournaled (target {RATIO_TARGET:.0%})")
    if ready > RESTART_TARGET_SECONDS:
        missed.append(f"restart {ready:.2f} s (target {RESTART_TARGET_SECONDS:.1f} s)")
    if missed:
        print(f"TARGET MISSED: {'; '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
