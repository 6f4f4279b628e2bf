"""What one paragraph of Markdown shows as text, read left to right as cmark-gfm's inline parser reads it.

The mention matcher (:mod:`pidispatch.receiver.mention`) splits a comment into paragraphs; this module
says which of a paragraph's characters reach a reader as text GitHub could turn into a mention, and
replaces every other run with one space. Hidden: code spans, raw HTML (tags with their attributes,
comments, declarations, processing instructions, CDATA), autolinks (``<https://…>``, and GFM's bare
``https://…`` and ``www.…``), everything inside ``[…]`` (a link's text, an image's alt, a reference)
with an inline link's ``(destination "title")``, and whatever lies inside a raw ``<a>``, ``<code>`` or
``<pre>`` element, which GitHub never links a mention in (such an element left open hides the rest of
the comment, paragraphs after included: :class:`Elements` carries that from one paragraph to the next).

As in CommonMark, whichever construct begins first wins, and a backslash escapes the punctuation
after it. The reading is exact where it can be cheaply and errs toward hiding where it cannot: a
bracket is hidden whether or not it makes a link (the definitions are not looked up), the text of a
bare URL runs to the next whitespace or ``<``. Hiding too much is only safe while it does not swallow
the opening of a construct that would have hidden something further on (a backtick, a bracket): when
a guess could, the rest of the paragraph is hidden instead. Linear in the paragraph's length, but for
raw HTML tags whose quoted attribute values run long.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

# cmark's whitespace is ASCII: a no-break space is text, and ends neither a tag nor a URL.
_WS = " \t\n\r\f\v"
_W = r"[ \t\n\r\f\v]"
_ATTRIBUTE = (rf"{_W}+[A-Za-z_:][A-Za-z0-9_.:-]*"
              rf"(?:{_W}*={_W}*(?:[^ \t\n\r\f\v\"'=<>`]+|'[^']*'|\"[^\"]*\"))?")
# CommonMark's raw HTML, exactly (0.31, as cmark-gfm 0.29.0.gfm.13 reads it): anything else beginning
# with "<" is literal text, and shown.
_RAW_HTML = re.compile(
    rf"<(?P<open>[A-Za-z][A-Za-z0-9-]*)(?:{_ATTRIBUTE})*{_W}*(?P<selfclosing>/?)>"
    rf"|</(?P<close>[A-Za-z][A-Za-z0-9-]*){_W}*>"
    r"|<!--.*?-->"
    r"|<\?.*?\?>"
    rf"|<![A-Z]+{_W}[^>]*>"
    r"|<!\[CDATA\[.*?\]\]>",
    re.DOTALL)
_AUTOLINK = re.compile(
    r"<[A-Za-z][A-Za-z0-9+.-]{1,31}:[^<>\x00-\x20]*>"
    r"|<[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*>")
# A raw element GitHub never links a mention in. Found leniently in text the matcher drops whole (a
# browser's parser takes "<a @x>" for a tag that CommonMark would not).
HIDING_ELEMENTS = ("a", "code", "pre")
# A script or style element (raw text, never shown) survives GitHub's tag filter only where cmark passes
# text through as it is, inside what a browser reads otherwise ("<?…<script>…?>").
_LENIENT_OPENING = re.compile(r"<(?:a|code|pre|script|style)(?=[ \t\n\r\f\v/>]|\Z)", re.IGNORECASE)
_PLAIN_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)[ \t]*>")
_PLAIN_TAGS = re.compile(r"(?:[^<]|<(?:/?[A-Za-z][A-Za-z0-9-]*)[ \t]*>)*")
_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# GFM's extended autolinks begin at these; mailto: and xmpp: are read by the same rule.
_URL_STARTS = ("://", "www.", "mailto:", "xmpp:")
_EMAIL_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+_-")
_EMAIL_DOMAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") - {""}
# What a guess must not swallow: each opens or closes something that hides text further on.
_OPENERS = frozenset("`[]\\")  # and a backslash, which may escape the "<" that ends the guess


def may_hide_what_follows(text: str) -> bool:
    """Whether ``text``, dropped whole by the matcher, may hide what comes after it in a browser: it may
    open an ``<a>``, ``<code>`` or ``<pre>``, or leave a tag, a quoted attribute value or a comment
    unclosed (raw HTML in an HTML block reaches a browser as written)."""
    if _LENIENT_OPENING.search(text) is not None:
        # Counted only where every "<" is a plain tag (no attribute, comment or quote a closing tag could
        # hide in): "<pre>log</pre>" leaves nothing open; anything else may.
        if _PLAIN_TAGS.fullmatch(text) is None:
            return True
        depth = dict.fromkeys(HIDING_ELEMENTS, 0)
        for closing, name in _PLAIN_TAG.findall(text):
            name = name.lower()
            if name in ("script", "style"):
                return True
            if name in depth:
                depth[name] = max(0, depth[name] - 1) if closing else depth[name] + 1
        if any(depth.values()):
            return True
    last = text.rfind("<")
    if last < 0:
        return False
    tail = text[last:]
    return ">" not in tail or tail.count('"') % 2 == 1 or tail.count("'") % 2 == 1 or (
        text.rfind("<!--") > text.rfind("-->")) or text.rfind("<![") > text.rfind("]]>")


@dataclass
class Elements:
    """The raw ``<a>``, ``<code>`` and ``<pre>`` elements open so far in the comment, in order read."""

    open: dict[str, int] = field(default_factory=lambda: dict.fromkeys(HIDING_ELEMENTS, 0))
    forever: bool = False  # something may have opened one whose end the matcher cannot see

    def hiding(self) -> bool:
        return self.forever or any(self.open.values())


# cmark reads a run of more backticks than this as literal text, and never remembers one.
_MAX_BACKTICKS = 80


class _Backticks:
    """Where a code span opened at a run of backticks closes, found as cmark-gfm finds it.

    cmark scans forward from the opener, run by run, remembering where it last saw a run of each length;
    once a scan has reached the paragraph's end it trusts that memory ("no run of this length after
    here") over scanning again. A later scan overwrites the memory with an earlier run, so cmark then
    misses closers the CommonMark spec would find, and shows their text: the same is done here, or a
    span read by the spec would hide a tag cmark passes through (an ``<a>`` it opens, for one).
    Linear overall, as cmark is: a failed scan happens once, every other ends at its closer.
    """

    def __init__(self, paragraph: str) -> None:
        self.starts: list[int] = []
        self.lengths: list[int] = []
        at = paragraph.find("`")
        while at >= 0:
            end = at
            while end < len(paragraph) and paragraph[end] == "`":
                end += 1
            self.starts.append(at)
            self.lengths.append(end - at)
            at = paragraph.find("`", end)
        self.scanned = False  # a scan has reached the end
        self.seen: dict[int, int] = {}  # run length → where one was seen last, as cmark remembers it

    def closer(self, end: int, length: int) -> int | None:
        """Where the closing run begins for an opener of ``length`` backticks ending at ``end``, or ``None``."""
        if length > _MAX_BACKTICKS or (self.scanned and self.seen.get(length, 0) <= end):
            return None
        for index in range(bisect.bisect_left(self.starts, end), len(self.starts)):
            start, run = self.starts[index], self.lengths[index]
            if run <= _MAX_BACKTICKS:
                self.seen[run] = start
            if run == length:
                return start
        self.scanned = True
        return None


def _skip_space(text: str, at: int) -> int:
    """Past spaces and tabs and at most one line ending (CommonMark's link whitespace)."""
    while at < len(text) and text[at] in " \t":
        at += 1
    if at < len(text) and text[at] == "\n":
        at += 1
        while at < len(text) and text[at] in " \t":
            at += 1
    return at


def _destination_end(text: str, at: int) -> int | None:
    """The end of the link destination starting at ``at`` (empty allowed), or ``None``."""
    if at < len(text) and text[at] == "<":
        at += 1
        while at < len(text) and text[at] not in "<>\n":
            at += 2 if text[at] == "\\" and at + 1 < len(text) and text[at + 1] in _PUNCTUATION else 1
        return at + 1 if at < len(text) and text[at] == ">" else None
    depth = 0
    while at < len(text):
        char = text[at]
        if char == "\\" and at + 1 < len(text) and text[at + 1] in _PUNCTUATION:
            at += 2
            continue
        if char in _WS or ord(char) < 0x20 or ord(char) == 0x7F:
            break
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                break
            depth -= 1
        at += 1
    return at if depth == 0 else None


def _title_end(text: str, at: int) -> int | None:
    """The end of the link title starting at ``at`` (``"…"``, ``'…'`` or ``(…)``), or ``None``."""
    close = {'"': '"', "'": "'", "(": ")"}[text[at]]
    at += 1
    while at < len(text):
        char = text[at]
        if char == "\\" and at + 1 < len(text) and text[at + 1] in _PUNCTUATION:
            at += 2
            continue
        if char == close:
            return at + 1
        if close == ")" and char == "(":
            return None
        at += 1
    return None


def inline_link_end(text: str, at: int) -> int | None:
    """Where the inline link's ``(destination "title")`` beginning at ``text[at] == "("`` ends, or ``None``."""
    at = _skip_space(text, at + 1)
    end = _destination_end(text, at)
    if end is None:
        return None
    after = _skip_space(text, end)
    if after > end and after < len(text) and text[after] in "\"'(":
        title = _title_end(text, after)
        if title is None:
            return None
        after = _skip_space(text, title)
    return after + 1 if after < len(text) and text[after] == ")" else None


@dataclass
class _Bracket:
    at: int  # where the "[" (or "![") went in the output
    image: bool


def shown(paragraph: str, elements: Elements | None = None) -> str:
    """What ``paragraph`` shows as text, every hidden run a single space; ``elements`` is updated."""
    elements = elements if elements is not None else Elements()
    backticks = _Backticks(paragraph)
    out: list[str] = []
    brackets: list[_Bracket] = []
    # Brackets below this index may sit inside a link already made: CommonMark makes them literal,
    # so what follows their "]" is read as text, not as a destination.
    inactive_below = 0
    images = 0  # image brackets open in ``brackets``
    size = len(paragraph)

    def put(text: str) -> None:
        if elements.hiding():
            if not out or out[-1] != " ":
                out.append(" ")
        else:
            out.extend(text)

    def hide_rest(at: int) -> str:
        """The output so far: what is left of the paragraph is hidden, an element it may open too."""
        if may_hide_what_follows(paragraph[at:]):
            elements.forever = True
        if brackets:  # a bracket still open may close in what is hidden: its text is a link's
            del out[brackets[0].at:]
        out.append(" ")
        return "".join(out)

    # The last end of each raw construct that runs to a fixed string: an opener after it is literal
    # text, found without scanning the rest of the paragraph again for every opener.
    last_end = {"<!--": paragraph.rfind("-->") - 1, "<?": paragraph.rfind("?>"),
                "<![CDATA[": paragraph.rfind("]]>") - 6, "<!": paragraph.rfind(">") - 1}

    at = 0
    while at < size:
        char = paragraph[at]
        if char == "\\" and paragraph.startswith("@", at + 1):
            at += 1  # GFM's addresses are found after escapes are resolved: read the "@" as any other
        elif char == "\\" and at + 1 < size and paragraph[at + 1] in _PUNCTUATION:
            put(paragraph[at + 1])
            at += 2
        elif char == "`":
            end = at
            while end < size and paragraph[end] == "`":
                end += 1
            closer = backticks.closer(end, end - at)
            if closer is None:
                put(paragraph[at:end])  # no run of its length closes it: literal backticks
                at = end
            else:
                out.append(" ")
                at = closer + end - at
        elif char == "<":
            match = _AUTOLINK.match(paragraph, at)
            if match is None and paragraph.startswith("<!--", at) and (
                    at + 1 > last_end["<!--"] or paragraph.startswith(("<!-->", "<!--->"), at)):
                # Unclosed, literal text to cmark but plainly meant as a comment; "<!-->" ends at once for
                # cmark and a browser, and reaches the next "-->" for others: hidden either way.
                return hide_rest(at)
            for opener, ender in (("<!--", "-->"), ("<?", "?>"), ("<![CDATA[", "]]>")):
                if match is None and paragraph.startswith(opener, at):
                    close = paragraph.find(ender, at + len(opener))
                    if close > at + len(opener) and paragraph[close - 1] == ender[0]:
                        # "--->", "??>" and "]]]>" end the construct for a browser and not for cmark,
                        # which reads on to a later end and passes what lies between through as
                        # markup: hidden either way.
                        return hide_rest(at)
            unclosed = any(paragraph.startswith(opener, at) and at + 1 > end for opener, end in last_end.items())
            if match is None and not unclosed:
                match = _RAW_HTML.match(paragraph, at)
            if match is None:
                put("<")
                at += 1
                continue
            out.append(" ")
            at = match.end()
            groups = match.groupdict() if match.re is _RAW_HTML else {}
            opened = (groups.get("open") or "").lower()
            closed = (groups.get("close") or "").lower()
            if not (opened or closed) and may_hide_what_follows(match.group()):
                # A browser ends "<?" and "<![" at the first ">" and may read on as markup.
                elements.forever = True
            elif opened in elements.open and not groups.get("selfclosing"):
                elements.open[opened] += 1
            elif closed in elements.open and elements.open[closed] and not images:
                # Inside an image's brackets a tag may end up as alt text, never closing anything: an
                # opening tag there counts (hiding more is safe), a closing one does not.
                elements.open[closed] -= 1
        elif char == "[" or (char == "!" and paragraph.startswith("[", at + 1)):
            brackets.append(_Bracket(len(out), char == "!"))
            images += char == "!"
            put(paragraph[at:at + 1 + (char == "!")])
            at += 1 + (char == "!")
        elif char == "]" and brackets:
            index = len(brackets) - 1
            bracket = brackets.pop()
            images -= bracket.image
            del out[bracket.at:]
            out.append(" ")
            at += 1
            maybe_inactive = index < inactive_below and not bracket.image
            if at < size and paragraph[at] == "(":
                link_end = None if maybe_inactive else inline_link_end(paragraph, at)
                if link_end is None:  # literal text, or a link cmark reads otherwise: hidden either way
                    return hide_rest(at)
                at = link_end
            # A link is made here, or may be (a reference whose definition is not looked up).
            if not bracket.image:
                inactive_below = len(brackets)
            else:
                inactive_below = min(inactive_below, len(brackets))
        elif char == "@" and out and out[-1] in _EMAIL_LOCAL and paragraph[at + 1:at + 2] in _EMAIL_DOMAIN:
            # GFM links an address ("pi.@x.y", "pi+x@y.z"), taking the letters of a mention just before it.
            start = len(out)
            while start and out[start - 1] in _EMAIL_LOCAL:
                start -= 1
            del out[start:]
            out.append("-")  # hidden, and no boundary: whether GFM links it or not, no mention touches it
            at += 1
            while at < size and paragraph[at] in _EMAIL_DOMAIN:
                at += 1
        elif paragraph.startswith(_URL_STARTS, at):
            start = len(out)
            while start and out[start - 1] not in _WS:
                start -= 1
            end = at
            while end < size and paragraph[end] not in _WS and paragraph[end] != "<":
                end += 1
            if (brackets and brackets[-1].at >= start) or not _OPENERS.isdisjoint(paragraph[at:end]):
                del out[start:]
                return hide_rest(at)
            del out[start:]
            out.append(" ")
            at = end
        else:
            put(char)
            at += 1
    return "".join(out)
