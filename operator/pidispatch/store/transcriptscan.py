"""The credential scan of a transcript block: read through its decoded view, redacted in its own bytes.

The block (whole lines, each one JSON value as pi writes it) is scanned in its view (``store/jsonview.py``):
every string value decoded, the JSON's structure kept, so an ``Authorization`` key and its ``Bearer …`` value
are still one header. Each hit maps back to whole bytes and whole escapes and is replaced there by a marker
that needs no escaping: a redacted line is valid JSON of the same structure, the same as decoding the value,
replacing and encoding it again, and every byte outside a hit (a line without one) is kept as it was.

A secret split in two is looked for between *adjacent* values (docs/security.md#the-decoded-scan-and-what-a-split-is):
the values of the ``text`` and ``thinking`` keys (pi's text parts: the user's, the assistant's, a tool
result's) in file order, each with its line's ``role``: a value and the next one of the same key and role
are adjacent. The end of a tool result and the start of the next tool result are adjacent however many
assistant lines stand between; so are two text parts of one message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pidispatch.contract.digests import SecretDigest
from pidispatch.store.decoded import scan
from pidispatch.store.jsonview import View
from pidispatch.store.redact import SECRET_ORDER, Hit, Redacted, Wanted, apply
from pidispatch.store.secretforms import head_pieces, split_match, tail_pieces

# A value of a text key: the key, then the string token (in the view, ``\"`` and ``\\`` stand as in JSON).
_TEXT = re.compile(rb'"(text|thinking)"[ \t]*:[ \t]*"([^"\\]*(?:\\.[^"\\]*)*)"', re.DOTALL)
_ROLE = re.compile(rb'"role":"([A-Za-z_]{1,40})"')


def redact_lines(block: bytes, secrets: Iterable[SecretDigest] = ()) -> Redacted:
    """``block`` (whole lines) with every credential replaced, and the count of each kind."""
    wanted = Wanted(secrets)
    view = View(block)
    hits = scan(view.text, wanted)
    if wanted:
        hits += _splits(block, view, wanted)
    return apply(block, [(view.start(rank), var, -view.end(-neg_end), order, view.start(start), kind, counted)
                         for rank, var, neg_end, order, start, kind, counted in hits])


def _splits(block: bytes, view: View, wanted: Wanted) -> list[Hit]:
    """The hits of a secret split between the end of one text value and the start of the next of its kind."""
    hits: list[Hit] = []
    last: dict[tuple[bytes, bytes], tuple[int, bytes]] = {}
    line_end, role = -1, b""
    for m in _TEXT.finditer(view.text):
        at = view.start(m.start())
        if at >= line_end:  # a new line of the block: its role, found in its bytes (a line break there is one)
            line_start = block.rfind(b"\n", 0, at) + 1
            found = block.find(b"\n", at)
            line_end = len(block) if found < 0 else found
            r = _ROLE.search(block, line_start, line_end)
            role = r.group(1) if r else b""
        channel = (m.group(1), role)
        b_start, b_value = m.start(2), m.group(2)
        previous = last.get(channel)
        last[channel] = (b_start, b_value)
        if previous is None or len(previous[1]) + len(b_value) < wanted.shortest:
            continue
        a_start, a_value = previous
        tails = tail_pieces(a_value, wanted)
        heads = head_pieces(b_value, wanted) if tails else []
        found_split = split_match(tails, heads, wanted) if heads else None
        if found_split is None:
            continue
        start, end = found_split
        tail_end = a_start + len(a_value.rstrip())
        head_start = b_start + len(b_value) - len(b_value.lstrip())
        hits.append((a_start + start, 0, -tail_end, SECRET_ORDER, a_start + start, "job-secret", True))
        hits.append((head_start, 0, -(b_start + end), SECRET_ORDER, head_start, "job-secret", False))
    return hits
