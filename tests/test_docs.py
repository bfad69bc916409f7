"""The manual's links hold: every relative link in README.md and docs/*.md names a file that
exists and, after a `#`, a heading of that file as GitHub anchors it. Code points at
docs/formats.md's four anchors, so those headings are checked by name too."""

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) outside code; an image's ![alt](target) is a link too.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FORMATS_ANCHORS = ("the-tracers-files", "nsight-exports", "the-simulators-log", "accuracy-metrics")


def prose_lines(path: Path, *, inline_code: bool = False) -> list[str]:
    """The page's lines outside fenced code blocks; inline code removed unless asked for (a
    heading's words include it, a link inside it is no link)."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            lines.append(line if inline_code else re.sub(r"`[^`]*`", "", line))
    return lines


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor, repeated ones numbered as GitHub numbers them (-1, -2...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path, inline_code=True):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        anchor = github_anchor(match.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    return [
        target
        for line in prose_lines(path)
        for target in LINK.findall(line)
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_names_a_file_and_heading_that_exist(page):
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        if not linked.exists():
            broken.append(
                f"{target}: no file {linked.relative_to(ROOT) if ROOT in linked.parents else linked}"
            )
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert broken == [], f"broken links in {page.relative_to(ROOT)}: {broken}"


def test_the_formats_anchors_code_points_at_exist():
    assert set(FORMATS_ANCHORS) <= anchors(ROOT / "docs" / "formats.md")


def test_github_anchors_are_computed_as_github_does():
    assert github_anchor("The tracer's files") == "the-tracers-files"
    assert github_anchor("Simulate a trace: `cascade simulate`") == "simulate-a-trace-cascade-simulate"
    assert github_anchor("metadata.json") == "metadatajson"
    assert github_anchor("`.trace` / `.traceg` headers") == "trace--traceg-headers"
