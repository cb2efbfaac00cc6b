"""Comments in the shipped experiments point at documentation that exists.

The reference moved from README.md into docs/ (issue 26); config comments that still said
`README "Transformer lab"` sent a new user to a section that no longer exists. This test reads
every pointer of the forms ``docs/PAGE.md`` / ``docs/PAGE.md, "Heading"`` and ``README "Heading"``
in experiments/**/*.yaml and checks the page and the heading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
YAMLS = sorted((ROOT / "experiments").rglob("*.yaml"))
DOC = re.compile(r"(docs/[\w/.-]+\.md)(?:,\s*\"([^\"]+)\")?")
README = re.compile(r"README(?!\.md)[,]?\s*\"([^\"]+)\"")


def _headings(page: Path) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#+\s+(.+)$", page.read_text(), re.M)}


def _pointers():
    for f in YAMLS:
        for line in f.read_text().splitlines():
            if not line.lstrip().startswith("#") and "#" not in line:
                continue
            comment = line[line.index("#"):]
            for m in DOC.finditer(comment):
                yield f, m.group(1).rstrip("."), m.group(2)
            for m in README.finditer(comment):
                yield f, "README.md", m.group(1)


POINTERS = list(_pointers())


def test_the_shipped_configs_point_at_docs():
    assert any(p == "docs/training-transformers.md" for _, p, _ in POINTERS)


@pytest.mark.parametrize("src,page,heading", POINTERS, ids=[f"{f.name}:{p}:{h}" for f, p, h in POINTERS])
def test_pointer_resolves(src, page, heading):
    target = ROOT / page
    assert target.is_file(), f"{src.relative_to(ROOT)} points at {page}, which does not exist"
    if heading:
        assert heading in _headings(target), (
            f"{src.relative_to(ROOT)} points at {page}, section {heading!r}, which has no such heading")
