"""The console script, run in-process against a data directory and the locked moto server.

Expected failures must end in one ``flowledger: error:`` line and a non-zero exit, never a
traceback, and nothing may be written when any part of the input is bad.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from flowledger import __version__
from flowledger.api.tokens import TokenVerifier
from flowledger.cli import build_parser, main
from flowledger.cli.text import counted
from flowledger.config import load_settings
from flowledger.ledger.audit import checkpoints_of, take_checkpoint
from flowledger.ledger.events import AuditEntry
from flowledger.local.datadir import DataDir, LocalEndpoints
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.services import Services, build_services
from flowledger.store.provision import provision_all

STORE_COMMANDS = [
    ["backlog", "status"],
    ["audit", "verify"],
    ["pathways", "inspect"],
    ["knowledge", "list"],
    ["knowledge", "remove", "doc_0000000000000000"],
    ["jobs", "run", "ledger_checkpoint"],
]


def error_line(err: str) -> str:
    """The one error line a failed command printed (fails on a traceback or a second line)."""
    assert err.startswith("flowledger: error: ") and err.count("\n") == 1, err
    return err


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def point_at(data_dir: DataDir, aws_endpoint_url: str, prefix: str) -> None:
    data_dir.write_endpoints(
        LocalEndpoints(
            base_url="http://127.0.0.1:1",
            aws_endpoint_url=aws_endpoint_url,
            region="us-east-1",
            resource_prefix=prefix,
            bucket_suffix="local",
            tables={},
            buckets={},
        )
    )


@pytest.fixture
def no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clean_environment: None) -> None:
    """Nothing in the environment, the AWS files or instance metadata can supply credentials."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "FLOWLEDGER_DATA_DIR",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def store(data_dir: DataDir, locked_moto: str, clean_environment: None) -> Services:
    """A data dir whose local.json points at a fresh, provisioned set of tables on the locked moto server."""
    prefix = f"cli{uuid.uuid4().hex[:10]}"
    services = build_services(load_settings(aws_endpoint_url=locked_moto, resource_prefix=prefix), EMBEDDED_CREDENTIALS)
    provision_all(services.aws, services.settings)
    point_at(data_dir, locked_moto, prefix)
    return services


def knowledge_items(services: Services) -> list[dict[str, Any]]:
    return services.aws.dynamodb.scan(TableName=services.aws.table_name("knowledge"))["Items"]  # type: ignore[no-any-return]


def stored_bodies(services: Services) -> list[str]:
    listed = services.aws.s3.list_object_versions(Bucket=services.aws.bucket_name("documents"))
    return [v["Key"] for v in listed.get("Versions", [])]


def test_token_command_mints_a_token_the_issuer_verifies(
    data_dir: DataDir, jwks_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "token",
            "--sub",
            "carol",
            "--scopes",
            "chat,documents",
            "--patient-id",
            "p-7",
            "--data-dir",
            str(data_dir.path),
        ]
    )
    assert code == 0
    verified = TokenVerifier(jwks_url, "flowledger-local", "flowledger").verify(capsys.readouterr().out.strip())
    assert (verified.sub, verified.scopes, verified.patient_id) == ("carol", frozenset({"chat", "documents"}), "p-7")


def test_token_command_rejects_an_unknown_scope_in_one_line(
    data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["token", "--sub", "carol", "--scopes", "chat,superuser", "--data-dir", str(data_dir.path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flowledger: error: unknown scope(s) superuser") and "\n" not in err


def test_token_command_without_a_data_dir_says_to_start_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["token", "--sub", "x", "--data-dir", str(tmp_path / "missing")]) == 2
    assert "flowledger serve" in capsys.readouterr().err


def test_jobs_list_shows_each_job_with_its_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "list"]) == 0
    assert "heartbeat" in capsys.readouterr().out


@pytest.mark.usefixtures("clean_environment")
def test_jobs_run_against_a_local_server_through_its_data_dir(
    data_dir: DataDir, locked_moto: str, capsys: pytest.CaptureFixture[str]
) -> None:
    point_at(data_dir, locked_moto, "clitest")
    local = build_services(load_settings(aws_endpoint_url=locked_moto, resource_prefix="clitest"), EMBEDDED_CREDENTIALS)
    provision_all(local.aws, local.settings)
    # The checkpoint job reads every chain and writes to the bucket: it only succeeds on that store.
    assert main(["jobs", "run", "ledger_checkpoint", "--data-dir", str(data_dir.path)]) == 0
    checkpoint_id = json.loads(capsys.readouterr().out)["checkpoint_id"]
    keys = local.aws.s3.list_objects_v2(Bucket=local.aws.bucket_name("checkpoints"))["Contents"]
    assert [k["Key"] for k in keys] == [f"checkpoints/{checkpoint_id}.json", f"checkpoints/{checkpoint_id}.note"]


def test_jobs_run_of_an_unknown_job_fails_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "run", "nope"]) == 2
    assert "no job named 'nope'" in capsys.readouterr().err


def subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every parser under ``parser`` with the words that reach it, the root first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from subcommands(child, (*path, name))


def test_every_command_and_option_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    walked = list(subcommands(build_parser()))
    assert {"knowledge list", "knowledge remove", "audit check-proof"} <= {" ".join(path) for path, _ in walked}
    for path, parser in walked:
        assert parser.description, path
        for action in parser._actions:
            assert action.help and action.help != argparse.SUPPRESS, (path, action.dest)
        with pytest.raises(SystemExit) as exited:
            main([*path, "--help"])
        assert exited.value.code == 0
        assert parser.description.split()[0] in capsys.readouterr().out


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    # `flowledger knowledge list | head -1`: the pipe is closed long before the script has started.
    for buffered in ("", "1"):  # a pipe is block-buffered unless PYTHONUNBUFFERED is set
        process = subprocess.Popen(
            [sys.executable, "-m", "flowledger.cli", "jobs", "list"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": buffered},
        )
        assert process.stdout and process.stderr
        process.stdout.close()
        assert (process.wait(timeout=60), process.stderr.read()) == (141, b"")


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert (exited.value.code, capsys.readouterr().out) == (0, f"flowledger {__version__}\n")


# --- store commands: no credentials, no server, no data dir, missing tables ----------------------------------


@pytest.mark.usefixtures("no_aws_credentials")
@pytest.mark.parametrize("argv", STORE_COMMANDS, ids=" ".join)
def test_store_commands_without_aws_credentials_fail_in_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert "no AWS credentials" in error_line(capsys.readouterr().err)


@pytest.mark.usefixtures("clean_environment")
@pytest.mark.parametrize("argv", STORE_COMMANDS, ids=" ".join)
def test_store_commands_when_the_server_is_not_running_fail_in_one_line(
    argv: list[str], data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    point_at(data_dir, f"http://127.0.0.1:{port}", "clidown")
    assert main([*argv, "--data-dir", str(data_dir.path)]) == 2
    line = error_line(capsys.readouterr().err)
    assert f"cannot reach the store at http://127.0.0.1:{port}" in line and "flowledger serve" in line


@pytest.mark.usefixtures("clean_environment")
def test_store_commands_without_a_data_dir_or_local_json_fail_in_one_line(
    data_dir: DataDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["backlog", "status", "--data-dir", str(tmp_path / "missing")]) == 2
    assert "no local.json" in error_line(capsys.readouterr().err)
    (data_dir.path / "local.json").write_text("{not json")
    assert main(["audit", "verify", "--data-dir", str(data_dir.path)]) == 2
    assert "local.json is unreadable" in error_line(capsys.readouterr().err)


@pytest.mark.usefixtures("clean_environment")
def test_missing_tables_fail_in_one_line_naming_the_fix(
    data_dir: DataDir, locked_moto: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    point_at(data_dir, locked_moto, "clinotables")
    assert main(["backlog", "status", "--data-dir", str(data_dir.path)]) == 2
    assert "no such table or bucket (ResourceNotFoundException" in error_line(capsys.readouterr().err)
    # The same store reached as AWS would be: credentials in the environment, no data dir.
    monkeypatch.setenv("AWS_ENDPOINT_URL", locked_moto)
    monkeypatch.setenv("FLOWLEDGER_RESOURCE_PREFIX", "clinotables")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert main(["audit", "verify"]) == 2
    assert "deploy the stack" in error_line(capsys.readouterr().err)


# --- knowledge ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make_bad", "message"),
    [
        (lambda d: d / "missing.md", "missing.md: No such file or directory"),
        (lambda d: (d / "folder.md").mkdir() or d / "folder.md", "folder.md: not a file"),
        (lambda d: (d / "slides.pptx").write_bytes(b"x") and d / "slides.pptx", "slides.pptx: only"),
        (lambda d: (d / "latin.txt").write_bytes(b"caf\xe9") and d / "latin.txt", "latin.txt: not UTF-8"),
    ],
    ids=["missing", "directory", "unsupported", "not-utf8"],
)
def test_knowledge_add_checks_every_file_before_writing_any(
    store: Services,
    data_dir: DataDir,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    make_bad: Any,
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.md").write_text("# A\n\nThe good file comes first.")
    bad = make_bad(tmp_path)
    assert main(["knowledge", "add", "a.md", bad.name, "--data-dir", str(data_dir.path)]) == 2
    assert message in error_line(capsys.readouterr().err)
    assert knowledge_items(store) == [] and stored_bodies(store) == []


def test_knowledge_add_keys_files_by_path_and_only_changed_bytes_make_a_version(
    store: Services,
    data_dir: DataDir,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "ops.md").write_text(f"# Ops {folder.upper()}\n\nRunbook of team {folder}.")
    target = ["--data-dir", str(data_dir.path)]
    assert main(["knowledge", "add", "a/ops.md", "b/ops.md", *target]) == 0
    assert main(["knowledge", "add", "./a/ops.md", *target]) == 0  # the same file, the same bytes
    (tmp_path / "b" / "ops.md").write_text("# Ops B\n\nThe runbook changed.")
    assert main(["knowledge", "add", str(tmp_path / "b" / "ops.md"), *target]) == 0  # absolute, inside cwd
    out = capsys.readouterr().out.splitlines()
    assert "  v1  unchanged  Ops A  (a/ops.md)" in out[2] and "  v2  1 chunks  Ops B  (b/ops.md)" in out[3]
    assert main(["knowledge", "list", "--json", *target]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(d["source_name"], d["title"], d["version"], d["chunks"]) for d in listed] == [
        ("a/ops.md", "Ops A", 1, 1),
        ("b/ops.md", "Ops B", 2, 1),
    ]
    assert len(stored_bodies(store)) == 3  # a v1, b v1, b v2: re-adding a wrote no body


def test_knowledge_list_prints_a_table_of_the_documents(
    store: Services,
    data_dir: DataDir,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["knowledge", "list", "--data-dir", str(data_dir.path)]) == 0
    assert capsys.readouterr().err == "no documents\n"
    (tmp_path / "guide.md").write_text("# Guide\n\nHow to run the ledger.")
    assert main(["knowledge", "add", "guide.md", "--data-dir", str(data_dir.path)]) == 0
    document_id = capsys.readouterr().out.split()[0]
    assert main(["knowledge", "list", "--data-dir", str(data_dir.path)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["DOCUMENT", "VERSION", "CHUNKS", "TITLE", "SOURCE"]
    assert row.split() == [document_id, "1", "1", "Guide", "guide.md"]


def test_knowledge_remove_deletes_the_document_and_an_unknown_id_is_one_line(
    store: Services,
    data_dir: DataDir,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    target = ["--data-dir", str(data_dir.path)]
    (tmp_path / "guide.md").write_text("# Guide\n\nHow to run the ledger.")
    assert main(["knowledge", "add", "guide.md", *target]) == 0
    document_id = capsys.readouterr().out.split()[0]
    assert main(["knowledge", "remove", document_id, *target]) == 0
    assert capsys.readouterr().out.startswith(f"removed {document_id}  v1  1 chunks  Guide")
    assert [items["sk"]["S"] for items in knowledge_items(store)] == ["meta"]  # only the corpus version is left
    assert stored_bodies(store) == []
    assert main(["knowledge", "remove", document_id, *target]) == 2
    assert f"no document {document_id}" in error_line(capsys.readouterr().err)
    assert main(["knowledge", "remove", "guide.md", *target]) == 2
    assert "not a document id" in error_line(capsys.readouterr().err)


# --- audit -------------------------------------------------------------------------------------------------


def test_audit_verify_counts_what_it_checked_on_its_last_line(
    store: Services, data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [
        store.ledger.append(AuditEntry(action="reasoning.flow.started", actor="user:a", subject=f"flow:{n}"))
        for n in range(12)
    ]
    take_checkpoint(store.ledger, checkpoints_of(store), store)
    assert main(["audit", "verify", "--data-dir", str(data_dir.path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "ledger verified: 12 events in 16 chains and 1 checkpoint"
    victim = events[7]
    store.aws.dynamodb.update_item(
        TableName=store.aws.table_name("ledger"),
        Key={"chain_id": {"S": victim.chain_id}, "seq": {"N": str(victim.seq)}},
        UpdateExpression="SET payload = :p",
        ExpressionAttributeValues={":p": {"M": {"n": {"N": "9"}}}},
    )
    assert main(["audit", "verify", "--chain", victim.chain_id, "--data-dir", str(data_dir.path)]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("ledger verification FAILED: checked ") and last.endswith(" in 1 chain and 1 checkpoint")


def test_counts_are_grouped_by_thousands_and_singular_for_one() -> None:
    assert (counted(1234, "event"), counted(1, "chain"), counted(0, "checkpoint")) == (
        "1,234 events",
        "1 chain",
        "0 checkpoints",
    )


def test_audit_verify_of_an_unknown_chain_is_one_line(
    store: Services, data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "verify", "--chain", "chain-016", "--data-dir", str(data_dir.path)]) == 2
    assert "no chain chain-016 (the chains are chain-000 to chain-015)" in error_line(capsys.readouterr().err)


@pytest.mark.usefixtures("no_aws_credentials")
def test_audit_proof_checks_its_arguments_before_reaching_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # With no credentials anywhere, reaching the store would fail with another message.
    assert main(["audit", "proof", "not-an-id"]) == 2
    assert "not an event id" in error_line(capsys.readouterr().err)
    assert main(["audit", "proof", "chain-001.4", "--out", str(tmp_path / "nowhere" / "p.json")]) == 2
    assert "no directory" in error_line(capsys.readouterr().err)
    assert main(["audit", "check-proof", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: No such file or directory" in error_line(capsys.readouterr().err)


# --- chat --------------------------------------------------------------------------------------------------


@dataclass
class ScriptedChat:
    """A loopback server answering ``POST /api/chat`` with one scripted response."""

    status: int = 200
    body: bytes = b""
    content_type: str = "text/event-stream"
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""


def sse(*events: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode() for kind, data in events)


START = ("start", {"session_id": "ses_1", "run_id": "run_1"})
CONTENT = ("content", {"content": {"text": "Checkpoints run every five minutes.", "references": []}})
DONE = ("done", {"status": "SUCCESS", "intent": "KNOWLEDGE_QUERY", "model": "offline"})


@pytest.fixture
def chat_server() -> Iterator[ScriptedChat]:
    script = ScriptedChat()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append({"path": self.path, "auth": self.headers["Authorization"], "body": body})
            self.send_response(script.status)
            self.send_header("Content-Type", script.content_type)
            self.send_header("Content-Length", str(len(script.body)))
            self.end_headers()
            self.wfile.write(script.body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True).start()
    script.url = f"http://127.0.0.1:{server.server_port}"
    yield script
    server.shutdown()
    server.server_close()


def ask(server_url: str, *extra: str) -> int:
    return main(["chat", "when are checkpoints taken?", "--url", server_url, "--token", "tok", *extra])


def test_chat_streams_the_answer_and_exits_0_when_it_is_done(
    chat_server: ScriptedChat, capsys: pytest.CaptureFixture[str]
) -> None:
    chat_server.body = sse(START, ("status", {"code": "ROUTED_KNOWLEDGE_QUERY"}), CONTENT, DONE)
    assert ask(chat_server.url, "--session", "ses_1") == 0
    assert capsys.readouterr().out == "Checkpoints run every five minutes.\n"
    assert chat_server.requests == [
        {
            "path": "/api/chat",
            "auth": "Bearer tok",
            "body": {"query": "when are checkpoints taken?", "session_id": "ses_1"},
        }
    ]


def test_chat_exits_1_when_the_stream_ends_with_an_error_event(
    chat_server: ScriptedChat, capsys: pytest.CaptureFixture[str]
) -> None:
    chat_server.body = sse(START, ("error", {"code": "MODEL_UNAVAILABLE", "message": "no answer could be published"}))
    assert ask(chat_server.url) == 1
    assert error_line(capsys.readouterr().err.split("\n", 1)[1]) == (
        "flowledger: error: MODEL_UNAVAILABLE: no answer could be published\n"
    )


def test_chat_exits_1_when_the_stream_stops_before_done(
    chat_server: ScriptedChat, capsys: pytest.CaptureFixture[str]
) -> None:
    chat_server.body = sse(START, CONTENT)
    assert ask(chat_server.url) == 1
    assert "the stream ended before the answer was done" in capsys.readouterr().err


def test_chat_prints_the_servers_message_when_it_answers_an_error(
    chat_server: ScriptedChat, capsys: pytest.CaptureFixture[str]
) -> None:
    chat_server.status, chat_server.content_type = 401, "application/json"
    chat_server.body = json.dumps({"error": "unauthorized", "message": "the token has expired"}).encode()
    assert ask(chat_server.url) == 2
    assert error_line(capsys.readouterr().err) == "flowledger: error: the server answered 401: the token has expired\n"


def test_chat_without_a_server_fails_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    assert ask(url) == 2
    assert (
        error_line(capsys.readouterr().err)
        == f"flowledger: error: cannot reach {url}: is `flowledger serve` running?\n"
    )
    assert ask("127.0.0.1:8000") == 2
    assert "must start with http://" in error_line(capsys.readouterr().err)
    assert main(["chat", "hi", "--data-dir", str(tmp_path / "missing")]) == 2
    assert "no local.json" in error_line(capsys.readouterr().err)


def test_recount_rebuilds_lost_counters_from_the_rows_and_prints_them(
    store: Services, data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """An upgraded deployment: rows written, then their counters lost; the recount makes the view right again."""
    from flowledger.research.backlog import Backlog
    from flowledger.research.synthetic import enqueue_synthetic

    enqueue_synthetic(Backlog(store), 3, "recount")
    table = store.aws.table_name("backlog")
    for item in store.aws.dynamodb.scan(TableName=table)["Items"]:
        if item["request_id"]["S"].startswith("#counts#"):
            store.aws.dynamodb.delete_item(TableName=table, Key={"request_id": item["request_id"]})
    assert Backlog(store).view().status_distribution["pending"] == 0  # the counters are gone
    assert main(["backlog", "recount", "--data-dir", str(data_dir.path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status:pending"] == 3
    assert Backlog(store).view().status_distribution["pending"] == 3
    actions = [e.action for chain in store.ledger.chain_ids() for e in store.ledger.read_chain(chain)]
    assert "memory.job.backlog_counters.recounted" in actions
    assert main(["pathways", "recount", "--data-dir", str(data_dir.path)]) == 0
    assert capsys.readouterr().out.startswith("recounted the pathways counters:")
