"""The knowledge index on moto: chunks, keys, versions, removal, PDF text, BM25 and the hybrid blend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flowledger.cli import main
from flowledger.errors import InvalidInput, NotFound
from flowledger.knowledge.documents import chunk_text, document_id_for, source_name_for
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.llm.embeddings import HashBucketEmbedding, OpenAIEmbedding
from flowledger.llm.endpoint import ModelEndpoint
from flowledger.services import Services


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF with a text layer, offsets computed so any reader accepts it."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)


def test_chunks_follow_paragraphs_and_stay_bounded() -> None:
    text = "\n\n".join(f"Paragraph {n} " + "word " * 50 for n in range(10)) + "\n\n" + "x" * 2000
    chunks = chunk_text(text, size=900)
    assert all(len(chunk) <= 900 for chunk in chunks) and chunks[0].startswith("Paragraph 0")
    assert "".join(chunks).replace("\n", "").count("x") == 2000


def test_documents_are_ranked_with_bm25_and_missing_topics_have_no_evidence(services: Services) -> None:
    index = KnowledgeIndex(services)
    index.add_document("ledger.md", b"# Ledger\n\nThe ledger checkpoints its chains into a Merkle root.")
    index.add_document("consent.md", b"# Consent\n\nPatients opt in before reading narratives.")
    hit = index.lookup("how does the ledger checkpoint chains?")
    assert hit.evidence == "FOUND" and hit.documents[0].title == "Ledger"
    assert index.lookup("quantum gravity").evidence == "NO_EVIDENCE"


def test_adding_a_document_again_makes_a_new_version_and_drops_stale_chunks(services: Services) -> None:
    index = KnowledgeIndex(services)
    long_text = "# Old\n\n" + "\n\n".join("Paragraph about zebras " + "z " * 400 for _ in range(4))
    assert index.add_document("notes.md", long_text.encode()).document.version == 1
    again = index.add_document("notes.md", b"# New\n\nNow the notes are about giraffes.").document
    assert (again.version, again.chunks) == (2, 1)
    assert index.lookup("zebras").evidence == "NO_EVIDENCE"  # another process sees the change too
    assert KnowledgeIndex(services).lookup("giraffes").documents[0].version == 2
    body = services.aws.s3.get_object(
        Bucket=services.aws.bucket_name("documents"), Key=f"documents/{document_id_for('notes.md')}/v2/notes.md"
    )["Body"].read()
    assert b"giraffes" in body


def knowledge_items(services: Services) -> list[dict[str, Any]]:
    return services.aws.dynamodb.scan(TableName=services.aws.table_name("knowledge"))["Items"]  # type: ignore[no-any-return]


def body_versions(services: Services, document_id: str) -> list[dict[str, Any]]:
    listed = services.aws.s3.list_object_versions(
        Bucket=services.aws.bucket_name("documents"), Prefix=f"documents/{document_id}/"
    )
    return [*listed.get("Versions", []), *listed.get("DeleteMarkers", [])]


def test_identical_bytes_are_not_a_new_version_and_write_nothing(services: Services) -> None:
    index = KnowledgeIndex(services)
    first = index.add_document("notes.md", b"# Notes\n\nAbout giraffes.")
    before = knowledge_items(services)
    again = index.add_document("notes.md", b"# Notes\n\nAbout giraffes.")
    assert (again.new_version, again.document) == (False, first.document)
    assert knowledge_items(services) == before  # not even the corpus version moved
    assert len(body_versions(services, first.document.document_id)) == 1
    changed = index.add_document("notes.md", b"# Notes\n\nAbout zebras.")
    assert (changed.new_version, changed.document.version) == (True, 2)


def test_seeding_the_demo_documents_again_makes_no_new_versions(services: Services) -> None:
    from flowledger.local.devserver import seed_demo_documents  # the dev server seeds at every start

    seeded = seed_demo_documents(services)
    before = KnowledgeIndex(services).all_documents()
    assert seed_demo_documents(services) == seeded == len(before) > 0
    assert KnowledgeIndex(services).all_documents() == before
    assert {document.version for document in before} == {1}


def test_another_embedding_model_indexes_the_same_bytes_again(services: Services) -> None:
    KnowledgeIndex(services).add_document("a.md", b"# A\n\nledger checkpoints")
    again = KnowledgeIndex(services, embeddings=HashBucketEmbedding()).add_document(
        "a.md", b"# A\n\nledger checkpoints"
    )
    assert (again.new_version, again.document.embedding_model) == (True, HashBucketEmbedding.name)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("a/ops.md", "a/ops.md"),
        ("./a/../a/ops.md", "a/ops.md"),
        ("/work/docs/b/ops.md", "b/ops.md"),
        ("../elsewhere/ops.md", "/work/elsewhere/ops.md"),
        ("/srv/ops.md", "/srv/ops.md"),
    ],
)
def test_source_names_are_the_normalised_path_relative_to_the_current_directory(given: str, expected: str) -> None:
    assert source_name_for(given, Path("/work/docs")) == expected


def test_the_same_file_name_in_two_folders_is_two_documents(services: Services) -> None:
    index = KnowledgeIndex(services)
    a = index.add_document("a/ops.md", b"# Ops A\n\nRestart the ledger.").document
    b = index.add_document("b/ops.md", b"# Ops B\n\nRotate the keys.").document
    assert a.document_id != b.document_id and (a.version, b.version) == (1, 1)
    assert [(d.source_name, d.title) for d in index.all_documents()] == [("a/ops.md", "Ops A"), ("b/ops.md", "Ops B")]


def test_removing_a_document_deletes_its_metadata_chunks_and_every_body_version(services: Services) -> None:
    index = KnowledgeIndex(services)
    kept = index.add_document("kept.md", b"# Kept\n\nAbout giraffes.").document
    index.add_document("gone.md", b"# Gone\n\nAbout zebras.")
    gone = index.add_document("gone.md", b"# Gone\n\n" + b"\n\n".join(b"zebras " * 100 for _ in range(3))).document
    assert index.lookup("zebras").documents[0].document_id == gone.document_id
    assert index.remove_document(gone.document_id) == gone
    assert body_versions(services, gone.document_id) == []
    assert not [item for item in knowledge_items(services) if gone.document_id in str(item)]
    assert index.all_documents() == [kept] and len(body_versions(services, kept.document_id)) == 1
    assert KnowledgeIndex(services).lookup("zebras").evidence == "NO_EVIDENCE"  # another process sees it too
    assert index.lookup("zebras").evidence == "NO_EVIDENCE"


def test_removing_an_unknown_or_malformed_id_writes_nothing(services: Services) -> None:
    index = KnowledgeIndex(services)
    index.add_document("kept.md", b"# Kept\n\nAbout giraffes.")
    before = knowledge_items(services)
    with pytest.raises(NotFound, match="no document doc_0000000000000000"):
        index.remove_document("doc_0000000000000000")
    with pytest.raises(InvalidInput, match="not a document id"):
        index.remove_document("kept.md")
    assert knowledge_items(services) == before


def test_pdf_text_is_indexed(services: Services) -> None:
    index = KnowledgeIndex(services)
    index.add_document("policy.pdf", minimal_pdf("Retention of audit checkpoints is seven years"))
    assert index.lookup("how long are checkpoints retained?").documents[0].excerpt.startswith("Retention")


@pytest.mark.parametrize(
    ("name", "body", "message"),
    [
        ("slides.pptx", b"x", "supported"),
        ("empty.md", b"   \n\n ", "no text"),
        ("bad.txt", b"\xff\xfe\xfa", "UTF-8"),
        ("broken.pdf", b"%PDF-1.4 nonsense", "readable PDF"),
    ],
)
def test_bad_documents_are_rejected_with_nothing_written(
    services: Services, name: str, body: bytes, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        KnowledgeIndex(services).add_document(name, body)
    assert services.aws.dynamodb.scan(TableName=services.aws.table_name("knowledge"))["Count"] == 0


def test_hybrid_ranking_blends_in_embedding_cosine(services: Services) -> None:
    index = KnowledgeIndex(services, embeddings=HashBucketEmbedding())
    index.add_document("a.md", b"# A\n\nmerkle checkpoint ledger root chain")
    index.add_document("b.md", b"# B\n\nledger notes about lunch")
    found = index.lookup("ledger merkle checkpoint")
    assert [d.title for d in found.documents] == ["A", "B"]
    assert 0 < found.documents[1].score < found.documents[0].score <= 1.0


def test_openai_embeddings_through_the_adapter(services: Services, scripted_openai: Any) -> None:
    model = OpenAIEmbedding(lambda: ModelEndpoint("sk-test", scripted_openai.base_url, "unused"), 5)
    vectors = model.embed(["one", "two"])
    assert [len(v) for v in vectors] == [128, 128] and vectors[0] != vectors[1]
    assert scripted_openai.requests[0]["dimensions"] == 128
    index = KnowledgeIndex(services, embeddings=model)
    index.add_document("a.md", b"# A\n\nledger checkpoints")
    assert index.lookup("ledger").documents[0].title == "A"


def test_knowledge_add_cli(
    services: Services, tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("flowledger.cli.store.services", lambda data_dir: services)
    good = tmp_path / "guide.md"
    good.write_text("# Guide\n\nHow to run the ledger.")
    assert main(["knowledge", "add", str(good)]) == 0
    assert "Guide" in capsys.readouterr().out
    bad = tmp_path / "slides.pptx"
    bad.write_bytes(b"x")
    assert main(["knowledge", "add", str(bad)]) == 2
    assert "supported" in capsys.readouterr().err
