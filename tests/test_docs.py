"""The README and docs/ hold together: every relative link resolves (the file, and for `#anchor` links a heading
with that GitHub slug), every CLI command is documented, and no issue number is left in the docs or the code."""

from __future__ import annotations

import argparse
import importlib
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE_DIRS = [ROOT / "memory_pipelines", ROOT / "assets"]
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lower-cased, punctuation but `-` and `_` removed, spaces
    turned into hyphens (github-slugger)."""
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", heading)  # images render as nothing
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link renders as its text
    text = re.sub(r"(\*\*|__|\*|`)", "", text)  # emphasis and code markers
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page; repeated headings get -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> Iterator[tuple[int, str]]:
    """(line number, target) of every Markdown link and image outside code."""
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        for match in _LINK.finditer(_INLINE_CODE.sub("", line)):
            yield number, match.group(1)


def broken_link(page: Path, target: str) -> str | None:
    """Why `target`, linked from `page`, does not resolve; None when it does (or is not relative)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
        return None
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists():
        return f"no file {path}"
    if ROOT not in dest.parents and dest != ROOT:
        return f"{path} is outside the repository"
    if anchor:
        if dest.suffix != ".md":
            return f"#{anchor} points into {path}, which is not Markdown"
        if anchor not in anchors(dest):
            return f"no heading #{anchor} in {dest.relative_to(ROOT)}"
    return None


def test_slugs_follow_github() -> None:
    assert slug("Dagster's own storage on PostgreSQL") == "dagsters-own-storage-on-postgresql"
    assert slug("Configuration of `hit_rate_report` (the **tuning** group)") == (
        "configuration-of-hit_rate_report-the-tuning-group")
    assert slug("What earns a place in the block") == "what-earns-a-place-in-the-block"
    assert slug("Read [more](docs/x.md): 中文 1.2") == "read-more-中文-12"


def test_the_pages_exist() -> None:
    names = {p.name for p in PAGES}
    for page in ("README.md", "http-api.md", "mcp.md", "dagster.md", "tuning.md", "retrieval-quality.md",
                 "performance.md", "operations.md", "configuration.md", "spec-departures.md", "architecture.md"):
        assert page in names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    problems = [f"{page.relative_to(ROOT)}:{n}: {target}: {why}"
                for n, target in links(page) if (why := broken_link(page, target))]
    assert not problems, "\n".join(problems)


def test_the_link_check_can_fail() -> None:
    page = ROOT / "docs" / "architecture.md"
    assert broken_link(page, "nowhere.md") == "no file nowhere.md"
    assert broken_link(page, "performance.md#no-such-heading") == "no heading #no-such-heading in docs/performance.md"
    assert broken_link(page, "#layers") is None
    assert broken_link(page, "https://example.com/x.md#y") is None


def cli_parser() -> argparse.ArgumentParser:
    """The parser of the `memory-pipelines` console script, found from pyproject.toml (not a list kept here)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, attr = scripts["memory-pipelines"].partition(":")
    main = getattr(importlib.import_module(module), attr)
    return importlib.import_module(main.__module__).build_parser()


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command and sub-command of `parser`, as word tuples: ("run",), ("keys", "create"), ..."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from commands(sub, (*prefix, name))


def test_every_cli_command_is_documented() -> None:
    found = list(commands(cli_parser()))
    assert ("run",) in found and ("keys", "create") in found  # the walk reaches both levels
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    missing = [" ".join(words) for words in found
               if not re.search(r"`(memory-pipelines )?" + re.escape(" ".join(words)) + r"(?![\w-])", text)]
    assert not missing, f"CLI commands named nowhere in README.md or docs/: {missing}"


def issue_numbers(paths: list[Path]) -> list[str]:
    hits = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    return hits


def test_the_issue_pattern_matches() -> None:
    assert ISSUE_NUMBER.search("the default before Issue 12") and ISSUE_NUMBER.search("(issues 11 and 12)")
    assert not ISSUE_NUMBER.search("a known issue with 2 owners") and not ISSUE_NUMBER.search("tissue 5")


def test_no_issue_numbers_in_readme_or_docs() -> None:
    hits = issue_numbers(PAGES)
    assert not hits, "\n".join(hits)


def test_no_issue_numbers_in_code() -> None:
    hits = issue_numbers([p for d in CODE_DIRS for p in sorted(d.rglob("*.py"))])
    assert not hits, "\n".join(hits)
