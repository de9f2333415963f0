"""Every relative link in README.md and docs/*.md leads somewhere: the file exists, and a
#fragment into a Markdown page names one of its headings (as GitHub makes their anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: [text](target) outside code; an image link has the same shape after its "!".
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def links_of(page: Path) -> list[str]:
    """The link targets of a Markdown page, code blocks and code spans left out."""
    text = CODE_SPAN.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    return LINK.findall(text)


def anchors_of(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped but `-` and
    `_`, spaces as `-`, and a repeated heading numbered (-1, -2, ...)."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def relative_links() -> list[tuple[Path, str]]:
    return [(page, target) for page in PAGES for target in links_of(page)
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto: are not checked


def test_the_pages_have_relative_links_to_check():
    """The guide links to docs/ and the pages to each other (so the link test below tests something)."""
    targets = {(page.name, target.split("#")[0]) for page, target in relative_links()}
    assert ("README.md", "docs/README.md") in targets
    assert len(targets) > 20


@pytest.mark.parametrize("page,target", relative_links(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_a_relative_link_leads_to_a_file_and_heading_that_exist(page, target):
    """The link's path exists beside the page that has it; its #fragment, if any, is a heading of that page."""
    path, _, fragment = target.partition("#")
    destination = (page.parent / path).resolve() if path else page
    assert destination.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
    if fragment and destination.suffix == ".md":
        assert fragment in anchors_of(destination), \
            f"{page.relative_to(ROOT)} links to {target}: {destination.name} has no heading with that anchor"
