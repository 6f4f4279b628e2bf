"""The forms in which the job's own secrets are looked for in decoded text, by digest alone (``store/redact.py``).

The operator knows each secret only as a length and a SHA-256 (:class:`~pidispatch.store.redact.Wanted`), so
every form below is a way of choosing *candidate byte strings* of one of those lengths from the text, each
hashed and compared; nothing here holds, guesses or rebuilds a value. A candidate begins and ends where a run
of token characters (``[A-Za-z0-9_-]``) does, never inside one (``x<secret>`` is not found, as before):

* **a run**: a run of token characters of a secret's exact length (what the scan did before);
* **wrapped**: runs separated by single line breaks (``\\n`` or ``\\r\\n``), joined without them, from the
  start of one run to the end of a later one (a token printed in two lines, a terminal's wrap);
* **base64**: a run of base64 characters (standard or URL-safe, padded or not) whose decoding is a secret,
  or a secret and one newline (``echo $TOKEN | base64``); a secret inside a longer encoded text is not;
* **split**: the end of one text and the start of the next (:func:`tail_pieces`, :func:`head_pieces`; which
  texts follow one another is ``store/transcriptscan.py``'s).

Percent-encoding is not a form here: ``store/decoded.py`` decodes it and looks at the result as text.
"""

from __future__ import annotations

import binascii
import re

from pidispatch.store.redact import SECRET_ORDER, Hit, Wanted

_TOKEN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
# Runs of token or base64 characters: a run of token characters of a secret's length lies inside one of these.
_WIDE = re.compile(rb"[A-Za-z0-9_+/=-]{20,}")
_TOKEN_RUN = re.compile(rb"[A-Za-z0-9_-]{20,}")
_B64_RUN = re.compile(rb"[A-Za-z0-9+/_-]+={0,2}")
# A line break with a token character after it (the one before is checked on the few matches): a literal
# first, so ``re`` skips to each line break at memchr speed; a pattern that began with the class of token
# characters would be tried at every byte.
_BREAK = re.compile(rb"\n(?=[A-Za-z0-9_-])")
_TOKEN_AT = re.compile(rb"[A-Za-z0-9_-]*")
# Shorter wrapped runs are no common format and no secret.
_WRAPPED_MIN = 15


def _b64_lengths(wanted: Wanted) -> frozenset[int]:
    """The lengths, without padding, of the base64 of a secret and of a secret with a newline."""
    return frozenset(-(-4 * n // 3) for length in wanted.lengths for n in (length, length + 1))


def run_hits(data: bytes, wanted: Wanted, variant: int = 0) -> list[Hit]:
    """A secret as a whole run of token characters, or base64-encoded as a whole run, in ``data``."""
    hits: list[Hit] = []
    b64 = _b64_lengths(wanted)
    for wide in _WIDE.finditer(data):
        base = wide.start()
        text = wide.group(0)
        for m in _TOKEN_RUN.finditer(text):
            if wanted.matches(m.group(0)):
                hits.append((base + m.start(), variant, -(base + m.end()), SECRET_ORDER, base + m.start(),
                             "job-secret", True))
        for m in _B64_RUN.finditer(text):
            body = m.group(0).rstrip(b"=")
            if len(body) in b64 and _b64_secret(body, wanted):
                hits.append((base + m.start(), variant, -(base + m.end()), SECRET_ORDER, base + m.start(),
                             "job-secret", True))
    return hits


def _b64_secret(body: bytes, wanted: Wanted) -> bool:
    if b"-" in body or b"_" in body:
        if b"+" in body or b"/" in body:
            return False
        body = body.replace(b"-", b"+").replace(b"_", b"/")
    try:
        value = binascii.a2b_base64(body + b"=" * (-len(body) % 4), strict_mode=True)
    except (binascii.Error, ValueError):
        return False
    return wanted.matches(value) or (value.endswith(b"\n") and wanted.matches(value[:-1]))


def wrapped_runs(data: bytes) -> list[list[tuple[int, int]]]:
    """Each run of token characters across single line breaks (``\\n`` or ``\\r\\n``) in ``data``, as the
    (start, end) of its runs, two or more; only those of at least 15 token characters."""
    runs: list[list[tuple[int, int]]] = []
    current: list[tuple[int, int]] = []
    current_end = -1
    reverse = b""
    for m in _BREAK.finditer(data):
        at = m.start()
        before = at - 1 if at > 0 and data[at - 1] == 0x0D else at
        if before == 0 or data[before - 1] not in _TOKEN:
            continue
        after = _TOKEN_AT.match(data, at + 1).end()  # type: ignore[union-attr]
        if current and current_end == before:
            current.append((at + 1, after))
        else:
            if not reverse:
                reverse = data[::-1]
            first = len(data) - _TOKEN_AT.match(reverse, len(data) - before).end()  # type: ignore[union-attr]
            current = [(first, before), (at + 1, after)]
            runs.append(current)
        current_end = after
    return [run for run in runs if sum(e - s for s, e in run) >= _WRAPPED_MIN]


def wrapped_hits(data: bytes, runs: list[list[tuple[int, int]]], wanted: Wanted) -> list[Hit]:
    """A secret wrapped across line breaks: joined runs from the start of one to the end of a later one."""
    hits: list[Hit] = []
    for segments in runs:
        # The joined length from the start of run i to the end of run j is at[j + 1] - at[i]: one lookup per
        # start and length, whatever the number of runs.
        at = [0]
        for s, e in segments:
            at.append(at[-1] + e - s)
        index = {total: j for j, total in enumerate(at)}
        for i, (first, _) in enumerate(segments):
            for length in wanted.lengths:
                j = index.get(at[i] + length, 0) - 1  # the last run joined
                if j > i and wanted.matches(b"".join(data[s:e] for s, e in segments[i:j + 1])):
                    end = segments[j][1]
                    hits.append((first, 0, -end, SECRET_ORDER, first, "job-secret", True))
    return hits


def joined_runs(data: bytes, runs: list[list[tuple[int, int]]]) -> list[tuple[bytes, list[tuple[int, int]]]]:
    """Each wrapped run without its line breaks, with its pieces as (offset in the joined run, offset in
    ``data``): what the common formats are looked for in, so a token cut by a newline is one."""
    out = []
    for segments in runs:
        pieces, at = [], 0
        for s, e in segments:
            pieces.append((at, s))
            at += e - s
        out.append((b"".join(data[s:e] for s, e in segments), pieces))
    return out


def tail_pieces(text: bytes, wanted: Wanted) -> list[tuple[int, bytes]]:
    """Where a secret's first part may stand at the end of ``text`` (after trailing whitespace is dropped): from
    the start of each run of its last wrapped run to its end, joined; at most a secret's length."""
    i = len(text.rstrip())
    out, joined = [], b""
    while i > 0 and text[i - 1] in _TOKEN:
        j = i
        while j > 0 and text[j - 1] in _TOKEN:
            j -= 1
        joined = text[j:i] + joined
        if len(joined) >= wanted.longest:
            break
        out.append((j, joined))
        k = j - 1 if j > 0 and text[j - 1] == 0x0A else j
        k = k - 1 if k < j and k > 0 and text[k - 1] == 0x0D else k
        if k == j:
            break
        i = k
    return out


def head_pieces(text: bytes, wanted: Wanted) -> list[tuple[int, bytes]]:
    """Where a secret's last part may stand at the start of ``text`` (after leading whitespace): from its first
    wrapped run's start to the end of each of its runs, joined; (end offset, piece)."""
    i = len(text) - len(text.lstrip())
    out, joined, n = [], b"", len(text)
    while i < n and text[i] in _TOKEN:
        j = i
        while j < n and text[j] in _TOKEN:
            j += 1
        joined += text[i:j]
        if len(joined) >= wanted.longest:
            break
        out.append((j, joined))
        k = j + 1 if j < n and text[j] == 0x0D else j
        k = k + 1 if k < n and text[k] == 0x0A else j
        if k == j:
            break
        i = k
    return out


def split_match(tails: list[tuple[int, bytes]], heads: list[tuple[int, bytes]],
                wanted: Wanted) -> tuple[int, int] | None:
    """The (start in the first text, end in the second) of a secret split between a tail and a head piece."""
    for start, tail in tails:
        for end, head in heads:
            if len(tail) + len(head) in wanted.lengths and wanted.matches(tail + head):
                return start, end
    return None
