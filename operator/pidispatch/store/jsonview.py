"""A decoded view of JSON text, mapped back to its bytes: what the credential scan reads a transcript through.

Each JSON string escape that can stand for or next to a token character is decoded in the view: ``\\uXXXX``
(a surrogate pair as one character) and ``\\n``, ``\\r``, ``\\t``, ``\\b``, ``\\f``, ``\\/``. ``\\"`` and
``\\\\`` stay as they are, and so do ``\\u0022`` and ``\\u005c``: they decode to characters that no token
holds, and keeping them keeps every quote in the view a quote of the JSON's structure. Everything else is
the bytes themselves, so the view of a transcript is its lines with their string values decoded, and a span
found in the view maps back to whole bytes and whole escapes (:meth:`View.start`, :meth:`View.end`).
Replacing such a span with text that needs no escaping leaves each line valid JSON of the same structure,
with every other byte as it was: the same as decoding the value, replacing, and encoding it again.
"""

from __future__ import annotations

import re
from bisect import bisect_right

_ESCAPE = re.compile(rb"\\(?:u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|(.))",
                     re.DOTALL)
_SIMPLE = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f", b"/": b"/"}


class View:
    """``data`` with its escapes decoded (:attr:`text`), and the way back from an offset in it to ``data``."""

    def __init__(self, data: bytes) -> None:
        pieces: list[bytes] = []
        # Per decoded escape: its offset in the view, its length there, its offset and length in ``data``.
        self._view: list[int] = []
        self._marks: list[tuple[int, int, int, int]] = []
        at = shift = 0
        for m in _ESCAPE.finditer(data):
            high, low, single, char = m.group(1, 2, 3, 4)
            if char is not None:
                decoded = _SIMPLE.get(char)
                if decoded is None:
                    continue  # \" and \\ (and what is not an escape) stay as they stand
            elif high is not None:
                code = 0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(low, 16) - 0xDC00)
                decoded = chr(code).encode("utf-8")
            elif int(single, 16) in (0x22, 0x5C):
                continue  # a quote or a backslash written as \u0022, \u005c: as \" and \\, kept
            else:
                decoded = chr(int(single, 16)).encode("utf-8", "surrogatepass")
            pieces += [data[at:m.start()], decoded]
            view_at = m.start() - shift
            self._view.append(view_at)
            self._marks.append((view_at, len(decoded), m.start(), m.end() - m.start()))
            shift += (m.end() - m.start()) - len(decoded)
            at = m.end()
        pieces.append(data[at:])
        self.text = b"".join(pieces)

    def _locate(self, v: int) -> tuple[int, int] | None:
        """The escape holding view offset ``v`` as (start, end) in ``data``, or ``None`` and the caller shifts."""
        i = bisect_right(self._view, v) - 1
        if i < 0:
            return None
        view_at, view_len, raw_at, raw_len = self._marks[i]
        if v < view_at + view_len:
            return raw_at, raw_at + raw_len
        return None

    def _shifted(self, v: int) -> int:
        i = bisect_right(self._view, v) - 1
        if i < 0:
            return v
        view_at, view_len, raw_at, raw_len = self._marks[i]
        return raw_at + raw_len + (v - view_at - view_len)

    def start(self, v: int) -> int:
        """Where the byte at view offset ``v`` begins in ``data`` (an escape's backslash)."""
        inside = self._locate(v)
        return inside[0] if inside else self._shifted(v)

    def end(self, v: int) -> int:
        """Where a span of the view that ends before ``v`` ends in ``data`` (after a whole escape)."""
        if v <= 0:
            return 0
        inside = self._locate(v - 1)
        return inside[1] if inside else self._shifted(v - 1) + 1
