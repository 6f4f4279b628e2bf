"""The repository explains itself: its design is in ``docs/``, and every pointer at it resolves.

Three checks over the tracked files (``git ls-files``), no cluster and no network:

* no file cites a design document that is not in the repository (the workshop's architecture, conventions,
  decisions, store specification, style anchors or pi notes, or a ``§`` section of one): a pointer goes to a
  ``docs/`` page and a heading's anchor instead;
* every ``docs/<page>.md`` and ``docs/<page>.md#<anchor>`` written anywhere, and every relative link between
  the pages, names a page that exists and, when it has one, an anchor that page's headings make;
* the code layout in ``docs/architecture.md`` names every module and package there is.

Anchors are the slugs MkDocs makes by default (Python-Markdown's ``toc`` extension, which the site's strict
build checks links against): the heading's text as rendered (a code span keeps its content, a link its text),
reduced to ASCII, every character that is not a letter, digit, ``_``, ``-`` or white space dropped, lower-cased,
runs of white space and hyphens made one hyphen; a repeated slug gets ``_1``, ``_2``, … (checked against
Python-Markdown 3 on every page when this was written). GitHub's renderer agrees on headings without repeats.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

# The workshop's documents, as code and docs used to cite them. Spelled in pieces so that a grep of the
# repository for a citation does not find this list.
_FORBIDDEN = [
    ("ARCHI" "TECTURE", r"\bARCHI" r"TECTURE\b"),
    ("CONVEN" "TIONS", r"\bCONVEN" r"TIONS\b"),
    ("DECI" "SIONS", r"\bDECI" r"SIONS\b"),
    ("a section sign", "\u00a7"),
    ("the store spec", r"session-store[- ]" r"spec"),
    ("the style anchors", r"style[- ]" r"anchors"),
    ("the pi notes", r"pi-cli" r"(-behaviour|\b)"),
    ("the CLI design", r"\bCLI" r"\.md\b"),
]
FORBIDDEN = [(name, re.compile(pattern)) for name, pattern in _FORBIDDEN]

# `docs/<page>.md` or `docs/<page>.md#anchor` anywhere in a tracked file: not the tail of a longer path, and not
# a string literal that starts with it (a test's path in some other repository, such as "docs/planted.md").
DOCS_REFERENCE = re.compile(r"(?<![\w./\-\"'])docs/((?:[\w.-]+/)*[\w.-]+\.md)(?:#([\w-]+))?")
# A Markdown link's target inside a page: `](page.md#anchor)`, `](page.md)`, `](#anchor)`.
PAGE_LINK = re.compile(r"\]\(([^)\s]*?)(?:#([\w-]+))?\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
FENCE = re.compile(r"^[ \t]*(```|~~~)")


def slugify(text: str) -> str:
    """The anchor MkDocs makes of a heading's rendered text (Python-Markdown's ``toc.slugify``)."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def rendered(heading: str) -> str:
    """A heading's Markdown as the text a reader sees: code spans keep their content, links their text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"(\*\*|\*|~~)", "", text)


def anchors(markdown: str) -> set[str]:
    """Every anchor the headings of ``markdown`` make, fenced code left out, repeats numbered as MkDocs does."""
    seen: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = HEADING.match(line)
        if fenced or match is None:
            continue
        slug = base = slugify(rendered(match.group(2)))
        count = 0
        while slug in seen:
            count += 1
            slug = f"{base}_{count}"
        seen.add(slug)
    return seen


@dataclass(frozen=True)
class Broken:
    """One pointer that does not resolve: where it is written, what it says, and why it fails."""

    where: str
    line: int
    target: str
    problem: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line}: {self.target}: {self.problem}"


def _outside_code(markdown: str) -> Iterator[tuple[int, str]]:
    """The lines of ``markdown`` outside fenced code blocks, numbered from 1."""
    fenced = False
    for number, line in enumerate(markdown.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield number, line


def broken_references(files: dict[str, str], pages: dict[str, str]) -> list[Broken]:
    """Every pointer into ``pages`` (path under ``docs/`` → Markdown) that does not resolve, from ``files`` (path in
    the repository → text).

    ``docs/<page>.md[#anchor]`` is checked wherever it is written; a relative link (``](page.md#a)``, ``](#a)``)
    only inside a page, relative to that page's directory (a link that leaves ``docs/`` or names a URL is not ours
    to check).
    """
    known = {name: anchors(text) for name, text in pages.items()}
    found: list[Broken] = []

    def check(where: str, line: int, page: str, anchor: str | None, shown: str) -> None:
        if page not in known:
            found.append(Broken(where, line, shown, f"no page docs/{page}"))
        elif anchor is not None and anchor not in known[page]:
            found.append(Broken(where, line, shown, f"no heading of docs/{page} makes the anchor #{anchor}"))

    for where, text in files.items():
        for number, line in enumerate(text.splitlines(), 1):
            for match in DOCS_REFERENCE.finditer(line):
                check(where, number, match.group(1), match.group(2), match.group(0))
        if not (where.startswith("docs/") and where.endswith(".md")):
            continue
        page = where.removeprefix("docs/")
        for number, line in _outside_code(text):
            for match in PAGE_LINK.finditer(line):
                target, anchor = match.group(1), match.group(2)
                if target == "":
                    check(where, number, page, anchor, f"#{anchor}")
                    continue
                resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page), target))
                if target.endswith(".md") and ":" not in target and not resolved.startswith("../"):
                    check(where, number, resolved, anchor, target + (f"#{anchor}" if anchor else ""))
    return found


def forbidden_citations(files: dict[str, str]) -> list[Broken]:
    """Every citation of a document that is not in the repository, by file and line."""
    found = []
    for where, text in files.items():
        for number, line in enumerate(text.splitlines(), 1):
            for name, pattern in FORBIDDEN:
                match = pattern.search(line)
                if match:
                    found.append(Broken(where, number, match.group(0), f"cites {name}; point at a docs/ page instead"))
    return found


def tracked_texts() -> dict[str, str]:
    """Every tracked file that reads as text, by its path in the repository (this file left out)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    texts = {}
    for name in listed.decode().split("\0"):
        if not name or name == THIS:
            continue
        try:
            data = (ROOT / name).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            continue  # deleted in the work tree, or a submodule
        if b"\0" in data[:8192]:
            continue
        texts[name] = data.decode("utf-8", errors="replace")
    return texts


def docs_pages() -> dict[str, str]:
    """Every page under ``docs/``, by its path there (``store-contract.md``, ``reference/crds.md``)."""
    return {path.relative_to(DOCS).as_posix(): path.read_text(encoding="utf-8") for path in DOCS.rglob("*.md")}


# ---- the checks, on the repository ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return tracked_texts()


def test_no_file_cites_a_document_outside_the_repository(texts: dict[str, str]) -> None:
    found = forbidden_citations(texts)
    assert not found, "citations of documents outside the repository:\n" + "\n".join(map(str, found))


def test_every_docs_reference_names_a_page_and_an_anchor_that_exist(texts: dict[str, str]) -> None:
    assert texts, "git ls-files listed nothing: not run in the repository?"
    found = broken_references(texts, docs_pages())
    assert not found, "references that do not resolve:\n" + "\n".join(map(str, found))


def _tracked_entries(directory: str) -> list[str]:
    """What the layout must name in ``directory``: its tracked modules (``.py``, ``.c``) and sub-directories
    (``name/``), from ``git ls-files``, so a stray local file is not a module."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", directory], cwd=ROOT, capture_output=True, check=True)
    entries = set()
    for name in listed.stdout.decode().split("\0"):
        if not name:
            continue
        parts = Path(name).relative_to(directory).parts
        if len(parts) > 1:
            entries.add(parts[0] + "/")
        elif Path(parts[0]).suffix in (".py", ".c"):
            entries.add(parts[0])
    return sorted(entries)


def _named(layout: str, entry: str) -> bool:
    """``entry`` (``keys.py``, ``store/``) appears in ``layout`` as a code span, with or without its suffix."""
    stem = entry.rstrip("/").removesuffix(".py")
    return any(f"`{form}`" in layout for form in (entry, entry.rstrip("/"), stem))


@pytest.mark.parametrize("directory", ["operator/pidispatch", "testkit", "e2e", "tests", "bench"])
def test_the_code_layout_names_every_module(directory: str) -> None:
    """``docs/architecture.md`` "Code layout" lists the code as it is: a module or package added without a line
    there fails here, named. The e2e tests are listed by concern (``test_`` left off); for ``operator/pidispatch``
    each package's row names its modules too."""
    layout = (DOCS / "architecture.md").read_text(encoding="utf-8").split("## Code layout", 1)[1]
    missing = []
    for entry in _tracked_entries(directory):
        if directory == "e2e" and entry.startswith("test_"):
            entry = entry.removeprefix("test_")
        if not _named(layout, entry):
            missing.append(entry)
        if directory == "operator/pidispatch" and entry.endswith("/"):
            # A package's modules are named in its own row of the table.
            row = next((line for line in layout.splitlines() if line.startswith(f"| `{entry}` |")), "")
            missing += [f"{entry}{module}" for module in _tracked_entries(f"{directory}/{entry}")
                        if module != "__init__.py" and not _named(row, module)]
    assert missing == [], f"docs/architecture.md, Code layout, does not name these in {directory}/: {missing}"


# ---- the checkers themselves, on crafted input ------------------------------------------------------------


PAGE = """# A page

## Gates

## The `(pending)` sentinel

```
## Not a heading
```

## Gates

## Promotion steps: 1–9
"""


def test_anchors_are_mkdocs_slugs() -> None:
    assert anchors(PAGE) == {"a-page", "gates", "the-pending-sentinel", "gates_1", "promotion-steps-19"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("see docs/store-contract.md#gatez", "no heading of docs/store-contract.md makes the anchor #gatez"),
        ("see docs/store-contrakt.md#gates", "no page docs/store-contrakt.md"),
        ("see docs/store-contrakt.md", "no page docs/store-contrakt.md"),
        ("see docs/store-contract.md#not-a-heading", "makes the anchor #not-a-heading"),
    ],
    ids=["unknown-anchor", "unknown-page-with-anchor", "unknown-page", "heading-in-a-code-block"],
)
def test_a_broken_reference_is_found(text: str, problem: str) -> None:
    found = broken_references({"operator/x.py": f"# comment\n{text}\n"}, {"store-contract.md": PAGE})
    assert len(found) == 1 and problem in found[0].problem and found[0].line == 2, found


def test_a_reference_that_resolves_passes() -> None:
    files = {"operator/x.py": "docs/store-contract.md#gates, docs/store-contract.md#the-pending-sentinel, "
                              "docs/store-contract.md, operator/docs/elsewhere.md#whatever, 'docs/planted.md'"}
    assert broken_references(files, {"store-contract.md": PAGE}) == []


def test_links_between_pages_are_checked() -> None:
    pages = {"store-contract.md": PAGE,
             "architecture.md": "# A\n\nSee [gates](store-contract.md#gates), [here](#a), [bad](#b),\n"
                                "[gone](missing.md), [site](https://example.com/x.md#y), [up](../README.md).\n",
             "reference/crds.md": "# CRDs\n\n[gates](../store-contract.md#gates), [no](../store-contract.md#no),\n"
                                  "[self](crds.md#crds), [wrong](store-contract.md#gates)\n"}
    files = {f"docs/{name}": text for name, text in pages.items() if name != "store-contract.md"}
    files["operator/x.py"] = "docs/reference/crds.md#crds docs/reference/crds.md#nope"
    found = broken_references(files, pages)
    assert sorted((b.where, b.line, b.target) for b in found) == [
        ("docs/architecture.md", 3, "#b"), ("docs/architecture.md", 4, "missing.md"),
        ("docs/reference/crds.md", 3, "../store-contract.md#no"),
        ("docs/reference/crds.md", 4, "store-contract.md#gates"),
        ("operator/x.py", 1, "docs/reference/crds.md#nope")]


@pytest.mark.parametrize(
    "line",
    ["# The layering of " "ARCHI" "TECTURE " "\u00a7" "6", "(session-store-" "spec " "\u00a7" "4.2)",
     "see " "CONVEN" "TIONS", "as " "DECI" "SIONS.md settled", "pi-cli" "-behaviour \u00a75", "(pi-cli" " \u00a72.1)",
     "design/" "CLI.md", "the style-" "anchors"],
    ids=["architecture", "store-spec", "conventions", "decisions", "pi-notes", "pi-notes-short", "cli-design",
         "style-anchors"],
)
def test_a_citation_of_an_outside_document_is_found(line: str) -> None:
    assert forbidden_citations({"x.py": f"ok\n{line}\n"}), line


def test_a_docs_pointer_is_not_a_citation() -> None:
    assert forbidden_citations({"x.py": "docs/store-contract.md#gates, docs/architecture.md#code-layout, "
                                        "docs/conventions.md#shape, spec.run.resume, Architecture"}) == []
