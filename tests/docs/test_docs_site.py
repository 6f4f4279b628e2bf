"""The documentation site (mkdocs.yml, docs/) and the README that leads into it.

The site is built the way `make docs` builds it, with ``mkdocs build --strict``: mkdocs.yml turns every link check
MkDocs has into a warning (a page that does not exist, an anchor no heading makes, an absolute link, a page left out
of the nav), and strict mode fails the build on any warning. A second test builds a small site under the same
settings with one broken thing at a time, so the strict build is known to catch each kind. The README is checked
here too: short, its first screen holding the two commands and the quickstart link, every link into docs/ resolving
to a page of the site and, where it names one, an anchor of that page.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FIRST_SCREEN = 40
MAX_README_LINES = 120
MAX_LINE = 120


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config`` into ``site``, with this interpreter's mkdocs (the test extra)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about MkDocs 2.0 is not a build warning
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], capture_output=True, text=True, env=env, timeout=300)


def warnings(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (result.stdout + result.stderr).splitlines() if line.startswith(("WARNING", "ERROR"))]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's site, built strictly once for this module's tests."""
    out = tmp_path_factory.mktemp("site")
    result = mkdocs_build(ROOT / "mkdocs.yml", out)
    assert result.returncode == 0 and not warnings(result), (
        "mkdocs build --strict failed (run `make docs` to see it):\n" + "\n".join(warnings(result) or [result.stderr]))
    return out


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["strict"] is True
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    for page in pages:
        built = site / (page.removesuffix(".md") + "/index.html" if page != "index.md" else "index.html")
        assert built.is_file(), f"{page} was not built"


# ---- the strict build fails on each kind of broken link --------------------------------------------------------

def small_site(tmp: Path, pages: dict[str, str], nav: list[Any]) -> Path:
    """A site with the repository's checks (strict, validation, Markdown extensions, theme) and these pages."""
    ours = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config = {key: ours[key] for key in ("strict", "validation", "markdown_extensions", "theme")}
    config.update(site_name="probe", docs_dir=str(tmp / "docs"), nav=nav)
    for name, text in pages.items():
        (tmp / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "docs" / name).write_text(text)
    path = tmp / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path


GOOD = {"index.md": "# Home\n\nSee [the other page](other.md#a-heading).\n", "other.md": "# Other\n\n## A heading\n"}
NAV = [{"Home": "index.md"}, {"Other": "other.md"}]


def test_the_small_site_builds_when_nothing_is_broken(tmp_path: Path) -> None:
    result = mkdocs_build(small_site(tmp_path, GOOD, NAV), tmp_path / "out")
    assert result.returncode == 0 and not warnings(result), result.stdout + result.stderr


@pytest.mark.parametrize(("pages", "nav", "said"), [
    ({**GOOD, "index.md": "# Home\n\n[gone](missing.md)\n"}, NAV, "'missing.md', but the target is not found"),
    ({**GOOD, "index.md": "# Home\n\n[anchor](other.md#no-such-heading)\n"}, NAV, "does not contain an anchor"),
    ({**GOOD, "index.md": "# Home\n\n[here](#nowhere)\n"}, NAV, "'#nowhere', but there is no such anchor on this page"),
    ({**GOOD, "index.md": "# Home\n\n[absolute](/other/)\n"}, NAV, "contains an absolute link"),
    ({**GOOD, "stray.md": "# Stray\n"}, NAV, "not included in the \"nav\" configuration"),
    (GOOD, [*NAV, {"Gone": "gone.md"}], "'gone.md' is included in the 'nav' configuration, which is not found"),
], ids=["missing-page", "missing-anchor", "missing-own-anchor", "absolute-link", "page-not-in-nav", "nav-to-nothing"])
def test_the_strict_build_fails_on_a_broken_link(tmp_path: Path, pages: dict[str, str], nav: list[Any],
                                                 said: str) -> None:
    result = mkdocs_build(small_site(tmp_path, pages, nav), tmp_path / "out")
    assert result.returncode != 0, "the strict build passed with a broken link"
    assert any(said in line for line in warnings(result)), warnings(result)


# ---- the README ------------------------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def readme_lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def test_the_readme_is_short_and_no_line_is_longer_than_120_characters() -> None:
    lines = readme_lines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: the reference belongs in docs/"
    long = [f"line {n}: {len(line)} characters" for n, line in enumerate(lines, 1) if len(line) > MAX_LINE]
    assert not long, long


def test_the_readmes_first_screen_holds_the_two_commands_and_the_quickstart_link() -> None:
    screen = "\n".join(readme_lines()[:FIRST_SCREEN])
    assert re.search(r"^make demo\b", screen, re.M), "the first screen says `make demo`"
    assert re.search(r"^make test\b", screen, re.M), "the first screen says `make test`"
    assert "docs/quickstart.md" in LINK.findall(screen), "the first screen links to the quickstart"


def readme_links() -> list[str]:
    return [target for target in LINK.findall(README.read_text(encoding="utf-8"))
            if not re.match(r"^[a-z]+:", target)]


def test_every_readme_link_into_the_repository_resolves(site: Path) -> None:
    links = readme_links()
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), f"README.md links to {link}: no such file"
        if not path.startswith("docs/") or not path.endswith(".md"):
            continue
        page = path.removeprefix("docs/").removesuffix(".md")
        built = site / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.is_file(), f"README.md links to {link}, which the site does not build"
        if anchor:
            assert f'id="{anchor}"' in built.read_text(encoding="utf-8"), f"README.md links to {link}: no such anchor"


def test_a_missing_readme_anchor_is_caught(site: Path) -> None:
    """The anchor check above looks for the id in the built page, so it can fail."""
    built = (site / "sessions" / "index.html").read_text(encoding="utf-8")
    assert 'id="who-can-read-a-stored-conversation"' in built
    assert 'id="no-such-heading"' not in built


def section(text: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}.*?\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no '## {heading}' section"
    return " ".join(match.group(1).split())


@pytest.mark.parametrize(("path", "heading"), [(README, "Resume"),
                                               (ROOT / "docs" / "sessions.md", "Who can read a stored conversation")])
def test_resume_says_who_can_be_handed_a_stored_conversation(path: Path, heading: str) -> None:
    said = section(path.read_text(encoding="utf-8"), heading)
    for words in ("(forge, repository, branch)", "pi/issue-7", "push-access population",
                  "no code can tell the two situations apart"):
        assert words.lower() in said.lower(), f"{path.name}, '{heading}', does not say {words!r}"
    assert re.search(r"do not enable resume", said, re.I), f"{path.name} does not say not to enable resume"
