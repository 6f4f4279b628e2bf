"""The mention matcher against GitHub's own renderer: no body GitHub does not show as a mention starts a job.

The oracle is cmark-gfm (``cmarkgfm``, the C library github.com renders comments with) with GitHub's
extensions (autolink, table, strikethrough, tagfilter) and raw HTML kept, as GitHub keeps it before its
sanitizer. cmark does not link mentions: GitHub does that afterwards, over the rendered HTML, in each
text node that is not inside ``<a>``, ``<code>`` or ``<pre>``. The oracle models that step: it walks the
HTML with :mod:`html.parser`, keeps the text nodes outside those elements (an image's alt, a link's
href and title, a tag's attributes and an HTML comment are never text nodes), and looks in each for
``@pi`` as a whole login, as GitHub's mention rule reads one (not after a word character, not followed
by a login character or ``/``, a dot only at a sentence's end). It is a model of GitHub's step, not
GitHub itself. Where Python 3.11's :mod:`html.parser` reads HTML otherwise than a browser, the oracle
reads it as a browser does: ``<!-->`` is an empty comment, and ``<![`` not opening CDATA is a bogus
comment to the first ``>``.

The property is one-directional, as the issue asks: whenever the matcher says "mention", the oracle
must too. The matcher may miss a mention GitHub shows (it errs toward not starting a job); it may never
start one for text nobody sees as a mention.
"""

from __future__ import annotations

import random
import re
from html.parser import HTMLParser

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from hypothesis import given, settings
from hypothesis import strategies as st

from pidispatch.receiver.mention import mentions
from testkit.mentions import A_MENTION

PHRASE = "@pi"
EXTENSIONS = ["autolink", "table", "strikethrough", "tagfilter"]
# GitHub's mention rule (html-pipeline's MentionFilter) for the one login "pi", in ASCII as Ruby reads it.
_GITHUB_MENTION = re.compile(r"(?:^|[^A-Za-z0-9_])@pi(?![A-Za-z0-9/-])(?=\.+[ \t\W]|\.+$|[^0-9A-Za-z_.]|$)",
                             re.IGNORECASE | re.ASCII)
_NOT_LINKED_IN = ("a", "code", "pre")
_NEVER_SHOWN = ("script", "style")  # raw text elements: escaped by tagfilter, but a "<?" can pass one through


def render(body: str) -> str:
    """``body`` as github.com's renderer turns it into HTML (before GitHub's own post-processing)."""
    return cmarkgfm.markdown_to_html_with_extensions(body, options=Options.CMARK_OPT_UNSAFE, extensions=EXTENSIONS)


class _TextNodes(HTMLParser):
    """The text nodes of an HTML document that are not inside an element GitHub links no mention in."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open = dict.fromkeys(_NOT_LINKED_IN + _NEVER_SHOWN, 0)
        self.nodes: list[str] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in self.open:
            self.open[tag] += 1

    def handle_startendtag(self, tag: str, attrs: object) -> None:
        pass  # "<a/>" opens nothing

    def handle_endtag(self, tag: str) -> None:
        if self.open.get(tag):
            self.open[tag] -= 1

    def handle_data(self, data: str) -> None:
        if not any(self.open.values()):
            self.nodes.append(data)

    def parse_comment(self, i: int, report: int = 1) -> int:
        for empty in ("<!-->", "<!--->"):  # empty comments to a browser (and to html.parser from 3.13)
            if self.rawdata.startswith(empty, i):
                return i + len(empty)
        return super().parse_comment(i, report)

    def parse_marked_section(self, i: int, report: int = 1) -> int:
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:  # "<![" that is not CDATA: a browser's bogus comment, to the first ">"
            return self.parse_bogus_comment(i)


def github_mentions(body: str) -> bool:
    """Whether GitHub shows ``@pi`` in ``body`` as a mention (the oracle: see the module's docstring)."""
    parser = _TextNodes()
    parser.feed(render(body))
    parser.close()
    return any(_GITHUB_MENTION.search(node) for node in parser.nodes)


# -- the issue's false positives, each checked against the oracle too ---------------------------------------
ISSUE_CASES = [
    ("a link reference definition's title", "[ref]: https://example.com '@pi fix'"),
    ("a link reference definition's label", "[@pi]: https://example.com"),
    ("a definition in a list item", "- [ref]: https://example.com \"@pi\""),
    ("a link's destination", "see [the docs](@pi) first"),
    ("a link's title", 'see [the docs](https://example.com "@pi fix") first'),
    ("a link's text", "see [@pi](https://example.com) first"),
    ("an image's alt text", "![@pi fix](https://example.com/logo.png)"),
    ("raw <pre>", "<pre>@pi fix</pre>"),
    ("raw <pre> inside a paragraph", "look: <pre>@pi fix</pre>"),
    ("raw <code>", "type <code>@pi fix</code> to start a job"),
    ("raw <a>", 'ask <a href="https://example.com">@pi</a>'),
    ("an unclosed raw <a> runs on", '<a href="https://example.com">\n\n@pi fix'),
    ("an autolinked URL", "https://example.com/?user=@pi"),
    ("an autolinked www URL", "see www.example.com/?q=@pi"),
    ("indented code after a heading", "# Build\n    @pi fix"),
    ("indented code after a setext heading", "Build\n---\n    @pi fix"),
    ("indented code after a thematic break", "***\n    @pi fix"),
    ("indented code after a table", "| a | b |\n|---|---|\n    @pi fix"),
    ("a > inside a quoted attribute", '<span title="a > b @pi">x</span>'),
    ("a > inside a single-quoted attribute", "x <span title='>@pi'>y</span>"),
]


# What the differential test found on the way, kept as cases.
FOUND_BY_THE_ORACLE = [
    ("an address taking the mention's letters", "@pi+x@y.z"),
    ("an address in angle brackets", "<x@pi>"),
    ("a URL running through a code span", "http://x.y/`y`@pi"),
    ("a URL running on after an escaped <", "\"www.x.y/(\\<http://x>@pi"),
    ("a list item's code after a tab", "1.  \t@pi"),
    ("an empty list item's code", "*\n\t    @pi"),
    ("a setext underline with a space, then code", "a\n- \n    @pi"),
    ("a fence at a list item's indentation", "1. a\n    ~~~\n    @pi"),
    ("a link's destination holding a backtick", "[[a](u)](`) @pi `"),
    ("a comment a browser ends at --->", "x <!-- a ---> b --> <a href=y> @pi"),
    ("a processing instruction a browser ends at >", "</code><?!</div>x<script>?>@pi"),
    ("a bracket left open where a guess hid the rest", "[ @pi\nwww.x.y/`](u)"),
    ("a closing tag in an image's alt text", "<code>x ![a</code>](u) @pi"),
    ("a CDATA section cmark reads past ]]]>", "x <![CDATA[a]]]><script>@pi ]]>"),
    ("cmark's memory of backtick runs", "` x ``` y ``` ``` <a href=z> ``` @pi"),
    ("a fence after an HTML block in a list item", "1. <div>\n~~~\n@pi\n\n@pi"),
    ("a fence after a comment in a list item", "- <!--\n\n```\n@pi"),
    ("an address after an escaped @", "x @pi.\\@y.z"),
    ("an address after an entity for @", "x @pi&#64;y.z"),
    ("an empty list item's code after an item", "  - a\n   *\n    @pi"),
    ("an HTML block leaving a comment open", "<div><!-- x\n\n@pi\n\n<!-- y -->"),
]


@pytest.mark.parametrize("text", [c[1] for c in FOUND_BY_THE_ORACLE], ids=[c[0] for c in FOUND_BY_THE_ORACLE])
def test_what_the_differential_test_found_stays_fixed(text: str) -> None:
    assert not github_mentions(text), "the oracle agrees it is not a mention"
    assert not mentions(text, PHRASE)


@pytest.mark.parametrize("text", [c[1] for c in ISSUE_CASES], ids=[c[0] for c in ISSUE_CASES])
def test_text_github_does_not_show_as_a_mention_is_not_one(text: str) -> None:
    assert not github_mentions(text), "the oracle agrees it is not a mention"
    assert not mentions(text, PHRASE)


@pytest.mark.parametrize("text", [c[1] for c in A_MENTION], ids=[c[0] for c in A_MENTION])
def test_true_mentions_are_mentions_to_both(text: str) -> None:
    assert github_mentions(text) and mentions(text, PHRASE)


@pytest.mark.parametrize("text", [
    "see [the docs](https://example.com) @pi", "<code>x</code> @pi fix", '<a href="https://x">x</a> @pi',
    "# @pi fix the heading", "| who |\n|---|\n\n@pi after a table", "https://example.com and @pi",
    "![logo](x.png) @pi", "1. build\n2. @pi fix it", "<pre>log</pre>\n\n@pi fix", "a\n<br>\n@pi fix",
    "<details><summary>Logs</summary>\n<pre>\nx <module>\n</pre>\n</details>\n\n@pi look",
    "- [x] done\n- [ ] @pi rebase", "Per [the docs](https://x), @pi do X", "See https://x.com. @pi fix it"],
    ids=["after a link", "after raw code", "after a raw link", "in a heading", "after a table", "after a URL",
         "after an image", "a list's next item", "after a pre block", "after a lone tag", "after folded logs",
         "after a task", "after a link at a sentence's start", "after a URL ending a sentence"])
def test_a_mention_beside_what_hides_one_still_counts(text: str) -> None:
    assert github_mentions(text) and mentions(text, PHRASE)


# -- generated bodies ----------------------------------------------------------------------------------------
# Markdown's pieces that hide text, or end what hides it, with the phrase among them often.
PIECES = [PHRASE] * 6 + [
    "[", "]", "(", ")", "![", "](", "<a href=x>", "</a>", "<code>", "</code>", "<pre>", "</pre>",
    '<span title=">">', "`", "``", "```", "~~~", "<!--", "-->", "<!-->", "\n", "\n", "\n\n", "    ", "\t", "# ",
    "---", "===", "***", "| a |", "|---|", "> ", "- ", "* ", "1. ", "2. ", "http://x.y/?a=", "www.x.y/", "=",
    "'", '"', "\\", "*", "_", "~~", "<", ">", "!", " ", " ", "x", "[r]: u", ":", "<div>", "</div>", "<?", "?>",
    "<!A ", "<![CDATA[", "]]>", "<http://x>", "<b>", "<x", "/>", "&#64;", "a@b.c", "<textarea>", "<script>"]
_BODIES = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


def _check(body: str) -> None:
    if mentions(body, PHRASE):
        assert github_mentions(body), (body, render(body))


@settings(max_examples=800, deadline=None, derandomize=True)
@given(_BODIES | st.text(alphabet=st.sampled_from("@pi[]()<>`!\\-*#=| \n\tax/:'\""), max_size=40))
def test_no_body_github_does_not_show_as_a_mention_starts_a_job(body: str) -> None:
    _check(body)


@pytest.mark.parametrize(("bodies", "pieces"), [(20_000, (1, 30)), (4_000, (20, 70))], ids=["short", "long"])
def test_a_seeded_sweep_of_generated_bodies_agrees_with_github(bodies: int, pieces: tuple[int, int]) -> None:
    """Hypothesis shrinks; a plain seeded sweep covers many more bodies in the same second."""
    rng = random.Random(31)
    for _ in range(bodies):
        _check("".join(rng.choice(PIECES) for _ in range(rng.randint(*pieces))))
