"""The checkpoint job and real witnesses: `flowledger witness serve` run as its own process over HTTP cosigns
each checkpoint, the job keeps the cosignatures that verify beside it (the checkpoint's note carries them),
a witness that joins late is brought in through a 409, and a witness that cannot be reached leaves the
checkpoint unwitnessed: the alarm metric is 1, and the next run tries again."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flowledger.cli import main
from flowledger.ledger.audit import CHECKPOINT_UNWITNESSED_METRIC, checkpoints_of, take_checkpoint
from flowledger.ledger.events import AuditEntry
from flowledger.ledger.signed_note import parse_note, parse_vkey, verify
from flowledger.ledger.witnessing import ADD_CHECKPOINT, MAX_REQUEST_BYTES, WitnessEndpoint
from flowledger.services import Services
from tests.bundle_verifier import TOOL
from tests.integration.test_checkpoint_signing import Recorded

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def unwitnessed(sink: Recorded) -> list[float]:
    return [value for name, value in sink.values if name == CHECKPOINT_UNWITNESSED_METRIC]


class Served:
    """A `flowledger witness serve` process: its URL, verifier key and state folder."""

    def __init__(self, tmp_path: Path, name: str, log_vkey: str, port: int = 0) -> None:
        key = tmp_path / f"{name}.key"
        self.state = tmp_path / f"{name}-state"
        if not key.exists():
            assert main(["witness", "init", "--name", name, "--key", str(key)]) == 0
        self.vkey = subprocess.run(
            [sys.executable, "-m", "flowledger.cli", "witness", "key", "--key", str(key)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        command = ["witness", "serve", "--key", str(key), "--state", str(self.state), "--log", log_vkey]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "flowledger.cli", *command, "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        started = self.process.stdout.readline()  # "witness VKEY on http://127.0.0.1:PORT/add-checkpoint for ..."
        assert self.vkey in started, started + self.process.stderr.read() if self.process.stderr else ""
        self.url = started.split(" on ")[1].split(ADD_CHECKPOINT)[0]
        self.port = int(self.url.rsplit(":", 1)[1])

    def endpoint(self) -> WitnessEndpoint:
        return WitnessEndpoint(url=self.url, vkey=self.vkey)

    def stop(self) -> str:
        """Stop it; its stderr (never a traceback)."""
        self.process.terminate()
        _, stderr = self.process.communicate(timeout=10)
        return stderr


@pytest.fixture
def recorded(services: Services) -> Recorded:
    ticks = iter(range(10_000))
    services.clock = lambda: T0 + timedelta(minutes=next(ticks))
    services.metrics = sink = Recorded()
    return sink


@pytest.fixture
def served(services: Services, tmp_path: Path) -> Iterator[list[Served]]:
    running: list[Served] = []
    yield running
    for process in running:
        if process.process.poll() is None:
            assert "Traceback" not in process.stop()


def serve(running: list[Served], tmp_path: Path, services: Services, name: str, port: int = 0) -> Served:
    started = Served(tmp_path, name, services.checkpoint_signer.verifier.vkey(), port)
    running.append(started)
    return started


def use(services: Services, *endpoints: WitnessEndpoint, quorum: int | None = None) -> None:
    services.settings = services.settings.model_copy(
        update={"witnesses": list(endpoints), "witness_quorum_setting": quorum, "witness_timeout_seconds": 5.0}
    )


def grow(services: Services, count: int) -> None:
    for n in range(count):
        services.ledger._writer.chain = ("chain-000", "chain-001")[n % 2]
        services.ledger.append(AuditEntry(action="reasoning.flow.started", actor="user:a", subject=f"flow:{n}"))


def checkpoint(services: Services) -> dict[str, object]:
    return take_checkpoint(services.ledger, checkpoints_of(services), services)


def test_the_job_keeps_cosignatures_from_a_served_witness_in_the_checkpoints_note(
    services: Services, recorded: Recorded, served: list[Served], tmp_path: Path
) -> None:
    first_witness = serve(served, tmp_path, services, "w1.example")
    use(services, first_witness.endpoint())
    store = checkpoints_of(services)
    grow(services, 6)
    first = checkpoint(services)
    assert (first["witnessed_by"], first["witness_failures"], first["unwitnessed"]) == (["w1.example"], {}, False)
    grow(services, 300)
    # A second witness joins: it holds nothing, answers 409 with size 0, and takes the checkpoint from there.
    second_witness = serve(served, tmp_path, services, "w2.example")
    use(services, first_witness.endpoint(), second_witness.endpoint())
    second = checkpoint(services)
    assert second["witnessed_by"] == ["w1.example", "w2.example"] and second["unwitnessed"] is False, second
    assert unwitnessed(recorded) == [0, 0]
    for taken in (first, second):
        note = store.note(str(taken["checkpoint_id"]))
        assert note is not None
        parsed = parse_note(note)
        assert verify(parsed, services.checkpoint_signer.verifier) is None  # the log's signature comes first
        assert verify(parsed, parse_vkey(first_witness.vkey)) is not None  # then a cosignature with its time
    assert verify(parse_note(store.note(str(second["checkpoint_id"])) or ""), parse_vkey(second_witness.vkey))
    # The witness's state is the checkpoint it last cosigned (the consistency proof took it from the first).
    (held,) = first_witness.state.glob("*.json")
    assert json.loads(held.read_bytes())["checkpoint_id"] == second["checkpoint_id"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_witness_that_is_down_leaves_the_checkpoint_unwitnessed_until_a_later_run(
    services: Services,
    recorded: Recorded,
    served: list[Served],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    up = serve(served, tmp_path, services, "w1.example")
    port = free_port()  # nothing listens there yet
    assert main(["witness", "init", "--name", "w2.example", "--key", str(tmp_path / "w2.example.key")]) == 0
    absent = WitnessEndpoint(url=f"http://127.0.0.1:{port}", vkey=capsys.readouterr().out.split()[-1])
    use(services, up.endpoint(), absent)  # quorum: both
    grow(services, 4)
    taken = checkpoint(services)
    assert taken["unwitnessed"] is True and taken["witnessed_by"] == ["w1.example"]
    assert str(taken["witness_failures"]["w2.example"]).startswith("unreachable")  # type: ignore[index]
    assert unwitnessed(recorded) == [1]
    # With a quorum of one, the same answers are enough.
    use(services, up.endpoint(), absent, quorum=1)
    grow(services, 2)
    assert checkpoint(services)["unwitnessed"] is False and unwitnessed(recorded) == [1, 0]
    # The missing witness comes up: the next run, with nothing new, gets its cosignature for the latest checkpoint.
    late = serve(served, tmp_path, services, "w2.example", port=port)
    use(services, up.endpoint(), late.endpoint())
    again = checkpoint(services)
    assert again["skipped"] == "no chain moved" and again["witnessed_by"] == ["w1.example", "w2.example"], again
    assert unwitnessed(recorded) == [1, 0, 0]


def post(url: str, body: bytes, method: str = "POST") -> tuple[int, str]:
    request = urllib.request.Request(url + ADD_CHECKPOINT, data=body, method=method)  # noqa: S310 (loopback)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_served_witness_answers_bad_requests_with_a_status_and_a_line(
    services: Services, served: list[Served], tmp_path: Path
) -> None:
    witness = serve(served, tmp_path, services, "w1.example")
    status, text = post(witness.url, b"{not json")
    assert status == 400 and text.startswith("not an add-checkpoint request")
    assert post(witness.url, b"x" * (MAX_REQUEST_BYTES + 1))[0] == 413
    assert post(witness.url, b"", method="GET")[0] == 405
    assert "Traceback" not in witness.stop()


def test_witness_commands_fail_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "w.key"
    assert main(["witness", "init", "--name", "w.example", "--key", str(key)]) == 0
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    vkey = capsys.readouterr().out.strip()
    assert parse_vkey(vkey).kind == 0x04 and vkey.startswith("w.example+")
    assert main(["witness", "init", "--name", "w.example", "--key", str(key)]) == 2
    assert main(["witness", "key", "--key", str(tmp_path / "missing")]) == 2
    state = str(tmp_path / "s")
    assert main(["witness", "serve", "--key", str(key), "--state", state, "--log", "not-a-key"]) == 2
    assert main(["witness", "serve", "--key", str(key), "--state", state, "--log", vkey]) == 2  # a cosignature key
    errors = capsys.readouterr().err
    assert errors.count("flowledger: error:") == 4 and "Traceback" not in errors


def test_a_cosignature_that_does_not_verify_with_the_configured_key_is_dropped(
    services: Services,
    recorded: Recorded,
    served: list[Served],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    witness = serve(served, tmp_path, services, "w1.example")
    capsys.readouterr()
    # The operator was given another key under the witness's name: what the witness signs cannot verify.
    assert main(["witness", "init", "--name", "w1.example", "--key", str(tmp_path / "other.key")]) == 0
    use(services, WitnessEndpoint(url=witness.url, vkey=capsys.readouterr().out.strip()))
    grow(services, 2)
    taken = checkpoint(services)
    assert taken["unwitnessed"] is True and taken["witnessed_by"] == []
    assert "no good cosignature" in str(taken["witness_failures"])
    store = checkpoints_of(services)
    assert store.cosignatures(str(taken["checkpoint_id"])) == []
    assert len(parse_note(store.note(str(taken["checkpoint_id"])) or "").signatures) == 1  # the log's alone
    assert unwitnessed(recorded) == [1]


def test_a_bundle_carries_the_served_witnesses_cosignatures_and_the_standalone_verifier_counts_them(
    services: Services, recorded: Recorded, served: list[Served], tmp_path: Path
) -> None:
    from flowledger.ledger.audit import export_bundle

    one, two = serve(served, tmp_path, services, "w1.example"), serve(served, tmp_path, services, "w2.example")
    use(services, one.endpoint(), two.endpoint())
    for action in ["reasoning.flow.started", "reasoning.step.created", "reasoning.step.created"]:
        services.ledger.append(AuditEntry(action=action, actor="user:a", subject="flow:fl_witnessed"))
    closing = AuditEntry(action="reasoning.flow.completed", actor="user:a", subject="flow:fl_witnessed")
    services.ledger.append(closing.model_copy(update={"payload": {"steps": 2}}))
    assert checkpoint(services)["witnessed_by"] == ["w1.example", "w2.example"]
    grow(services, 40)
    assert checkpoint(services)["unwitnessed"] is False
    bundle = tmp_path / "witnessed.json"
    bundle.write_bytes(export_bundle(services, "flow:fl_witnessed").bundle.to_bytes())
    log = services.checkpoint_signer.verifier.vkey()

    def verify_with(*witness_keys: str) -> subprocess.CompletedProcess[str]:
        keys = [arg for vkey in witness_keys for arg in ("--witness-key", vkey)]
        return subprocess.run(
            [sys.executable, str(TOOL), str(bundle), "--log-key", log, *keys], capture_output=True, text=True
        )

    ran = verify_with(one.vkey, two.vkey)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "cosigned by w1.example, w2.example" in ran.stdout and "extends it" in ran.stdout
    third = Served(tmp_path, "w3.example", log)  # a witness the log never submitted to
    third.stop()
    ran = verify_with(one.vkey, two.vkey, third.vkey)
    assert ran.returncode == 1 and "2 of the 3 cosignatures needed; none by w3.example" in ran.stdout


def test_a_bundle_is_anchored_on_the_first_checkpoint_its_witnesses_cosigned_not_one_they_missed(
    services: Services, recorded: Recorded, served: list[Served], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from flowledger.ledger.audit import export_bundle

    port = free_port()  # the witness is down when the flow's first covering checkpoint is taken
    assert main(["witness", "init", "--name", "w1.example", "--key", str(tmp_path / "w1.example.key")]) == 0
    absent = WitnessEndpoint(url=f"http://127.0.0.1:{port}", vkey=capsys.readouterr().out.split()[-1])
    use(services, absent)
    services.ledger.append(AuditEntry(action="reasoning.flow.started", actor="user:a", subject="flow:fl_missed"))
    missed = checkpoint(services)
    assert missed["unwitnessed"] is True
    late = serve(served, tmp_path, services, "w1.example", port=port)
    use(services, late.endpoint())
    grow(services, 3)
    caught = checkpoint(services)
    assert caught["witnessed_by"] == ["w1.example"]
    bundle = export_bundle(services, "flow:fl_missed").bundle
    # The missed checkpoint never gets the cosignature (the witness only cosigns what extends what it holds).
    assert bundle.checkpoint.checkpoint_id == caught["checkpoint_id"] != missed["checkpoint_id"]
    out = tmp_path / "b.json"
    out.write_bytes(bundle.to_bytes())
    log = services.checkpoint_signer.verifier.vkey()
    ran = subprocess.run(
        [sys.executable, str(TOOL), str(out), "--log-key", log, "--witness-key", late.vkey],
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_a_witness_listed_twice_is_refused_in_the_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowledger.config import load_settings
    from flowledger.errors import ConfigurationError

    assert main(["witness", "init", "--name", "w1.example", "--key", str(tmp_path / "w.key")]) == 0
    vkey = capsys.readouterr().out.split()[-1]
    twice = json.dumps([{"url": "http://127.0.0.1:1", "vkey": vkey}, {"url": "http://127.0.0.1:2", "vkey": vkey}])
    monkeypatch.setenv("FLOWLEDGER_WITNESSES", twice)
    with pytest.raises(ConfigurationError, match="names each witness"):
        load_settings()


def test_two_overlapping_checkpoint_runs_keep_each_others_cosignatures(services: Services) -> None:
    # Each run writes what it read plus what it gathered: two that overlap read the same (nothing) and each
    # writes only its own witness's line. The store keeps every version of the object and reads their union.
    store = checkpoints_of(services)
    grow(services, 3)
    checkpoint_id = str(checkpoint(services)["checkpoint_id"])
    first, second = "— w1.example AAAAfirst\n", "— w2.example BBBBsecond\n"
    store.put_cosignatures(checkpoint_id, [first])
    store.put_cosignatures(checkpoint_id, [second])
    assert store.cosignatures(checkpoint_id) == [first, second]
    note = store.note(checkpoint_id)
    assert note is not None and note.endswith(first + second)
    store.put_cosignatures(checkpoint_id, [first, second])  # a later run that read both: nothing repeats
    assert store.cosignatures(checkpoint_id) == [first, second]
