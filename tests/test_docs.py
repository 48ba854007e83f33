"""The README, CONTRIBUTING.md and docs/*.md: every relative link resolves (anchors included), every `make` target
they name exists, and the README stays short enough to read (at most 2,000 words)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")
MAKE = re.compile(r"(?:^|[\s;&|(])make\s+(?:[A-Z_]+=\S*\s+)*([a-z][\w-]*)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without code: fenced blocks and inline code spans removed."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _code(text: str) -> list[str]:
    return FENCE.findall(text) + [span.strip("`") for span in CODE_SPAN.findall(FENCE.sub("", text))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.M))


def test_slug_follows_githubs_rule():
    assert slug("conda, mamba and Binder") == "conda-mamba-and-binder"
    assert slug("The `helpers` package") == "the-helpers-package"
    assert slug("A self-learner's progress") == "a-self-learners-progress"


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][\w+.-]*:", target):  # https:, mailto: ...
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {resolved.name}")
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_make_target_named_exists(page):
    targets = makefile_targets()
    named = {name for code in _code(page.read_text(encoding="utf-8")) for name in MAKE.findall(code)}
    assert not named - targets, f"{page.name} names make targets the Makefile lacks: {sorted(named - targets)}"


def test_the_checks_would_catch_a_broken_link_and_a_missing_target(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nSee [there](missing.md) and [here](#title), [gone](#nowhere); run `make nothing-here`.")
    links = LINK.findall(_prose(page.read_text()))
    assert links == ["missing.md", "#title", "#nowhere"]
    assert anchors(page) == {"title"}
    assert MAKE.findall(_code(page.read_text())[0]) == ["nothing-here"] and "nothing-here" not in makefile_targets()


def test_the_readme_is_short_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    words = len(re.findall(r"\S+", readme))
    assert words <= 2000, f"README.md has {words} words; move detail into docs/ (at most 2,000)"
    linked = set(LINK.findall(_prose(readme)))
    for page in sorted((ROOT / "docs").glob("*.md")):
        linked_here = any(target.split("#")[0] == f"docs/{page.name}" for target in linked)
        assert linked_here, f"README does not link docs/{page.name}"
    assert "CONTRIBUTING.md" in linked


def test_the_course_map_links_every_notebook():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(LINK.findall(_prose(readme)))
    missing = [p.name for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
               if f"notebooks/{p.name}" not in linked]
    assert not missing, f"the README's course map does not link {missing}"
