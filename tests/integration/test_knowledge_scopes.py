"""The knowledge index by scope on moto: isolation, versions, bounds, the cache, requests, migration, the CLI."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowledger.cli import main
from flowledger.config import load_settings
from flowledger.errors import InvalidInput, NotFound
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.knowledge.scope_cache import ScopeCache
from flowledger.knowledge.scopes import MAX_SCOPES_PER_LOOKUP, ScopeFull
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.services import Services, build_services

FIXTURES = Path(__file__).parents[1] / "fixtures" / "knowledge"


@pytest.fixture
def calls(services: Services) -> Iterator[Counter[str]]:
    """DynamoDB operations made, counted with botocore's event hooks (cleared by the test when it measures)."""
    counter: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        counter[event_name.rsplit(".", 1)[-1]] += 1

    services.aws.dynamodb.meta.events.register("before-call.dynamodb.*", count)
    yield counter
    services.aws.dynamodb.meta.events.unregister("before-call.dynamodb.*", count)


def measured(calls: Counter[str], action: Any) -> dict[str, int]:
    calls.clear()
    action()
    return dict(calls)


def knowledge_items(services: Services) -> list[dict[str, Any]]:
    return services.aws.dynamodb.scan(TableName=services.aws.table_name("knowledge"))["Items"]  # type: ignore[no-any-return]


def bodies(services: Services) -> list[str]:
    listed = services.aws.s3.list_object_versions(Bucket=services.aws.bucket_name("documents"))
    return sorted(entry["Key"] for entry in listed.get("Versions", []))


def titles(index: KnowledgeIndex, query: str, scopes: Any = ("global",)) -> list[tuple[str, str]]:
    return [(hit.scope, hit.title) for hit in index.lookup(query, scopes=scopes).documents]


# --- isolation -------------------------------------------------------------------------------------------


def test_a_document_in_one_scope_is_found_only_within_that_scope(services: Services) -> None:
    index = KnowledgeIndex(services)
    index.add_document("zebras.md", b"# Zebras\n\nZebras graze the savanna.", scope="workspace:a")
    index.add_document("giraffes.md", b"# Giraffes\n\nGiraffes graze the treetops.")
    index.add_document("notes.md", b"# Notes\n\nThe notes of a chat upload about zebras.", scope="conversation:ses_1")
    assert index.lookup("zebras", scopes=["workspace:b"]).evidence == "NO_EVIDENCE"
    assert titles(index, "zebras") == [] and index.lookup("zebras").evidence == "NO_EVIDENCE"
    assert titles(index, "zebras", ["workspace:a"]) == [("workspace:a", "Zebras")]
    assert titles(index, "graze", ["workspace:a", "global"]) == [("workspace:a", "Zebras"), ("global", "Giraffes")]
    assert {scope for scope, _ in titles(index, "zebras", ["conversation:ses_1", "workspace:a"])} == {
        "conversation:ses_1",
        "workspace:a",
    }
    assert index.lookup("zebras", scopes=[]).evidence == "NO_EVIDENCE"
    # Now that workspace:a and the conversation are cached here, they still answer only when named.
    assert titles(index, "zebras", ["workspace:b"]) == titles(index, "zebras") == []
    assert [d.title for d in index.all_documents("workspace:a")] == ["Zebras"]
    assert [d.title for d in index.all_documents()] == ["Giraffes"]


def test_the_same_document_id_in_two_scopes_is_two_documents(services: Services) -> None:
    index = KnowledgeIndex(services)
    a = index.add_document("x.md", b"# A\n\nAbout zebras.", scope="workspace:a", document_id="fam_1").document
    b = index.add_document("x.md", b"# B\n\nAbout zebras too.", scope="workspace:b", document_id="fam_1").document
    assert (a.scope, a.version, b.scope, b.version) == ("workspace:a", 1, "workspace:b", 1)
    index.remove_document("fam_1", scope="workspace:a")
    assert titles(index, "zebras", ["workspace:a", "workspace:b"]) == [("workspace:b", "B")]
    assert bodies(services) == ["scoped/workspace:b/fam_1/v1/x.md"]  # b's body was not under a's prefix
    with pytest.raises(NotFound, match="no document fam_1 in workspace:a"):
        index.remove_document("fam_1", scope="workspace:a")


@pytest.mark.parametrize(
    "scopes",
    [["workspace"], ["workspace:"], ["team:a"], ["workspace:a/b"], ["workspace:a#b"], "global"],
    ids=["no-id", "empty-id", "unknown-kind", "slash", "hash", "bare-string"],
)
def test_a_malformed_scope_is_refused_before_anything_is_read(
    services: Services, calls: Counter[str], scopes: Any
) -> None:
    with pytest.raises(InvalidInput, match="scope"):
        KnowledgeIndex(services).lookup("zebras", scopes=scopes)
    assert not calls


def test_a_lookup_names_at_most_the_bound_of_scopes(services: Services, calls: Counter[str]) -> None:
    index = KnowledgeIndex(services)
    at_bound = [f"workspace:w{n}" for n in range(MAX_SCOPES_PER_LOOKUP)]
    assert index.lookup("zebras", scopes=[*at_bound, *at_bound]).evidence == "NO_EVIDENCE"  # duplicates count once
    with pytest.raises(InvalidInput, match=f"at most {MAX_SCOPES_PER_LOOKUP} scopes, not {MAX_SCOPES_PER_LOOKUP + 1}"):
        measured(calls, lambda: index.lookup("zebras", scopes=[*at_bound, "global"]))
    assert not calls


def test_a_lookup_over_more_chunks_than_it_may_rank_is_a_clear_422(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = KnowledgeIndex(services)
    for scope in ("workspace:a", "workspace:b"):
        index.add_document("z.md", b"# Z\n\n" + b"\n\n".join(b"zebras " * 120 for _ in range(3)), scope=scope)
    monkeypatch.setattr("flowledger.knowledge.index.MAX_LOOKUP_CHUNKS", 5)
    assert index.lookup("zebras", scopes=["workspace:a"]).evidence == "FOUND"
    with pytest.raises(InvalidInput, match="the 2 scopes hold 6 chunks; a lookup ranks at most 5"):
        index.lookup("zebras", scopes=["workspace:a", "workspace:b"])


# --- versions --------------------------------------------------------------------------------------------


def chunk_sks(services: Services, scope: str) -> list[str]:
    return sorted(
        item["sk"]["S"]
        for item in knowledge_items(services)
        if item["pk"]["S"] == f"scope#{scope}" and item["sk"]["S"].startswith("chunk#")
    )


def marker(services: Services, scope: str) -> dict[str, int]:
    item = services.aws.dynamodb.get_item(
        TableName=services.aws.table_name("knowledge"), Key={"pk": {"S": f"scope#{scope}"}, "sk": {"S": "meta"}}
    )["Item"]
    return {name: int(item[name]["N"]) for name in ("version", "documents", "chunks")}


def test_re_adding_a_document_id_replaces_its_chunks_with_the_new_version(services: Services) -> None:
    index = KnowledgeIndex(services)
    old = b"# Herd\n\n" + b"\n\n".join(b"Zebras in the herd " * 40 for _ in range(4))
    first = index.add_document("herd-v1.md", old, scope="workspace:a", document_id="fam_herd").document
    assert first.chunks > 1 and index.lookup("zebras", scopes=["workspace:a"]).documents[0].version == 1
    second = index.add_document(
        "herd-v2.md", b"# Herd\n\nNow giraffes.", scope="workspace:a", document_id="fam_herd"
    ).document
    assert (second.document_id, second.version, second.chunks) == ("fam_herd", 2, 1)
    assert index.lookup("zebras", scopes=["workspace:a"]).evidence == "NO_EVIDENCE"
    assert index.lookup("giraffes", scopes=["workspace:a"]).documents[0].version == 2
    assert len(chunk_sks(services, "workspace:a")) == 1  # the old version's chunks are gone from the table
    assert marker(services, "workspace:a") | {"version": 0} == {"version": 0, "documents": 1, "chunks": 1}
    assert bodies(services) == [
        "scoped/workspace:a/fam_herd/v1/herd-v1.md",
        "scoped/workspace:a/fam_herd/v2/herd-v2.md",
    ]


def test_chunks_of_another_generation_never_answer_and_the_next_add_clears_them(services: Services) -> None:
    index = KnowledgeIndex(services)
    index.add_document("herd.md", b"# Herd\n\nNow giraffes.", scope="workspace:a", document_id="fam_herd")
    # What a re-add cut short between its chunk writes and its switch leaves: chunks of a generation
    # the document item does not point at (here about zebras).
    table = services.aws.table_name("knowledge")
    services.aws.dynamodb.put_item(
        TableName=table,
        Item={
            "pk": {"S": "scope#workspace:a"},
            "sk": {"S": "chunk#fam_herd#0badc0de0badc0de#0000"},
            "document_id": {"S": "fam_herd"},
            "title": {"S": "Herd"},
            "version": {"N": "2"},
            "generation": {"S": "0badc0de0badc0de"},
            "text": {"S": "Zebras, from an add that never finished."},
        },
    )
    services.aws.dynamodb.update_item(  # and a version bump, so every process re-reads the scope
        TableName=table,
        Key={"pk": {"S": "scope#workspace:a"}, "sk": {"S": "meta"}},
        UpdateExpression="ADD version :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    assert KnowledgeIndex(services).lookup("zebras", scopes=["workspace:a"]).evidence == "NO_EVIDENCE"
    assert index.lookup("zebras", scopes=["workspace:a"]).evidence == "NO_EVIDENCE"
    index.add_document("herd.md", b"# Herd\n\nGiraffes again.", scope="workspace:a", document_id="fam_herd")
    assert len(chunk_sks(services, "workspace:a")) == 1 and "0badc0de" not in str(chunk_sks(services, "workspace:a"))


def test_another_process_sees_adds_re_adds_and_removals_on_its_next_lookup(services: Services) -> None:
    reader, writer = KnowledgeIndex(services), KnowledgeIndex(services)
    scopes = ["workspace:a"]
    assert reader.lookup("giraffes", scopes=scopes).evidence == "NO_EVIDENCE"
    writer.add_document("a.md", b"# A\n\nZebras.", scope="workspace:a")
    assert reader.lookup("zebras", scopes=scopes).evidence == "FOUND"  # now cached at this version
    writer.add_document("a.md", b"# A\n\nGiraffes.", scope="workspace:a")
    assert [d.version for d in reader.lookup("giraffes", scopes=scopes).documents] == [2]
    assert reader.lookup("zebras", scopes=scopes).evidence == "NO_EVIDENCE"
    writer.remove_document(writer.all_documents("workspace:a")[0].document_id, scope="workspace:a")
    assert reader.lookup("giraffes", scopes=scopes).evidence == "NO_EVIDENCE"


# --- bounds ----------------------------------------------------------------------------------------------


def test_a_scope_full_of_documents_refuses_one_more_with_nothing_written(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("flowledger.knowledge.index.MAX_SCOPE_DOCUMENTS", 2)
    index = KnowledgeIndex(services)
    index.add_document("a.md", b"# A\n\nOne.", scope="workspace:a")
    index.add_document("b.md", b"# B\n\nTwo.", scope="workspace:a")
    before, stored = knowledge_items(services), bodies(services)
    with pytest.raises(ScopeFull, match="workspace:a holds 2 documents"):
        index.add_document("c.md", b"# C\n\nThree.", scope="workspace:a")
    assert (knowledge_items(services), bodies(services)) == (before, stored)
    assert index.add_document("a.md", b"# A\n\nOne, changed.", scope="workspace:a").document.version == 2
    index.add_document("c.md", b"# C\n\nThree.", scope="workspace:b")  # another scope has its own room
    index.remove_document(index.all_documents("workspace:a")[0].document_id, scope="workspace:a")
    index.add_document("c.md", b"# C\n\nThree.", scope="workspace:a")


def test_a_scope_full_of_chunks_refuses_a_document_that_would_pass_the_bound(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("flowledger.knowledge.index.MAX_SCOPE_CHUNKS", 4)
    index = KnowledgeIndex(services)
    three = b"# T\n\n" + b"\n\n".join(b"zebras " * 120 for _ in range(3))
    assert index.add_document("t.md", three, scope="workspace:a").document.chunks == 3
    with pytest.raises(ScopeFull, match="holds 3 of at most 4 chunks; this document needs 2 more"):
        index.add_document("u.md", b"# U\n\n" + b"\n\n".join(b"lions " * 120 for _ in range(2)), scope="workspace:a")
    four = three + b"\n\n" + b"giraffes " * 100
    assert index.add_document("t.md", four, scope="workspace:a").document.chunks == 4  # replacing counts the delta
    assert marker(services, "workspace:a")["chunks"] == 4


def test_the_write_itself_refuses_to_pass_a_bound_a_concurrent_add_filled(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before writing reads a count another add may change: the transaction's condition decides."""
    monkeypatch.setattr("flowledger.knowledge.index.MAX_SCOPE_DOCUMENTS", 1)
    index = KnowledgeIndex(services)
    other = KnowledgeIndex(build_services(load_settings(), EMBEDDED_CREDENTIALS))  # another process's clients
    raced: list[str] = []

    def add_concurrently(**_: Any) -> None:
        # Another process's add lands after this add checked the room and before it switches its version in.
        if not raced:
            raced.append("b.md")
            other.add_document("b.md", b"# B\n\nTwo.", scope="workspace:a")

    services.aws.dynamodb.meta.events.register("before-call.dynamodb.TransactWriteItems", add_concurrently)
    with pytest.raises(ScopeFull, match="workspace:a holds 1 documents"):
        index.add_document("a.md", b"# A\n\nOne.", scope="workspace:a")
    assert raced and [d.source_name for d in index.all_documents("workspace:a")] == ["b.md"]
    assert marker(services, "workspace:a")["documents"] == 1
    assert [key for key in bodies(services) if "a.md" in key] == [] and len(chunk_sks(services, "workspace:a")) == 1


# --- the cache and the requests --------------------------------------------------------------------------


def test_the_cache_never_holds_more_than_its_scopes_and_chunks_and_evicts_the_least_recent(
    services: Services, calls: Counter[str]
) -> None:
    writer = KnowledgeIndex(services)
    for n in range(12):
        paragraphs = b"\n\n".join(b"zebras " * 120 for _ in range(1 + n % 3))  # 1, 2 or 3 chunks
        writer.add_document("z.md", b"# Z\n\n" + paragraphs, scope=f"workspace:w{n}")
    index = KnowledgeIndex(services, cache=ScopeCache(max_scopes=4, max_chunks=7))
    for n in range(12):
        assert index.lookup("zebras", scopes=[f"workspace:w{n}"]).evidence == "FOUND"
        held = [index.cache.get(scope) for scope in index.cache.scopes]
        assert len(held) <= 4 and index.cache.chunk_count == sum(len(c.chunks) for c in held if c) <= 7
    for n in (9, 10, 11):
        index.lookup("zebras", scopes=[f"workspace:w{n}"])  # w9 (1 chunk), w10 (2), w11 (3): 6 chunks
    assert index.cache.scopes == ("workspace:w9", "workspace:w10", "workspace:w11")
    assert measured(calls, lambda: index.lookup("zebras", scopes=["workspace:w9"])) == {"BatchGetItem": 1}
    index.lookup("zebras", scopes=["workspace:w0"])  # 1 chunk more is 7: still fits
    index.lookup("zebras", scopes=["workspace:w1"])  # 2 more: w10, the least recently used, goes
    assert index.cache.scopes == ("workspace:w11", "workspace:w9", "workspace:w0", "workspace:w1")
    assert measured(calls, lambda: index.lookup("zebras", scopes=["workspace:w10"])) == {"BatchGetItem": 1, "Query": 1}


def test_lookup_requests_grow_with_the_scopes_searched_never_with_the_corpus(
    services: Services, calls: Counter[str]
) -> None:
    writer = KnowledgeIndex(services)
    for n in range(50):
        writer.add_document("z.md", f"# Z{n}\n\nZebras of herd {n}.".encode(), scope=f"workspace:w{n}")
    warm = KnowledgeIndex(services)

    def requests(scopes: int, index: KnowledgeIndex) -> dict[str, int]:
        return measured(calls, lambda: index.lookup("zebras herd", scopes=[f"workspace:w{n}" for n in range(scopes)]))

    cold = {k: requests(k, KnowledgeIndex(services)) for k in (1, 10, 50)}
    assert cold == {k: {"BatchGetItem": 1, "Query": k} for k in (1, 10, 50)}  # one read per scope, once
    for k in (1, 10, 50):
        requests(k, warm)
    assert {k: requests(k, warm) for k in (1, 10, 50)} == {k: {"BatchGetItem": 1} for k in (1, 10, 50)}
    for n in range(50, 90):  # the corpus grows, in scopes this lookup does not search
        writer.add_document("z.md", f"# Z{n}\n\nZebras of herd {n}.".encode(), scope=f"workspace:w{n}")
    writer.add_document("g.md", b"# G\n\nZebras everywhere.")
    assert {k: requests(k, warm) for k in (1, 10, 50)} == {k: {"BatchGetItem": 1} for k in (1, 10, 50)}
    assert {k: requests(k, KnowledgeIndex(services)) for k in (1, 10, 50)} == cold
    writer.add_document("z.md", b"# Z3\n\nZebras of herd three, changed.", scope="workspace:w3")
    assert requests(10, warm) == {"BatchGetItem": 1, "Query": 1}  # only the scope that moved is read again


# --- listing ---------------------------------------------------------------------------------------------


def test_documents_are_listed_page_by_page_and_a_cursor_belongs_to_its_scope(services: Services) -> None:
    index = KnowledgeIndex(services)
    for n in range(5):
        index.add_document(f"d{n}.md", f"# D{n}\n\nText {n}.".encode(), scope="workspace:a", document_id=f"fam_{n}")
    pages, cursor = [], None
    while True:
        page = index.list_documents("workspace:a", limit=2, cursor=cursor)
        pages.append([d.document_id for d in page.documents])
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == [["fam_0", "fam_1"], ["fam_2", "fam_3"], ["fam_4"]]
    first = index.list_documents("workspace:a", limit=2)
    assert first.next_cursor is not None
    with pytest.raises(InvalidInput, match="cursor is not one this API returned"):
        index.list_documents("workspace:b", limit=2, cursor=first.next_cursor)
    with pytest.raises(InvalidInput, match="limit must be 1 to 100"):
        index.list_documents("workspace:a", limit=101)
    assert index.list_documents("workspace:a", limit=5).next_cursor is None  # no empty page after the last


# --- the single-corpus store -----------------------------------------------------------------------------


def restore_single_corpus_store(services: Services) -> dict[str, Any]:
    """The items and bodies the single-corpus index wrote (captured from it), put back as a restored store."""
    saved = json.loads((FIXTURES / "single-corpus-store.json").read_text())
    for item in saved["items"]:
        services.aws.dynamodb.put_item(TableName=services.aws.table_name("knowledge"), Item=item)
    for key, body in saved["bodies"].items():
        services.aws.s3.put_object(Bucket=services.aws.bucket_name("documents"), Key=key, Body=body.encode())
    return saved  # type: ignore[no-any-return]


def test_a_single_corpus_store_answers_for_global_after_its_first_lookup_moves_it(services: Services) -> None:
    saved = restore_single_corpus_store(services)
    checkout = next(
        i["document_id"]["S"] for i in saved["items"] if i["sk"]["S"].startswith("doc#") and "heckout" in str(i)
    )
    # A chunk past the document's count, as a shorter re-add cut short would have left it: not current.
    services.aws.dynamodb.put_item(
        TableName=services.aws.table_name("knowledge"),
        Item={
            "pk": {"S": "corpus"},
            "sk": {"S": f"chunk#{checkout}#0001"},
            "document_id": {"S": checkout},
            "title": {"S": "Checkout runbook"},
            "version": {"N": "1"},
            "text": {"S": "Zebras from the first version."},
        },
    )
    index = KnowledgeIndex(services)
    found = index.lookup("restart checkout workers payment queue").documents
    assert [(d.scope, d.title, d.version) for d in found] == [("global", "Checkout runbook", 2)]
    assert index.lookup("zebras").evidence == "NO_EVIDENCE"
    assert not [item for item in knowledge_items(services) if item["pk"]["S"] == "corpus"]
    assert marker(services, "global") | {"version": 0} == {"version": 0, "documents": 2, "chunks": 2}
    assert [(d.source_name, d.version) for d in KnowledgeIndex(services).all_documents()] == [
        ("policies/retention.md", 1),
        ("runbooks/checkout.md", 2),
    ]
    again = index.add_document(
        "runbooks/checkout.md",
        saved["bodies"][f"documents/{checkout}/v2/checkout.md"].encode(),
    )
    assert (again.new_version, again.document.version) == (False, 2)  # the same bytes are still known
    index.remove_document(checkout)
    assert not [key for key in bodies(services) if checkout in key]  # the bodies stayed where the index finds them
    assert titles(index, "audit checkpoints retained") == [("global", "Retention")]


def test_a_single_corpus_store_is_moved_by_a_first_write_too(services: Services) -> None:
    restore_single_corpus_store(services)
    index = KnowledgeIndex(services)
    index.add_document("new.md", b"# New\n\nZebras.")
    assert [d.source_name for d in index.all_documents()] == [
        "new.md",
        "policies/retention.md",
        "runbooks/checkout.md",
    ]
    assert titles(index, "checkout workers") == [("global", "Checkout runbook")]
    assert titles(index, "checkout workers", ["workspace:a"]) == []


# --- the CLI ---------------------------------------------------------------------------------------------


def test_the_knowledge_commands_take_a_scope(
    services: Services, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("flowledger.cli.store.services", lambda data_dir: services)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "guide.md").write_text("# Guide\n\nHow to run the ledger.")
    assert main(["knowledge", "add", "guide.md", "--scope", "workspace:ops"]) == 0
    document_id = capsys.readouterr().out.split()[0]
    assert main(["knowledge", "list"]) == 0
    assert capsys.readouterr().err == "no documents\n"
    assert main(["knowledge", "list", "--json", "--scope", "workspace:ops"]) == 0
    assert [(d["document_id"], d["scope"]) for d in json.loads(capsys.readouterr().out)] == [
        (document_id, "workspace:ops")
    ]
    assert main(["knowledge", "remove", document_id]) == 2
    assert f"no document {document_id}" in capsys.readouterr().err
    assert main(["knowledge", "remove", document_id, "--scope", "workspace:ops"]) == 0
    assert main(["knowledge", "list", "--scope", "team:x"]) == 2
    assert "not a knowledge scope" in capsys.readouterr().err
