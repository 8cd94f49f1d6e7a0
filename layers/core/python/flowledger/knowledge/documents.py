"""Documents before they are stored: the key rule, the checks, the text and its chunks (no I/O)."""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path, PurePath

from flowledger.errors import InvalidInput

CHUNK_CHARS = 900
MAX_DOCUMENT_BYTES = 5 * 1024 * 1024
MAX_CHUNKS_PER_DOCUMENT = 400
SUPPORTED = {".txt": "text", ".md": "markdown", ".markdown": "markdown", ".pdf": "pdf"}


@dataclass(frozen=True)
class PreparedDocument:
    """A document that passed every check, chunked and ready to store; nothing is written yet."""

    source_name: str
    body: bytes
    title: str
    source_kind: str
    chunks: tuple[str, ...]

    @property
    def document_id(self) -> str:
        return document_id_for(self.source_name)

    @property
    def file_name(self) -> str:
        return PurePath(self.source_name).name

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()


def document_id_for(source_name: str) -> str:
    """A stable id from the document's source name: adding the same source again makes a new version."""
    return "doc_" + hashlib.sha256(source_name.encode()).hexdigest()[:16]


def source_name_for(path: str | os.PathLike[str], cwd: Path) -> str:
    """The key of a file given on the command line: its path relative to ``cwd`` in posix form,
    or its absolute path when it lies outside ``cwd``.

    ``a/ops.md`` and ``b/ops.md`` are two documents; ``./a/../a/ops.md`` is ``a/ops.md``. The path
    is normalised as written (``normpath``), not resolved: a symlink is its own source.
    """
    absolute = Path(os.path.normpath(cwd / path))
    try:
        return absolute.relative_to(cwd).as_posix()
    except ValueError:
        return absolute.as_posix()


def check_source(source_name: str, size: int) -> str:
    """The source kind for a file of this name and size, checked before its bytes are read."""
    kind = SUPPORTED.get(PurePath(source_name).suffix.lower())
    if kind is None:
        raise InvalidInput(f"{source_name}: only {', '.join(sorted(SUPPORTED))} files are supported")
    if size > MAX_DOCUMENT_BYTES:
        raise InvalidInput(f"{source_name}: larger than {MAX_DOCUMENT_BYTES // (1024 * 1024)} MB")
    return kind


def prepare_document(source_name: str, body: bytes, title: str | None = None) -> PreparedDocument:
    """Check a text, Markdown or PDF document and cut it into chunks; raises :class:`InvalidInput`."""
    kind = check_source(source_name, len(body))
    text = pdf_text(source_name, body) if kind == "pdf" else _utf8(source_name, body)
    chunks = chunk_text(text)
    if not chunks:
        raise InvalidInput(f"{source_name}: no text to index")
    if len(chunks) > MAX_CHUNKS_PER_DOCUMENT:
        raise InvalidInput(f"{source_name}: more than {MAX_CHUNKS_PER_DOCUMENT} chunks")
    return PreparedDocument(source_name, body, title or _title(text, source_name), kind, tuple(chunks))


def chunk_text(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """Paragraph-aligned chunks of about ``size`` characters (a long paragraph is cut)."""
    chunks: list[str] = []
    current = ""
    for paragraph in [p.strip() for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]:
        while len(paragraph) > size:
            if current:
                chunks.append(current)
                current = ""
            chunks.append(paragraph[:size])
            paragraph = paragraph[size:]
        if current and len(current) + len(paragraph) + 2 > size:
            chunks.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        chunks.append(current)
    return chunks


def pdf_text(name: str, body: bytes) -> str:
    """The text of a PDF's pages (pypdf); scanned pages without a text layer give nothing."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(body))
        return "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)
    except (PdfReadError, ValueError) as exc:
        raise InvalidInput(f"{name}: not a readable PDF ({type(exc).__name__})") from None


def _utf8(name: str, body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{name}: not UTF-8 text") from None


def _title(text: str, name: str) -> str:
    stem = PurePath(name).stem
    for line in text.splitlines():
        if line.strip():
            return line.strip().lstrip("#").strip()[:120] or stem
    return stem
