"""Relative links of the READMEs and docs/ resolve as GitHub renders them: the file exists and
the anchor is a heading of it, slugged GitHub's way. (`mkdocs build --strict`, in the lint
session, checks docs/ with MkDocs' own slugs, but neither the READMEs, which are not part of
the site, nor that an anchor also works when the page is read on GitHub.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [
    REPO / "README.md",
    REPO / "site-profiles" / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$")
_FENCE = re.compile(r"^\s*```")


def _outside_code(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans kept (headings have them)."""
    lines, inside = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            inside = not inside
        elif not inside:
            lines.append(line)
    return lines


def github_slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation other than
    hyphens and underscores removed, each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor, duplicates numbered as GitHub numbers them."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _outside_code(page.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if match:
            slug = github_slug(match[2])
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    text = "\n".join(_outside_code(page.read_text(encoding="utf-8")))
    text = re.sub(r"`[^`]*`", "", text)  # a link in a code span is code
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no {file.relative_to(REPO)}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that anchor in {file.relative_to(REPO)}")
    assert broken == [], f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_readme_links_every_page_of_docs() -> None:
    linked = {t.partition("#")[0] for t in relative_links(REPO / "README.md")}
    pages = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}
    assert pages - linked == set()


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("A cluster without a profile: `ddpimg site probe`",
         "a-cluster-without-a-profile-ddpimg-site-probe"),
        ("ddpimg in a site's own image", "ddpimg-in-a-sites-own-image"),
        ("What a run writes (rank 0, into `--out`)", "what-a-run-writes-rank-0-into---out"),
        ("Pretrain / fine-tune GPT-2", "pretrain--fine-tune-gpt-2"),
    ],
)  # fmt: skip
def test_github_slug(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug
