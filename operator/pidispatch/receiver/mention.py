"""Whether a comment's visible prose mentions a Trigger's phrase (``@pi``, ``/pi run``) as users read it.

A substring test starts jobs from ``@pip install``, ``someone@pi.dev``, a quoted ``> @pi``, a code span,
a fenced block and ``<!-- @pi -->``, which GitHub never shows. :func:`mentions` looks only at the prose
GitHub renders, in three passes over the Markdown, each linear in the text's length (it is fed
whatever a webhook sender writes, and fuzzed):

1. **Blocks**, line by line: fenced code (`````` ``` `````` or ``~~~``, any length, closed by a fence of
   the same character at least as long; an unclosed fence runs to the end, as in CommonMark),
   indented code (four columns not continuing a paragraph, or five after a list marker), blockquote
   lines (``>`` first, after up to three columns and any list markers) and the lines that lazily
   continue them, and the HTML blocks blank lines do not end (a line beginning ``<!--``, ``<?``,
   ``<!X`` or ``<![CDATA[``, through the line holding its end) are dropped. What remains are
   paragraphs of prose.
2. **Inline**, in each paragraph, left to right, whichever begins first: a run of backticks opens a
   code span closed by the next run of the same length (a run without one is literal; a backslash
   before it escapes its first backtick); ``<!--`` opens a comment closed by the next ``-->`` (unclosed,
   it hides the rest of the paragraph). Both become a space; so do HTML tags (their attributes are
   never shown; an unclosed one hides the rest), and backslash escapes are resolved.
3. **The phrase**, at a boundary on each side: not glued to a word, an address or a path before it
   (the character before is none, or neither a word character nor one of ``@.-/``), and not the start
   of something longer after it (when the phrase ends in a word character, the next is none, or not a
   word character nor one of ``-/@``, and dots are allowed only at the end or before a non-word
   character: ``@pi.`` ends a sentence, ``@pi.dev`` is a host).

Where Markdown is ambiguous the reading errs toward *not* matching (text after ``-->`` on a line that
began a comment, which is raw HTML; paragraphs across list items read as one, so a span may reach
further): a missed ``@pi`` can be written again, a job started by text nobody saw cannot be taken back.
Not modelled: indentation relative to a list item's content (a quote or fence indented under a list
item reads as its paragraph's text), and the older CommonMark rule that a comment may not hold ``--``.
Case is kept: ``@PI`` is not ``@pi``, as before.
"""

from __future__ import annotations

import bisect
import re

_BOUNDARY_BEFORE = frozenset("@.-/")
_BOUNDARY_AFTER = frozenset("-/@")
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
    at, size = 0, len(line)
    while True:  # indexes, not slices: a line of a million "- " stays linear
        start = at
        while at < size and line[at] in " \t":
            at += 1
        if start and at < size and _indent_columns(line[start:at]) >= 5:
            return None
        if at + 1 < size and line[at] in "-+*" and line[at + 1] in " \t":
            at += 1
            continue
        digits = at
        while digits < size and digits - at < 9 and line[digits] in "0123456789":
            digits += 1
        if at < digits and digits + 1 < size and line[digits] in ".)" and line[digits + 1] in " \t":
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
    if content.startswith("<!") and content[2:3].isascii() and content[2:3].isalpha():
        return "<!", ">"
    return None


def prose_paragraphs(text: str) -> list[str]:
    """The paragraphs of ``text`` GitHub renders as prose: no code blocks, quotes or HTML comment blocks."""
    paragraphs: list[str] = []
    current: list[str] = []
    fence: tuple[str, int] | None = None
    raw_until: str | None = None  # in an HTML comment, declaration or instruction block: its end
    quoted = False  # the previous line was quoted: a non-blank line right after continues the quote

    def flush() -> None:
        if current:
            paragraphs.append("\n".join(current))
            current.clear()

    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if raw_until is not None:
            if raw_until in line:
                raw_until = None
            continue
        if fence is not None:
            if _fence_closes(line, fence):
                fence = None
            continue
        if not line.strip(" \t"):
            flush()
            quoted = False
            continue
        if _indent_columns(line) >= 4 and not quoted:
            if current:
                current.append(line)  # four columns continue a paragraph: nothing can interrupt it
            continue  # otherwise, indented code
        content = _without_container_markers(line)
        if content is None:
            flush()
            continue  # a list item's indented code
        opening = _fence_opening(content)
        if opening is not None:
            flush()
            fence, quoted = opening, False
            continue
        if content.startswith(">") or quoted:
            flush()
            quoted = True
            continue
        ends = _raw_block_end(content)
        if ends is not None:
            flush()
            # Searched for after the whole opener: "<!-->" reads as unclosed, the safe side.
            opener, end = ends
            raw_until = end if end not in content[len(opener):] else None
            continue
        current.append(line)
    flush()
    return paragraphs


def without_code_spans(paragraph: str) -> str:
    """``paragraph`` with each code span and inline HTML comment replaced by a space.

    Left to right, whichever begins first wins, as in CommonMark: a run of backticks opens a span
    closed by the next run of the same length (a run without one is literal); ``<!--`` opens a
    comment closed by the next ``-->`` (an unclosed one hides the rest of the paragraph).
    """
    runs: list[tuple[int, int]] = []  # (start, length) of every backtick run, in order
    escaped: set[int] = set()  # runs whose first backtick a backslash escapes: it opens nothing
    at = paragraph.find("`")
    while at >= 0:
        end = at
        while end < len(paragraph) and paragraph[end] == "`":
            end += 1
        backslashes = 0
        while at - backslashes > 0 and paragraph[at - backslashes - 1] == "\\":
            backslashes += 1
        if backslashes % 2:
            escaped.add(len(runs))
        runs.append((at, end - at))
        at = paragraph.find("`", end)
    by_length: dict[int, list[int]] = {}
    for index, (_, length) in enumerate(runs):
        by_length.setdefault(length, []).append(index)
    kept: list[str] = []
    copied = 0  # paragraph[:copied] is decided
    index = 0  # the next backtick run not yet passed
    comment = paragraph.find(COMMENT_OPEN)  # the next comment opener at or after `copied`, or -1
    while True:
        tick = runs[index][0] if index < len(runs) else -1
        if comment >= 0 and (tick < 0 or comment < tick):
            kept += [paragraph[copied:comment], " "]
            close = paragraph.find(COMMENT_CLOSE, comment + len(COMMENT_OPEN))
            if close < 0:
                return "".join(kept)
            copied = close + len(COMMENT_CLOSE)
            while index < len(runs) and runs[index][0] < copied:
                index += 1
        elif tick >= 0:
            # Escapes work only outside a span: "\``x``" opens with its last two; a closer is whole.
            length = runs[index][1] - (index in escaped)
            if index in escaped:
                tick += 1
            same = by_length.get(length, [])
            closer = bisect.bisect_right(same, index)
            if closer == len(same):
                index += 1  # no closing run of this length: literal backticks
                continue
            kept += [paragraph[copied:tick], " "]
            close_index = same[closer]
            copied = runs[close_index][0] + length
            index = close_index + 1
        else:
            break
        if comment >= 0 and comment < copied:
            comment = paragraph.find(COMMENT_OPEN, copied)
    kept.append(paragraph[copied:])
    return "".join(kept)


_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")
# An HTML tag, declaration or processing instruction, over lines too: its attributes are never
# shown ("<a title='@pi'>"), and unclosed it hides the rest ("</p @pi" shows nothing).
_TAG = re.compile(r"<(?:/?[A-Za-z]|![A-Za-z\[]|\?)[^>]*(?:>|\Z)")


def shown(paragraph: str) -> str:
    """What a paragraph shows: code spans, HTML comments and tags as spaces, backslash escapes resolved."""
    return _ESCAPED.sub(r"\1", _TAG.sub(" ", without_code_spans(paragraph)))


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
    return any(phrase_in(shown(p), phrase) for p in prose_paragraphs(text))
