"""Whether a comment's visible prose mentions a Trigger's phrase (``@pi``, ``/pi run``) as GitHub shows it.

A substring test starts jobs from ``@pip install``, ``someone@pi.dev``, a quoted ``> @pi``, a code span,
a fenced block, ``<!-- @pi -->``, a link's title or an image's alt text, which GitHub never shows as a
mention. :func:`mentions` looks only at the prose GitHub renders (cmark-gfm, with its autolink, table,
strikethrough and tag filter extensions), in three passes over the Markdown, each linear in the text's
length but for long quoted attribute values (it is fed whatever a webhook sender writes, and fuzzed):

1. **Blocks**, line by line (:func:`prose_paragraphs`): fenced code, indented code (four columns not
   continuing a paragraph, or five after a list marker, or under a heading, a thematic break or a
   table), blockquotes and their lazy lines, HTML blocks (all seven of CommonMark's kinds: raw HTML,
   whose text a browser reads, not Markdown), and paragraphs holding a link reference definition are
   dropped. A bullet or ``1.`` list item ends a paragraph; a paragraph whose reading is uncertain (a
   setext underline, a table's delimiter row, another number's list item, a tag alone on a line) is
   dropped whole. Dropped raw text that may leave an ``<a>``, ``<code>``, ``<pre>``, a comment or a tag
   open ends the prose there: a browser reads on inside it.
2. **Inline**, in each paragraph (:func:`pidispatch.receiver.inline.shown`), left to right as cmark
   reads it: code spans, raw HTML, autolinks and GFM's bare URLs, brackets (a link's text, an image's
   alt, a reference) with an inline link's destination and title, and the inside of raw ``<a>``,
   ``<code>`` and ``<pre>`` elements become spaces; backslash escapes are resolved.
3. **The phrase**, at a boundary on each side: not glued to a word, an address or a path before it
   (the character before is none, or neither a word character nor one of ``@.-/``), and not the start
   of something longer after it (when the phrase ends in a word character, the next is none, or not a
   word character nor one of ``-/@&``, and dots are allowed only at the end or before a non-word
   character: ``@pi.`` ends a sentence, ``@pi.dev`` is a host).

Where the reading is uncertain it errs toward *not* matching (a bracket hides its text whether or not a
definition makes it a link; text after ``-->`` on a line that began a comment; an unclosed ``<!--``
hides the rest of its paragraph): a missed ``@pi`` can be written again, a job started by text nobody
saw cannot be taken back. ``tests/receiver/test_receiver_mention_oracle.py`` holds it to GitHub's renderer over
generated bodies: whatever it matches, cmark-gfm shows as a mention. Quotes are dropped by choice (GitHub
shows a quoted ``@pi``, but it is someone else's request). Case is kept: ``@PI`` is not ``@pi``.
"""

from __future__ import annotations

import re

from pidispatch.receiver.inline import Elements, may_hide_what_follows, shown

_BOUNDARY_BEFORE = frozenset("@.-/")
_BOUNDARY_AFTER = frozenset("-/@&")  # "&": an entity may decode to an address's "@" or "."
COMMENT_OPEN = "<!--"
COMMENT_CLOSE = "-->"


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _indent_columns(line: str) -> int:
    """The columns of leading whitespace (a tab runs to the next multiple of four)."""
    columns = 0
    for char in line:
        if char == " ":
            columns += 1
        elif char == "\t":
            columns += 4 - columns % 4
        else:
            break
    return columns


def _without_container_markers(line: str) -> str | None:
    """The line after its indentation and any list markers (``-``, ``*``, ``+``, ``1.``, ``1)``), or
    ``None`` when a list item begins with indented code (five columns or more after its marker)."""
    at, size, column = 0, len(line), 0
    while True:  # indexes, not slices: a line of a million "- " stays linear
        start, start_column = at, column
        while at < size and line[at] in " \t":
            column += 1 if line[at] == " " else 4 - column % 4  # a tab runs to the next multiple of four
            at += 1
        if start and at < size and column - start_column >= 5:
            return None
        if at + 1 < size and line[at] in "-+*" and line[at + 1] in " \t":
            at += 1
            column += 1
            continue
        digits = at
        while digits < size and digits - at < 9 and line[digits] in "0123456789":
            digits += 1
        if at < digits and digits + 1 < size and line[digits] in ".)" and line[digits + 1] in " \t":
            column += digits + 1 - at
            at = digits + 1
            continue
        return line[at:]


def _fence_opening(content: str) -> tuple[str, int] | None:
    """``(character, length)`` when ``content`` (markers stripped) opens a fenced code block."""
    if not content or content[0] not in "`~":
        return None
    char = content[0]
    length = len(content) - len(content.lstrip(char))
    if length < 3:
        return None
    if char == "`" and "`" in content[length:]:
        return None  # an info string may not hold a backtick: this is inline code, not a fence
    return char, length


def _fence_closes(line: str, fence: tuple[str, int]) -> bool:
    char, length = fence
    if _indent_columns(line) > 3:
        return False
    content = line.lstrip(" \t")
    run = len(content) - len(content.lstrip(char))
    return run >= length and content[run:].strip(" \t") == ""


def _raw_block_end(content: str) -> tuple[str, str] | None:
    """``(opener, end)`` when ``content`` begins an HTML block that blank lines do not end: a comment,
    CDATA, a processing instruction or a declaration (CommonMark's HTML blocks 2 to 5)."""
    if content.startswith(COMMENT_OPEN):
        return COMMENT_OPEN, COMMENT_CLOSE
    if content.startswith("<![CDATA["):
        return "<![CDATA[", "]]>"
    if content.startswith("<?"):
        return "<?", "?>"
    if content.startswith("<!") and content[2:3].isascii() and content[2:3].isupper():  # cmark-gfm: A-Z only
        return "<!", ">"
    return None


# CommonMark's HTML blocks 1 (ended by a line holding one of the closers), 6 and 7 (ended by a blank line).
_RAW_TEXT_BLOCK = re.compile(r"<(?:pre|script|style|textarea)(?:[ \t>]|$)", re.IGNORECASE)
_RAW_TEXT_END = re.compile(r"</(?:pre|script|style|textarea)>", re.IGNORECASE)
_BLOCK_TAG = re.compile(
    r"</?(?:address|article|aside|base|basefont|blockquote|body|caption|center|col|colgroup|dd|details|dialog"
    r"|dir|div|dl|dt|fieldset|figcaption|figure|footer|form|frame|frameset|h[1-6]|head|header|hr|html|iframe"
    r"|legend|li|link|main|menu|menuitem|nav|noframes|ol|optgroup|option|p|param|search|section|summary"
    r"|table|tbody|td|tfoot|th|thead|title|tr|track|ul)(?:[ \t>]|/>|$)", re.IGNORECASE)
_ATTRIBUTE = r"""[ \t]+[A-Za-z_:][A-Za-z0-9_.:-]*(?:[ \t]*=[ \t]*(?:[^ \t"'=<>`]+|'[^']*'|"[^"]*"))?"""
_LONE_TAG = re.compile(rf"(?:<[A-Za-z][A-Za-z0-9-]*(?:{_ATTRIBUTE})*[ \t]*/?>|</[A-Za-z][A-Za-z0-9-]*[ \t]*>)"
                       r"[ \t]*$")
_ATX_HEADING = re.compile(r"#{1,6}(?:[ \t]|$)")
_THEMATIC_BREAK = re.compile(r"(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$")
# A line that may underline a setext heading, or be a table's delimiter row, under the paragraph above.
_UNDERLINE = re.compile(r"(?:=+|-+)[ \t]*$")
_DELIMITER_ROW = re.compile(r"[|:\- \t]*-[|:\- \t]*$")
_EMPTY_ITEM = re.compile(r"[ \t]{0,3}(?:[-+*]|[0-9]{1,9}[.)])[ \t]*$")
_LIST_MARKER = re.compile(r"([0-9]{1,9})[.)]")


class _Paragraph:
    """The lines of one paragraph as read so far, and whether it is dropped whole (``poisoned``).

    A paragraph is poisoned when a line makes its reading uncertain: a setext underline or table
    delimiter row (a heading or a table, whose cells and following lines read otherwise), or a line
    that would begin an HTML block if it did not continue a paragraph. Its lines are still read for
    the blocks that outlive a paragraph (fences, comments), so that what follows reads as cmark reads it.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.poisoned = False
        # Where the text of the list item the paragraph begins in starts (``None``: not in an item begun
        # on its first line, or a tab makes it uncertain); whether it begins at the document's own level.
        self.item_column: int | None = None
        self.top_level = False

    def append(self, line: str, content: str) -> None:
        if not self.lines:
            prefix = len(line) - len(content)
            marked = len(content) < len(line.lstrip(" \t"))
            self.item_column = prefix if marked and "\t" not in line[:prefix] else None
            self.top_level = not marked and line[:1] not in (" ", "\t")
        self.lines.append(line)

    def __bool__(self) -> bool:
        return bool(self.lines)


def prose_paragraphs(text: str) -> list[str]:
    """The paragraphs of ``text`` GitHub renders as prose, in order: no code, quotes, HTML blocks or link
    reference definitions. Text that may open an ``<a>``, ``<code>`` or ``<pre>`` whose end the matcher
    cannot see (in a quote or HTML block it drops) ends the list: everything after it may be inside."""
    paragraphs: list[str] = []
    current = _Paragraph()
    fence: tuple[str, int] | None = None
    raw_until: str | re.Pattern[str] | None = None  # in an HTML block ended by a string or a closing tag
    html_block = False  # in an HTML block ended by a blank line (6 or 7)
    quoted = False  # the previous line was quoted: a non-blank line right after continues the quote
    after_underline = False  # the line before ended a heading or may be a table's: an indented line is code
    ended = False  # something may be open to the end: nothing more is prose
    raw: list[str] = []  # the lines of the HTML block being dropped, read whole at its end
    raw_in_item = False  # that block began in a list item, and ends with it where the item ends (not tracked)

    def end_raw() -> None:
        if raw:
            drop("\n".join(raw))
            raw.clear()

    def drop(dropped: str) -> None:
        nonlocal ended
        if may_hide_what_follows(dropped):
            ended = True

    def flush() -> None:
        nonlocal current
        if current:
            joined = "\n".join(current.lines)
            definition = "]:" in joined and any(
                (_without_container_markers(line) or "").startswith("[") for line in current.lines)
            if current.poisoned or definition or ended:
                drop(joined)
            else:
                paragraphs.append(joined)
        current = _Paragraph()

    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if ended:
            break
        if (raw_until is not None or html_block) and raw_in_item and _indent_columns(line) < 4:
            inner = line.lstrip(" \t")
            if _fence_opening(inner) or _raw_block_end(inner) or _RAW_TEXT_BLOCK.match(inner):
                ended = True  # the item may have ended, and this begun a block blank lines do not end
                break
        if raw_until is not None:
            if raw_until == COMMENT_CLOSE:
                if COMMENT_CLOSE in line:  # a comment's text is never markup; what follows its end is
                    drop(line[line.find(COMMENT_CLOSE):])
                    raw_until = None
                continue
            raw.append(line)
            if raw_until.search(line) if isinstance(raw_until, re.Pattern) else raw_until in line:
                raw_until = None
                end_raw()
            continue
        if fence is not None:
            if _fence_closes(line, fence):
                fence = None
            continue
        if not line.strip(" \t"):
            flush()
            end_raw()
            quoted = html_block = after_underline = False
            continue
        if html_block:
            raw.append(line)
            continue
        if _indent_columns(line) >= 4 and not quoted:
            if current and not after_underline:
                # Four columns continue a paragraph, unless the paragraph is in a list item and the line
                # begins a block at the item's own indentation (not tracked): read both ways, hidden.
                inner = line.lstrip(" \t")
                if _fence_opening(inner) or _raw_block_end(inner) or _RAW_TEXT_BLOCK.match(inner):
                    ended = True  # a block that blank lines do not end: hidden to the end
                elif inner.startswith(("<", ">", "#")) or _without_container_markers(inner) != inner:
                    current.poisoned = True
                current.append(line, line)
            elif current:
                current.poisoned = True  # code under a heading or a table, or the paragraph's own text
            else:
                drop(line)  # indented code, or a list item's paragraph read at the item's indentation
            continue
        stripped = line.lstrip(" \t")
        if _THEMATIC_BREAK.match(stripped) and not (current and _UNDERLINE.match(stripped)):
            flush()
            after_underline = True
            continue
        after_underline = False
        if _EMPTY_ITEM.match(line):
            if current:  # an empty item of the list the paragraph is in, or the paragraph's text
                current.poisoned = after_underline = True
                continue
            continue  # an empty list item: the indented line after it is its code
        content = _without_container_markers(line)
        raw_in_item = content != line  # read only if an HTML block begins on this line
        if content is None:
            marker = _LIST_MARKER.match(stripped)
            if current and marker and marker.group(1).lstrip("0") not in ("", "1"):
                current.poisoned = True  # "2." may not begin a list inside a paragraph: perhaps its text
                current.append(line, line)
                continue
            flush()
            drop(line)
            continue  # a list item's indented code
        if current and len(content) < len(stripped) and content.strip(" \t"):
            # A list item: a bullet or "1." ends the paragraph above; another number does when it is left of
            # the text of the item the paragraph is in (it is then the list's next item), and may not else.
            marker = _LIST_MARKER.match(stripped)
            indent = len(line) - len(stripped)
            column = current.item_column
            if marker and marker.group(1).lstrip("0") not in ("", "1") and (column is None or indent >= column):
                current.poisoned = True
            else:
                flush()
        opening = _fence_opening(content)
        if opening is not None:
            flush()
            fence, quoted = opening, False
            continue
        if content.startswith(">") or quoted:
            flush()
            drop(line)
            quoted = True
            continue
        ends = _raw_block_end(content)
        if ends is not None:
            flush()
            # "<!-->" and "<!--->" end where they begin, for cmark and for a browser.
            opener, end = ends
            closing = content.find(end, 2 if opener == COMMENT_OPEN else len(opener))
            raw_until = end if closing < 0 else None
            # A comment's text is never markup; what follows its end on the line is.
            if opener != COMMENT_OPEN:
                raw.append(content)
            elif closing >= 0:
                raw.append(content[closing:])
            if raw_until is None:
                end_raw()
            elif raw_in_item:
                ended = True  # ended by the item's end, perhaps, and left open in the HTML: hidden to the end
            continue
        if _RAW_TEXT_BLOCK.match(content):
            flush()
            raw.append(content)
            raw_until = None if _RAW_TEXT_END.search(content) else _RAW_TEXT_END
            if raw_until is None:
                end_raw()
            elif raw_in_item:
                ended = True  # ended by the item's end, perhaps, and left open in the HTML: hidden to the end
            continue
        if _BLOCK_TAG.match(content) or (_LONE_TAG.match(content) and not current):
            flush()
            raw.append(content)
            html_block = True
            continue
        if _ATX_HEADING.match(content):
            flush()
            current.append(content, content)
            flush()
            after_underline = True
            continue
        # A tag alone on a line cannot interrupt a paragraph, but may begin an HTML block where a list item
        # ends (not tracked): read inline only in a paragraph at the document's own level.
        lone_tag = _LONE_TAG.match(content) and not current.top_level
        if current and (lone_tag or _UNDERLINE.match(stripped) or _DELIMITER_ROW.match(stripped)):
            current.poisoned = True
            after_underline = True
        current.append(line, content)
    flush()
    end_raw()
    return paragraphs


def _bounded_at(text: str, start: int, phrase: str) -> bool:
    if start > 0 and not phrase[0].isspace():
        before = text[start - 1]
        if _is_word(before) or before in _BOUNDARY_BEFORE:
            return False
    if not _is_word(phrase[-1]):
        return True
    after = start + len(phrase)
    if after == len(text):
        return True
    if text[after] == ".":
        # Dots end a sentence unless a word follows them, as in a host name ("@pi.dev").
        while after < len(text) and text[after] == ".":
            after += 1
        return after == len(text) or not _is_word(text[after])
    return not (_is_word(text[after]) or text[after] in _BOUNDARY_AFTER)


def phrase_in(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` at a boundary on each side (no Markdown is read here)."""
    at = text.find(phrase)
    while at >= 0:
        if _bounded_at(text, at, phrase):
            return True
        at = text.find(phrase, at + 1)
    return False


def mentions(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs as a mention (or a whole word) in the prose of ``text`` readers see."""
    if not phrase or phrase not in text:
        return False  # the common case, and the fast one
    elements = Elements()  # raw <a>, <code> and <pre> left open run on into the paragraphs after
    return any(phrase_in(shown(p, elements), phrase) for p in prose_paragraphs(text))
