"""The credential scan over decoded text: a transcript's view (``store/jsonview.py``), a handoff's fields.

Text is scanned as the program that reads it will see it (``\\u0067`` is ``g``, ``\\n`` a line break), so an
escape hides nothing: the common formats and the job's own secrets in each of their forms
(``store/secretforms.py``). Two *variants* of the text are scanned too, each mapped back to the bytes it
came from:

* each wrapped run (token characters across single line breaks) with its line breaks removed, for the
  common formats: a ``ghs_`` token printed in two lines is one token; a greedy format is cut back to the
  first line end at which it matches whole, so it never takes the start of the next line;
* each run of URL characters that holds a ``%XX``, percent-decoded (``%67hs_…``, ``a%20<secret>``, ``+`` as
  a space): an encoded token, or a token glued to an encoded separator.

A hit found in a variant yields to one found in the text itself at the same place."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable

from pidispatch.contract.digests import SecretDigest
from pidispatch.store.redact import Hit, Redacted, Wanted, apply, format_hits, trimmed
from pidispatch.store.secretforms import joined_runs, run_hits, wrapped_hits, wrapped_runs

_PCT = re.compile(rb"%[0-9A-Fa-f]{2}")
_URL_AT = re.compile(rb"[A-Za-z0-9_.~+%-]*")
# (offset in the variant, offset in the buffer, bytes of the buffer per byte of the variant: 1, or 3 for %XX)
Segment = tuple[int, int, int]


def redact_text(data: bytes, secrets: Iterable[SecretDigest]) -> Redacted:
    """One decoded text (UTF-8) with every credential replaced."""
    return apply(data, scan(data, Wanted(secrets)))


def scan(text: bytes, wanted: Wanted) -> list[Hit]:
    """The unsettled hits in decoded ``text`` (one value, or a transcript's view, ``store/jsonview.py``)."""
    hits = format_hits(text)
    runs = wrapped_runs(text)
    if wanted:
        hits += run_hits(text, wanted)
        hits += wrapped_hits(text, runs, wanted)
    variant, segments, ends = _variant(text, runs)
    if variant:
        found = [trimmed(variant, h, ends) for h in format_hits(variant, 1)]
        found += run_hits(variant, wanted, 1) if wanted else []
        keys = [s[0] for s in segments]
        hits += [_mapped(h, keys, segments) for h in found]
    return hits


def _variant(buf: bytes, runs: list[list[tuple[int, int]]]) -> tuple[bytes, list[Segment], list[int]]:
    """The variant buffer (its pieces separated by NUL), how each of its bytes maps back into ``buf``, and
    where each line of a joined run ends in it."""
    pieces: list[bytes] = []
    segments: list[Segment] = []
    ends: list[int] = []
    at = 0
    for joined, where in joined_runs(buf, runs):
        segments += [(at + v, b, 1) for v, b in where]
        ends += [at + v for v, _ in where[1:]] + [at + len(joined)]
        pieces += [joined, b"\x00"]
        at += len(joined) + 1
    for decoded, mapping in _percent_runs(buf):
        segments += [(at + v, b, step) for v, b, step in mapping]
        pieces += [decoded, b"\x00"]
        at += len(decoded) + 1
    return b"".join(pieces), segments, ends


def _percent_runs(buf: bytes) -> list[tuple[bytes, list[Segment]]]:
    """Each run of URL characters in ``buf`` that holds a ``%XX``, percent-decoded (``+`` as a space); one step
    per ``%XX``, the stretches between them copied whole."""
    out = []
    end = 0
    reverse = b""
    for m in _PCT.finditer(buf):
        if m.start() < end:
            continue
        if not reverse:
            reverse = buf[::-1]
        start = len(buf) - _URL_AT.match(reverse, len(buf) - m.start()).end()  # type: ignore[union-attr]
        end = _URL_AT.match(buf, m.start()).end()  # type: ignore[union-attr]
        decoded: list[bytes] = []
        where: list[Segment] = []
        at, length = start, 0
        for e in _PCT.finditer(buf, start, end):
            if e.start() > at:
                where.append((length, at, 1))
                decoded.append(buf[at:e.start()].replace(b"+", b" "))
                length += e.start() - at
            where.append((length, e.start(), 3))
            decoded.append(bytes((int(e.group(0)[1:], 16),)))
            length += 1
            at = e.end()
        if end > at:
            where.append((length, at, 1))
            decoded.append(buf[at:end].replace(b"+", b" "))
        out.append((b"".join(decoded), where))
    return out


def _mapped(hit: Hit, keys: list[int], segments: list[Segment]) -> Hit:
    rank, var, neg_end, order, start, kind, counted = hit

    def back(v: int) -> tuple[int, int]:
        voff, boff, step = segments[bisect_right(keys, v) - 1]
        return (boff + v - voff, boff + v - voff + 1) if step == 1 else (boff, boff + 3)

    return (back(rank)[0], var, -back(-neg_end - 1)[1], order, back(start)[0], kind, counted)
