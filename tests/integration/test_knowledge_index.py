"""The knowledge index on moto: chunks, versions, PDF text, BM25 and the hybrid blend."""

from __future__ import annotations

from typing import Any

import pytest

from flowledger.cli import main
from flowledger.errors import InvalidInput
from flowledger.knowledge.index import KnowledgeIndex, chunk_text, document_id_for
from flowledger.llm.embeddings import HashBucketEmbedding, OpenAIEmbedding
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
    assert index.add_document("notes.md", long_text.encode())["version"] == 1
    again = index.add_document("notes.md", b"# New\n\nNow the notes are about giraffes.")
    assert (again["version"], again["chunks"]) == (2, 1)
    assert index.lookup("zebras").evidence == "NO_EVIDENCE"  # another process sees the change too
    assert KnowledgeIndex(services).lookup("giraffes").documents[0].version == 2
    body = services.aws.s3.get_object(
        Bucket=services.aws.bucket_name("documents"), Key=f"documents/{document_id_for('notes.md')}/v2/notes.md"
    )["Body"].read()
    assert b"giraffes" in body


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
    model = OpenAIEmbedding("sk-test", scripted_openai.base_url, 5)
    vectors = model.embed(["one", "two"])
    assert [len(v) for v in vectors] == [128, 128] and vectors[0] != vectors[1]
    assert scripted_openai.requests[0]["dimensions"] == 128
    index = KnowledgeIndex(services, embeddings=model)
    index.add_document("a.md", b"# A\n\nledger checkpoints")
    assert index.lookup("ledger").documents[0].title == "A"


def test_knowledge_add_cli(
    services: Services, tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("flowledger.cli._store_services", lambda data_dir: services)
    good = tmp_path / "guide.md"
    good.write_text("# Guide\n\nHow to run the ledger.")
    assert main(["knowledge", "add", str(good)]) == 0
    assert "Guide" in capsys.readouterr().out
    bad = tmp_path / "slides.pptx"
    bad.write_bytes(b"x")
    assert main(["knowledge", "add", str(bad)]) == 2
    assert "supported" in capsys.readouterr().err
