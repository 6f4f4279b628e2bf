"""Agent text made inert for the handoff's Markdown and for a terminal, and cut to caps on rendered bytes.

The letter and the ledger (``store/handoff.py``) are Markdown the operator writes around the agent's field
text. These functions are what keeps that text from forging the operator's structure in any view: control
characters and terminal escapes removed, every line ending ``\\n`` (:func:`clean`); any line Markdown would
read as a heading, a setext underline, a rule, a code fence or a raw HTML block escaped (:func:`escape`);
fields cut fairly, on a character boundary and with a visible marker, so the rendered UTF-8 stays within a
cap (:func:`fit`); and whatever is printed from the store shown without raw control bytes
(:func:`printable`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Terminal escape sequences (ECMA-48), removed whole so no parameter bytes are left behind as text: CSI
# (7- and 8-bit), the string controls (OSC, DCS, SOS, PM, APC) up to their terminator, and two-byte escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]"
                   r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)|\x1b[ -/]*[0-~]")
# Every line ending some reader honours (CommonMark: CR and CRLF; Unicode: NEL, LS, PS) becomes LF, so no
# line starts where escape() does not look.
_LINE_END = re.compile("\r\n?|[\x85\u2028\u2029]")
# C0 but TAB and LF, DEL, C1: never meaningful in a letter, and each can restyle or rewrite a terminal.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# A lone surrogate (JSON can carry one as ``\\ud800``) has no UTF-8 form: the file could not be written.
_SURROGATE = re.compile("[\ud800-\udfff]")
# What a line may open with before its own text: indentation, block quotes, list markers (a heading or
# an underline inside a quote or a list item is a heading all the same).
_CONTAINERS = re.compile(r"(?:[ \t]*(?:>|[-+*](?=[ \t]|$)|[0-9]{1,9}[.)](?=[ \t]|$)))*[ \t]*")
# A setext underline (=== or ---) or a thematic break: a line of only these turns the line above into a
# heading, or draws a rule that reads as the end of a section.
_RULE = re.compile(r"(?:=+|-+|(?:[-*_][ \t]*){3,})[ \t]*")
# Raw HTML blocks that run past a blank line, to their own end tag or marker: one left open would swallow
# the operator's headings after it in a rendered view (as would a code fence: no agent line opens one).
_HTML_BLOCK = re.compile(r"<(?:(?:pre|script|style|textarea)(?:[\s>]|$)|!|\?)", re.IGNORECASE)


def clean(text: str) -> str:
    """Agent text without control characters, terminal escapes or lone surrogates; every line ending ``\\n``."""
    return _SURROGATE.sub("", _CONTROL.sub("", _ANSI.sub("", _LINE_END.sub("\n", text))))


def printable(text: str) -> str:
    """``text`` safe to write to a terminal: each control character but LF and TAB shown as ``\\xNN``.

    For what the operator prints from the store (``pidispatch ledger``): a file another writer left there,
    or one written before :func:`clean`, must not drive the reader's terminal.
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r\n", "\n"))


def _escape_line(line: str) -> str:
    stripped = line.lstrip(" \t")
    if stripped.startswith(("#", "```", "~~~")) or _RULE.fullmatch(stripped):
        return line[:len(line) - len(stripped)] + "\\" + stripped
    at = _CONTAINERS.match(line).end()  # type: ignore[union-attr]  # matches the empty string at least
    rest = line[at:]
    if rest.startswith(("#", "```", "~~~")) or _RULE.fullmatch(rest) or _HTML_BLOCK.match(rest):
        return line[:at] + "\\" + rest
    return line


def escape(text: str) -> str:
    """Agent text made inert inside our Markdown: no line of it can be a heading or open a comment.

    A line is escaped (a backslash before its first character of text, after any quote or list marker) when
    Markdown would read it as an ATX heading, a setext underline (which makes the line above a heading), a
    thematic break, a code fence or a raw HTML block (either can run on past the field and swallow the
    operator's headings after it). ``<!--`` anywhere is broken up. Expects :func:`clean` text
    (``parse_handoff`` gives only that): one line per ``\\n``.
    """
    return "\n".join(_escape_line(line) for line in text.replace("<!--", "<\\!--").split("\n"))


def utf8_prefix(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` at most ``max_bytes`` long in UTF-8 (never half a character)."""
    data = text.encode("utf-8")
    return text if len(data) <= max_bytes else data[:max(max_bytes, 0)].decode("utf-8", "ignore")


def _shares(sizes: list[int], room: int) -> list[int]:
    """Each field's byte budget in ``room``: one under an even share keeps all it has, the rest split what is left."""
    budgets = [0] * len(sizes)
    left = room
    for placed, i in enumerate(sorted(range(len(sizes)), key=sizes.__getitem__)):
        budgets[i] = min(sizes[i], left // (len(sizes) - placed))
        left -= budgets[i]
    return budgets


def _cut(text: str, max_bytes: int, marker: str) -> str:
    """``text`` cut so that, escaped and ending with ``marker`` on its own line, it is at most ``max_bytes``.

    Cut before escaping and measured after it: a cut can make a new line (``----x`` becomes ``---``), which
    the escape then neutralises, and the escape's backslashes count against the budget.
    """
    tail = "\n\n" + marker
    budget = max_bytes - len(tail.encode())
    while budget > 0:
        cut = utf8_prefix(text, budget).rstrip() + tail
        over = len(escape(cut).encode()) - max_bytes
        if over <= 0:
            return cut
        budget -= over
    return marker


def fit(fields: dict[str, str], render: Callable[[dict[str, str]], str], max_bytes: int,
         marker: str) -> dict[str, str]:
    """``fields`` cut, fairly, so that ``render(fields)`` is at most ``max_bytes`` in UTF-8.

    The cap is on what is written, not on characters: 4 000 characters of CJK are 12 000 bytes. Every field
    keeps its section; those over an even share of the room are cut, each with the visible ``marker``.
    """
    if len(render(fields).encode()) <= max_bytes:
        return fields
    names = list(fields)
    room = max_bytes - len(render(dict.fromkeys(names, "")).encode())  # what the operator's own lines take
    sizes = [len(escape(fields[name]).encode()) for name in names]
    budgets = _shares(sizes, room)
    return {name: fields[name] if budget >= size else _cut(fields[name], budget, marker)
            for name, size, budget in zip(names, sizes, budgets, strict=True)}
