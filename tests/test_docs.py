"""The README and docs/ stay a house the next engineer can carry on.

The README gets a newcomer running in one screen (at most 200 lines) and sends the rest to
``docs/``; the docs build as a MkDocs site with ``--strict``, so a page missing from the
nav or a broken link fails. Every relative link of the README and of ``docs/*.md`` resolves
(the file, and the heading when it names one); prose lines stay within 120 characters and
table cells within 60: a table is for short facts, prose goes below it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
MKDOCS = Path(sys.executable).parent / "mkdocs"

README_MAX_LINES = 200
PROSE_MAX = 120
CELL_MAX = 60

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def outside_code(text: str) -> list[tuple[int, str]]:
    """(line number, line) for every line not inside a fenced code block."""
    lines: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slugify(title: str) -> str:
    """A heading's id as Python-Markdown's toc makes it (and GitHub, for simple titles)."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", ascii_title).strip().lower())


def anchors(page: Path) -> set[str]:
    """The ids MkDocs (Python-Markdown's toc) gives the page's headings."""
    seen: set[str] = set()
    for _, line in outside_code(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            title = re.sub(r"[`*]", "", match.group(2))
            seen.add(slugify(title))
    return seen


def link_targets(page: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for number, line in outside_code(page.read_text(encoding="utf-8")):
        # A link inside inline code is an example, not a link.
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            found.append((number, match.group(1)))
    return found


def broken_link(page: Path, target: str) -> str | None:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
        return None
    path_part, _, anchor = target.partition("#")
    if not path_part:
        file = page
    elif path_part.startswith("/"):  # from the repository's root, as GitHub reads it
        file = REPO / path_part.lstrip("/")
    else:
        file = (page.parent / path_part).resolve()
    if not file.exists():
        return f"{target}: no such file"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"{target}: no heading #{anchor} in {file.name}"
    return None


def test_readme_fits_in_one_screen_and_a_bit() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    problems = [
        f"{page.relative_to(REPO)}:{number}: {problem}"
        for number, target in link_targets(page)
        if (problem := broken_link(page, target))
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_lines_and_cells_are_short(page: Path) -> None:
    problems: list[str] = []
    for number, line in outside_code(page.read_text(encoding="utf-8")):
        where = f"{page.relative_to(REPO)}:{number}"
        if line.lstrip().startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            problems += [
                f"{where}: a cell of {len(cell)} characters: {cell[:40]}..."
                for cell in cells
                if len(cell) > CELL_MAX
            ]
        elif len(line) > PROSE_MAX:
            problems.append(f"{where}: a line of {len(line)} characters")
    assert not problems, "\n".join(problems)


def test_checker_sees_a_broken_link_and_a_long_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[gone](missing.md) [here](#title) [bad](#nothing)\n")
    problems = [broken_link(page, target) for _, target in link_targets(page)]
    assert problems[0] is not None and problems[1] is None and problems[2] is not None
    assert outside_code("```\n" + "x" * 200 + "\n```\n") == []


def test_site_builds_strict(tmp_path: Path) -> None:
    """A page missing from the nav, a nav entry without a page, or a broken link fails."""
    result = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()
