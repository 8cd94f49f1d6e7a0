"""`flowledger knowledge add|list|remove`: the knowledge base's documents."""

from __future__ import annotations

import argparse
import json
import stat
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flowledger.cli import store
from flowledger.cli.failures import CommandFailed, read_file
from flowledger.cli.options import actions, command, json_option, scope_option, store_option
from flowledger.cli.text import shorten


def add_commands(commands: Any) -> None:
    """Add ``knowledge add``, ``knowledge list`` and ``knowledge remove``."""
    knowledge = actions(command(commands, "knowledge", "manage the knowledge base documents"), "knowledge_command")
    add = command(
        knowledge,
        "add",
        "index text, Markdown or PDF files",
        cmd_knowledge_add,
        "A file is keyed by its path relative to the current directory (absolute when outside it):"
        " adding it again with changed bytes makes a new version, with the same bytes changes nothing."
        " Every file is checked before the first one is stored.",
    )
    add.add_argument("files", nargs="+", metavar="FILE", help="the files to add (.txt, .md, .markdown, .pdf)")
    scope_option(add)
    store_option(add)
    listing = command(knowledge, "list", "the documents: id, version, chunks, title, source", cmd_knowledge_list)
    json_option(listing, "the documents")
    scope_option(listing)
    store_option(listing)
    remove = command(
        knowledge,
        "remove",
        "remove a document: its metadata, chunks and every stored version of its body",
        cmd_knowledge_remove,
    )
    remove.add_argument("document_id", help="the document's id (see `flowledger knowledge list`)")
    scope_option(remove)
    store_option(remove)


def cmd_knowledge_add(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from flowledger.knowledge.documents import prepare_document, source_name_for
    from flowledger.knowledge.index import KnowledgeIndex
    from flowledger.knowledge.scopes import check_scope

    # Every file is read and checked before the first write: one bad file leaves the store untouched.
    check_scope(args.scope)
    cwd, documents = Path.cwd(), []
    for name in tqdm(args.files, desc="checking", unit=" files", leave=False, disable=None, file=sys.stderr):
        source = source_name_for(name, cwd)
        documents.append(prepare_document(source, _read_document(name, source)))
    index = KnowledgeIndex(store.services(args.data_dir))
    for document in tqdm(documents, desc="indexing", unit=" files", disable=None, file=sys.stderr):
        added = index.add(document, scope=args.scope)
        stored = added.document
        change = f"{stored.chunks} chunks" if added.new_version else "unchanged"
        print(f"{stored.document_id}  v{stored.version}  {change}  {stored.title}  ({stored.source_name})")
    return 0


def _read_document(name: str, source: str) -> bytes:
    """The bytes of one file to index, its kind and size checked before it is read."""
    from flowledger.knowledge.documents import check_source

    try:
        status = Path(name).stat()
    except OSError as exc:
        raise CommandFailed(f"{name}: {exc.strerror or type(exc).__name__}") from None
    if not stat.S_ISREG(status.st_mode):
        raise CommandFailed(f"{name}: not a file")
    check_source(source, status.st_size)
    return read_file(name)


def cmd_knowledge_list(args: argparse.Namespace) -> int:
    from flowledger.knowledge.index import KnowledgeIndex
    from flowledger.knowledge.scopes import check_scope

    check_scope(args.scope)  # a malformed scope fails before any connection is made
    documents = KnowledgeIndex(store.services(args.data_dir)).all_documents(args.scope)
    if args.json:
        print(json.dumps([asdict(document) for document in documents], indent=2))
        return 0
    if not documents:
        print("no documents", file=sys.stderr)
        return 0
    titles = [shorten(document.title, 48) for document in documents]
    width = max(len(title) for title in [*titles, "TITLE"])
    print(f"{'DOCUMENT':<20}  {'VERSION':>7}  {'CHUNKS':>6}  {'TITLE':<{width}}  SOURCE")
    for document, title in zip(documents, titles, strict=True):
        print(
            f"{document.document_id:<20}  {document.version:>7}  {document.chunks:>6}  {title:<{width}}"
            f"  {document.source_name}"
        )
    return 0


def cmd_knowledge_remove(args: argparse.Namespace) -> int:
    from flowledger.knowledge.index import KnowledgeIndex
    from flowledger.knowledge.scopes import check_document_key, check_scope

    # A malformed id or scope fails before any connection is made.
    check_document_key(args.document_id)
    check_scope(args.scope)
    removed = KnowledgeIndex(store.services(args.data_dir)).remove_document(args.document_id, scope=args.scope)
    print(f"removed {removed.document_id}  v{removed.version}  {removed.chunks} chunks  {removed.title}")
    return 0
