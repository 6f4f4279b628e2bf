"""Find and redact credentials in what the store is about to keep (issue 31 item 5), pure and over bytes.

Two kinds of hit:

* **common formats**: GitHub tokens of every prefix, AWS access key ids, Google API keys, OpenAI and
  Anthropic keys, Slack tokens, private-key PEM blocks, and the value of an ``Authorization:`` header;
* **the job's own secrets**: its forge token and model keys. The operator never reads those values (it
  may not read the job's Secrets); it knows each one only as a :class:`SecretDigest` (``contract/digests.py``:
  the length and a SHA-256 the runner reported, or the operator computed for the App token it minted), and
  looks for them by hashing each run of token characters of one of those lengths.

The scan is one pass per format, each a compiled pattern that begins with a literal (``re`` skips through
such a pattern at memchr speed; one alternation of them all was 20x slower, ``bench/redact.py``), plus one
pass over runs of token characters when the job has secrets; only a run of a secret's exact length is
hashed. Each hit is replaced by ``[REDACTED:<kind>]``, which holds no character JSON escapes, so a
transcript line that was valid JSON stays valid JSON with the same structure: no pattern matches a quote
or a backslash that is not part of an escape, so a hit never leaves the string it sits in (an
``Authorization`` header written as a JSON key keeps its key; only the value is replaced).

Here are the formats and the settling of hits (:func:`format_hits`, :class:`Wanted`,
:func:`apply`); a transcript is read through its decoded view (``store/transcriptscan.py``) and decoded text
is scanned with every form of a secret (``store/decoded.py``). :func:`redact` is the scan of bytes as they
stand, JSON escapes understood only as neighbours: a token right after an escape (``\\n``, ``\\u0020``) is
not glued to the escape's letter.
"""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from pidispatch.contract.digests import DIGEST_DOMAIN, SECRET_MAX_LENGTH, SECRET_MIN_LENGTH, SecretDigest

KINDS = ("github-token", "aws-access-key-id", "google-api-key", "anthropic-key", "openai-key", "slack-token",
         "private-key", "authorization-header", "job-secret")


@dataclass
class Redacted:
    """The scan's result: the bytes with every hit replaced, and how many hits of each kind."""

    data: bytes
    kinds: Counter[str] = field(default_factory=Counter)

    @property
    def hits(self) -> int:
        return sum(self.kinds.values())


_TOKEN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_END = rb"(?![A-Za-z0-9_-])"

# Each format begins with a literal, so the engine skips ahead quickly; the start boundary is checked in
# Python on the few matches (a lookbehind here would be tried at every byte and cost ten times as much).
_FORMATS: tuple[tuple[str, bytes], ...] = (
    ("github-token", rb"gh[pousr]_[A-Za-z0-9]{36,251}" + _END + rb"|github_pat_[A-Za-z0-9_]{22,244}" + _END),
    ("aws-access-key-id", rb"(?:AKIA|ASIA)[A-Z0-9]{16}" + _END),
    ("google-api-key", rb"AIza[0-9A-Za-z_-]{35}" + _END),
    ("anthropic-key", rb"sk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai-key", rb"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("slack-token", rb"xox[abposre]-[A-Za-z0-9-]{10,}"),
    # Raw newlines in a file, the two characters ``\n`` inside a JSON string; a block cut short (no END
    # line) is redacted to the end of its base64. A raw newline counts only when the block goes on after
    # it, so a torn transcript line is never joined to the next one.
    ("private-key", rb"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
                    rb"(?:[A-Za-z0-9+/=:,. \t]|\r?\n(?=[A-Za-z0-9+/=-])|\\[nrt/]|-(?!----)){0,65536}"
                    rb"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?"),
    # Only the value is redacted: the header's name stays, so a reader sees what was there.
    ("authorization-header", rb"(?i:authorization(?:\\?[\"'])?\s{0,8}[:=]\s{0,8}(?:\\?[\"'])?(?:bearer|token|basic))"
                             rb"(?:\s|\\[nrt]){1,8}(?P<auth>[A-Za-z0-9._~+/=-]{8,4096})"),
)
_SECRET_KINDS = {"openai-key", "anthropic-key"}
_NEEDS_START = {"aws-access-key-id", "google-api-key", "anthropic-key", "openai-key", "slack-token"}
# One compiled pattern per format, each searched on its own: a pattern that begins with a literal is skipped
# through at memchr speed, while one alternation of them all is tried at every byte (measured: 20x slower).
_COMPILED = tuple((kind, re.compile(body)) for kind, body in _FORMATS)
# A run of token characters (a candidate for one of the job's secrets, judged by its length, then digest).
_RUN = re.compile(rb"[A-Za-z0-9_-]{%d,}" % SECRET_MIN_LENGTH)


def _clean_start(data: bytes, start: int) -> bool:
    """Nothing glued before ``start``: no token character, or one that ends a JSON escape (``\\n``, ``\\u0041``)."""
    if start == 0 or data[start - 1] not in _TOKEN_BYTES:
        return True
    return _escape_length(data, start) > 0


def _escape_length(data: bytes, start: int) -> int:
    """How many token characters before ``start`` belong to a JSON escape (1 for ``\\n``, 5 for ``\\uXXXX``)."""
    if start >= 2 and data[start - 2] == 0x5C and data[start - 1] in b"nrtbf":
        return 1
    if start >= 6 and data[start - 6] == 0x5C and data[start - 5] == 0x75 and all(c in _HEX for c in
                                                                                   data[start - 4:start]):
        return 5
    return 0


def _cuts(data: bytes, start: int, run: bytes) -> tuple[int, ...]:
    """Where a secret may begin in a run: at its start, or after the letters of a JSON escape it begins with."""
    if start == 0 or data[start - 1] != 0x5C:
        return (0,)
    if run[:1] in (b"n", b"r", b"t", b"b", b"f"):
        return (0, 1)
    if run[:1] == b"u" and len(run) > 5 and all(c in _HEX for c in run[1:5]):
        return (0, 5)
    return (0,)


def _plausible_key(value: bytes) -> bool:
    """An ``sk-`` match is a key only when its body mixes letters and digits (``sk-learn-...`` slugs do not)."""
    return (any(48 <= c <= 57 for c in value) and any(65 <= c <= 90 for c in value)
            and any(97 <= c <= 122 for c in value))


def marker(kind: str) -> bytes:
    """What replaces a hit: no quote, backslash or control character, so JSON needs no escaping for it."""
    return b"[REDACTED:" + kind.encode() + b"]"


class Wanted:
    """The job's secrets as the scan looks for them: lengths and digests, never a value."""

    def __init__(self, secrets: Iterable[SecretDigest]) -> None:
        self.digests = {(s.length, s.sha256) for s in secrets if SECRET_MIN_LENGTH <= s.length <= SECRET_MAX_LENGTH}
        self.lengths = frozenset(n for n, _ in self.digests)
        self.longest = max(self.lengths, default=0)
        self.shortest = min(self.lengths, default=0)

    def __bool__(self) -> bool:
        return bool(self.digests)

    def matches(self, value: bytes) -> bool:
        """Whether ``value`` is one of the secrets: its length first, then its digest."""
        n = len(value)
        return n in self.lengths and (n, hashlib.sha256(DIGEST_DOMAIN + value).hexdigest()) in self.digests


# A hit before overlaps are settled: (rank, variant, -end, order, start, kind, counted). ``rank`` is where the
# match began (an ``Authorization`` header's name), ``start`` where the replaced span begins (its value); a hit
# found in a decoded variant of the text (``variant`` 1) yields to one found in the text itself at the same
# rank; ``counted`` is false for the second half of a secret split in two (one secret, one count).
Hit = tuple[int, int, int, int, int, str, bool]
SECRET_ORDER = len(_COMPILED)


def format_hits(data: bytes, variant: int = 0) -> list[Hit]:
    """Every credential of a common format in ``data``, unsettled."""
    hits: list[Hit] = []
    for order, (kind, pattern) in enumerate(_COMPILED):
        for m in pattern.finditer(data):
            if kind in _NEEDS_START and not _clean_start(data, m.start()):
                continue
            if kind in _SECRET_KINDS and not _plausible_key(m.group(0)):
                continue
            start = m.start("auth") if kind == "authorization-header" else m.start()
            hits.append((m.start(), variant, -m.end(), order, start, kind, True))
    return hits


def trimmed(data: bytes, hit: Hit, ends: list[int]) -> Hit:
    """``hit`` cut back to the first of ``ends`` (sorted) at which its format still matches whole: in a variant
    that joins lines, a greedy format (``ghs_`` takes up to 251) never swallows the start of the next line."""
    rank, var, neg_end, order, start, kind, counted = hit
    if order >= len(_COMPILED):
        return hit
    pattern = _COMPILED[order][1]
    for end in ends[bisect_right(ends, rank):bisect_right(ends, -neg_end - 1)]:
        if pattern.fullmatch(data, rank, end):
            return (rank, var, -end, order, start, kind, counted)
    return hit


def apply(data: bytes, hits: list[Hit]) -> Redacted:
    """``data`` with each settled hit replaced by :func:`marker`: sorted by rank, a hit that begins inside one
    already replaced is dropped (it overlaps; the first, and at one rank the longest, wins)."""
    if not hits:
        return Redacted(data)
    hits.sort()
    kinds: Counter[str] = Counter()
    pieces, at = [], 0
    for rank, _, neg_end, _, start, kind, counted in hits:
        if rank < at:
            continue  # inside a hit already redacted
        pieces += [data[at:start], marker(kind)]
        at = -neg_end
        if counted:
            kinds[kind] += 1
    pieces.append(data[at:])
    return Redacted(b"".join(pieces), kinds)


def redact(data: bytes, secrets: Iterable[SecretDigest] = ()) -> Redacted:
    """``data`` as it stands (no JSON decoding) with every credential replaced by :func:`marker`, and the
    count of each kind: the scan of a transcript line that is not JSON (``store/transcriptscan.py`` decodes
    the others first).

    Idempotent: the result holds no hit, so scanning it again changes nothing. Hits that overlap (a token
    inside an ``Authorization:`` header) count once, as the one that starts first.
    """
    wanted = Wanted(secrets)
    hits = format_hits(data)
    if wanted:
        for m in _RUN.finditer(data):
            run = m.group(0)
            if len(run) > wanted.longest + 5:
                continue
            for cut in _cuts(data, m.start(), run):
                if wanted.matches(run[cut:]):
                    hits.append((m.start() + cut, 0, -m.end(), SECRET_ORDER, m.start() + cut, "job-secret", True))
                    break
    return apply(data, hits)
