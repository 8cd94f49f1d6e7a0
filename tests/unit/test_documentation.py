"""The README stays a front page (at most 300 lines, the two commands first) and every link a reader can
follow from it or from the documentation site lands somewhere: a file of the repository, and a heading of
that page when the link names one. The site's own links are checked by MkDocs in strict mode."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 300
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def relative_links(text: str) -> list[str]:
    """Every Markdown link target outside code blocks that is not a URL."""
    prose = FENCE.sub("", text)
    return [target for target in LINK.findall(prose) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def anchors(page: Path) -> set[str]:
    """The ids a page's headings get in the site (MkDocs' slugs), and the ids it sets itself (`{: #id }`)."""
    text = FENCE.sub("", page.read_text())
    ids = {slugify(re.sub(r"[`*]", "", heading), "-") for heading in re.findall(r"^#+ (.+)$", text, re.M)}
    return ids | set(re.findall(r"\{:? ?#([\w-]+) ?\}", text))


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in relative_links(page.read_text()):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or ROOT not in (resolved, *resolved.parents):
            broken.append(f"{target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: {resolved.name} has no heading #{anchor}")
    return broken


def test_the_readme_is_a_front_page_of_at_most_300_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move the reference into docs/"
    first_block = FENCE.search(README.read_text())
    assert first_block is not None
    # The two commands come first, worded as CI's .ci/run and the Makefile run them.
    assert first_block.start() < README.read_text().index("\n## ")
    assert "make run        # creates .venv, installs, starts the dev server on http://127.0.0.1:8000" in first_block[0]
    assert (
        "make test       # ruff, mypy, then unit, integration, infra, end-to-end, browser and real-model tests"
        in (first_block[0])
    )


def test_every_relative_link_of_the_readme_resolves() -> None:
    assert relative_links(README.read_text()), "the README links into docs/"
    assert broken_links(README) == []


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_relative_link_of_a_docs_page_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    """What `make docs` runs: any broken link, anchor or page left out of the nav fails the build."""
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "pathways" / "index.html").exists()
