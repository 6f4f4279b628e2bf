"""Gate 12, `compaction-summary-empty` (docs/store-contract.md#empty-compaction-summaries).

When the runner's token or cost brake refuses the summarisation call pi makes during a compaction, pi
still records a `compaction` entry; its summary is then only pi's own boilerplate around an empty
answer. Resuming such a transcript would replay a placeholder instead of the conversation.

How pi composes a summary (compaction.ts, utils.ts `formatFileOperations`):

    summary = history                                         # whole turn
    summary = history + SPLIT_TURN_MARKER + turnPrefix        # cut inside a turn
    summary += "\\n\\n<read-files>\\n" + "\\n".join(readFiles) + "\\n</read-files>"        # if any
    summary += "\\n\\n<modified-files>\\n" + "\\n".join(modifiedFiles) + "\\n</modified-files>"  # if any

where `history` is the model's answer, or `No prior history.` when nothing precedes the split turn, or
the previous compaction's summary (file lists included) reused verbatim, and `details` records the
same `readFiles` / `modifiedFiles`. Stdlib only; never raises.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pidispatch.transcript._jsjson import JS_WHITESPACE, TOO_DEEP, loads

PLACEHOLDER = "No prior history."
SPLIT_TURN_MARKER = "\n\n---\n\n**Turn Context (split turn):**\n\n"
# The marker without its trailing blank line: the turn part may be empty, and a summary that was
# trimmed after the marker must still be recognised.
_MARKER_CORE = SPLIT_TURN_MARKER.rstrip("\n")
_TAGS = ("read-files", "modified-files")


_LISTS = tuple(zip(_TAGS, ("readFiles", "modifiedFiles"), strict=True))


def file_list_suffix(details: object) -> str | None:
    """pi's file-list suffix rebuilt byte-exactly from `details`, or None if `details` cannot say.

    None when `details` is not an object or a list is not a list of strings: pi never writes such
    details, so the entry was not written by pi's own compaction and its suffix cannot be rebuilt.
    A missing list is an empty one. (Written flat: it runs for every compaction entry a stage reads,
    and a helper call per list was most of the cost of judging one.)
    """
    if not isinstance(details, dict):
        return None
    suffix = ""
    for tag, key in _LISTS:
        names = details.get(key)
        if names is None:
            continue
        if not isinstance(names, list):
            return None
        if names:
            if not all(isinstance(name, str) for name in names):
                return None
            suffix += f"\n\n<{tag}>\n" + "\n".join(names) + f"\n</{tag}>"
    return suffix


def _strip_trailing_lists(text: str) -> str:
    """Remove trailing file-list blocks by shape, for entries whose `details` cannot rebuild them.

    The rightmost opening tag is taken, so at most the last block is cut: taking the leftmost one
    could cut across the split-turn marker and a real turn summary (upstream's first bug).
    """
    changed = True
    while changed:
        changed = False
        for tag in reversed(_TAGS):
            close = f"\n</{tag}>"
            if not text.endswith(close):
                continue
            start = text.rfind(f"\n\n<{tag}>\n", 0, len(text) - len(close))
            if start >= 0:
                text = text[:start]
                changed = True
    return text


def _is_blank(text: str) -> bool:
    return not text.strip(JS_WHITESPACE)


def compaction_summary_is_empty(entry: dict[str, Any]) -> bool:
    """True when this `compaction` entry's summary is empty once pi's boilerplate is removed.

    Rules (docs/store-contract.md#empty-compaction-summaries), in order:

    1. Remove the file-list suffix rebuilt from `details` when the summary ends with it. When
       `details` is missing or malformed (not pi's shape), or the summary does not end with the
       rebuilt suffix, trailing `<read-files>` / `<modified-files>` blocks are removed by shape
       instead. Choice: a summary made of nothing but file lists carries no conversation whoever
       wrote it, so such entries lean towards "empty" (a cold start) rather than replaying lists.
    2. If the split-turn marker is present, the text after its last occurrence is the turn part; an
       empty turn part makes the summary empty whatever precedes the marker (`No prior history.`, an
       empty history answer, or a reused previous summary with its own file lists).
    3. Otherwise remove the placeholder `No prior history.`; only whitespace left means empty.

    A real summary with the same file lists is not empty. Whitespace is JavaScript's (what pi's
    `trim()` removes). A missing or non-string summary counts as empty: there is nothing to replay.
    """
    if not isinstance(entry, dict):
        return False
    summary = entry.get("summary")
    if not isinstance(summary, str):
        return True
    suffix = file_list_suffix(entry.get("details"))
    if suffix is not None and summary.endswith(suffix):
        body = summary[: len(summary) - len(suffix)]
    else:
        body = _strip_trailing_lists(summary)
    marker = body.rfind(_MARKER_CORE)
    if marker >= 0:
        return _is_blank(body[marker + len(_MARKER_CORE) :])
    return _is_blank(body.replace(PLACEHOLDER, ""))


# Which lines can hold a `compaction` entry. pi keeps a line whose JSON.parse gives an object with
# `type` equal to "compaction", so the line's bytes must contain that value as a JSON string token:
# `"` + the ten letters + `"`, where each letter is either itself or a `\u` escape of it
# (JSON.parse decodes "\u0063ompaction" to "compaction"; no other escape yields a letter, and the
# letters are ASCII, so invalid UTF-8 around them cannot change them). Hence an exact pre-filter:
#
#   * no letter escaped  -> the line contains the literal `"compaction"`;
#   * any letter escaped -> it contains `\u00` + the third hex digit of that letter, which is 6 or 7
#     for every letter of "compaction" (0x61..0x74). `\u001b` (coloured tool output) cannot spell one.
#
# A line with neither can never parse to a compaction entry, whatever else it holds; the lines that
# have one are parsed. Both needles are at most 12 bytes long and hold no newline, so one split across
# two chunks lies within the last `_OVERLAP` bytes of the line so far and the first `_OVERLAP` bytes of
# the next chunk. Each needle is found by a C-level search over the whole chunk, never per line in
# Python: `_needles.find_type` (glibc memmem) and `_needles.find_escape` (memchr over the backslashes),
# both releasing the GIL, when the C module was built at install; else `bytes.find` and a compiled
# regular expression, about a third as fast (`pidispatch doctor` says which). Both pairs return the
# same offsets; tests and the fuzzer hold them to it.
_NEEDLE = b'"compaction"'
_ESCAPE_DIGITS = "".join(sorted({f"{ord(letter):04x}"[2] for letter in "compaction"}))
_ESCAPED_LETTER = re.compile(rb"\\u00[" + _ESCAPE_DIGITS.encode() + rb"]")
_OVERLAP = max(len(_NEEDLE), len(b"\\u00") + 1) - 1

Search = Callable[[bytes | bytearray, int, int], int]


def _find_type_python(data: bytes | bytearray, start: int, end: int) -> int:
    """Offset of the first `"compaction"` wholly inside ``data[start:end]``, or -1."""
    return data.find(_NEEDLE, start, end)


def _find_escape_python(data: bytes | bytearray, start: int, end: int) -> int:
    """Offset of the first escaped letter of "compaction" wholly inside ``data[start:end]``, or -1."""
    match = _ESCAPED_LETTER.search(data, start, end)
    return -1 if match is None else match.start()


_native: tuple[Search, Search] | None
# The C pre-judgment of a candidate line (``_needles.clears``): True when parsing it surely finds no
# empty summary, the usual case (a real summary, or the word in a tool's output). It reads the line's
# top-level `summary` without building it: cheaper than the parse it spares (docs/benchmarks.md), and a
# property test holds it to the full judgment. Without the C module every candidate line is parsed.
# ``_needles.first_unclear`` runs both searches and that pre-judgment over a run of whole lines in one
# call, up to the first line it cannot clear.
_clears: Callable[[bytes | bytearray, int, int], bool] | None
_first_unclear: Search | None
try:
    from pidispatch.transcript._needles import clears, find_escape, find_type, first_unclear

    _native, _clears, _first_unclear = (find_type, find_escape), clears, first_unclear
except ImportError:  # built without a C compiler: same answers, slower
    _native, _clears, _first_unclear = None, None, None

NATIVE_SEARCH = _native is not None
PYTHON_SEARCHES: tuple[Search, Search] = (_find_type_python, _find_escape_python)
_find_type, _find_escape = PYTHON_SEARCHES if _native is None else _native
_native_find_type = None if _native is None else _native[0]


def _may_hold_compaction(data: bytes | bytearray, start: int = 0, end: int | None = None) -> bool:
    stop = len(data) if end is None else end
    return _find_type(data, start, stop) >= 0 or _find_escape(data, start, stop) >= 0


def _line_has_empty_compaction(line: bytes) -> bool:
    """Whether a line in which a needle was found parses to a compaction entry with an empty summary."""
    if _clears is not None and _clears(line, 0, len(line)):
        return False
    return parsed_line_has_empty_compaction(line)


def parsed_line_has_empty_compaction(line: bytes) -> bool:
    """The full judgment of one line, always by parsing it (what ``_needles.clears`` must agree with)."""
    # pi reads the file as UTF-8 with replacement characters, so a stray invalid byte does not hide
    # an entry from pi; it must not hide it from this check either.
    ok, value = loads(line.decode("utf-8", errors="replace"))
    if value is TOO_DEEP:
        # pi (JavaScript) reads a line nested deeper than Python can parse; a possible compaction
        # entry that cannot be judged fails closed instead of slipping past the gate.
        return True
    if not ok or not isinstance(value, dict) or value.get("type") != "compaction":
        return False
    return compaction_summary_is_empty(value)


class EmptyCompactionScanner:
    """Incremental gate-12 check over a transcript's bytes, fed in chunks during the staged copy.

    Cheap by construction: each chunk is searched for the two needles above by C-level searches
    over the whole chunk (not line by line); only a line holding a needle is cut out, decoded and
    parsed. The line that runs past the end of a chunk is kept (its pieces are copied, so the caller
    may reuse its buffer) and is judged when its newline arrives, if a needle was seen in it, or in
    the overlap between its last bytes and the next chunk. Lines that do not parse are skipped, as pi
    skips them, except a candidate line nested too deeply for Python's parser (JavaScript's reads
    it): that one counts as an empty compaction (fail closed). A final line without a newline is
    judged in `finish()`, since pi parses it too.
    """

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # the line not yet ended by a newline, in pieces
        self._tail = b""  # its last `_OVERLAP` bytes, to catch a needle split across chunks
        self._candidate = False  # a needle was seen in the pending line
        self._found = False

    def feed(self, chunk: bytes | bytearray) -> None:
        """Scan `chunk`, continuing the line left open by the previous chunk.

        `chunk` may be a reused buffer: nothing here keeps a reference to it after returning.
        """
        if self._found or not chunk:
            return
        first = chunk.find(b"\n")
        if first >= 0 and not self._pending:
            # No line is open (the first chunk, or the previous one ended with a newline): the first
            # line is a whole line like the others, searched in the same pass.
            last = chunk.rfind(b"\n")
            self._scan_whole_lines(chunk, 0, last)
        else:
            head_end = len(chunk) if first < 0 else first  # the open line continues up to here
            if self._tail and not self._candidate:
                window = self._tail + chunk[: min(head_end, _OVERLAP)]
                self._candidate = _may_hold_compaction(window)
            if not self._candidate:
                self._candidate = _may_hold_compaction(chunk, 0, head_end)
            if first < 0:
                self._extend(bytes(chunk))
                return
            if self._candidate:
                self._check(b"".join([*self._pending, chunk[:first]]))
            self._pending, self._tail, self._candidate = [], b"", False
            if self._found:
                return
            last = chunk.rfind(b"\n")
            if last > first:
                self._scan_whole_lines(chunk, first + 1, last)
        if self._found or last + 1 == len(chunk):
            return
        self._candidate = _may_hold_compaction(chunk, last + 1)
        self._extend(bytes(chunk[last + 1 :]))

    def _scan_whole_lines(self, chunk: bytes | bytearray, start: int, end: int) -> None:
        """Judge the lines in ``chunk[start:end]``: each ends with a newline, none is open.

        Each needle's next position is kept and searched again only once the scan has passed it, so
        the whole chunk costs one pass per needle however many lines hold one (searching both again
        after every candidate line would re-read the rest of the chunk each time: quadratic on a
        chunk of many escaped lines).
        """
        if _first_unclear is not None and _find_type is _native_find_type:  # the C searches are in use
            start = _first_unclear(chunk, start, end)
            if start < 0:
                return  # every candidate line cleared in C, the usual case
        needle = _find_type(chunk, start, end)
        escape = _find_escape(chunk, start, end)
        while (needle >= 0 or escape >= 0) and not self._found:
            hit = needle if escape < 0 or 0 <= needle < escape else escape
            newline = chunk.rfind(b"\n", start, hit)
            line_start = start if newline < 0 else newline + 1
            line_end = chunk.find(b"\n", hit, end + 1)
            self._check(bytes(chunk[line_start:line_end]))
            start = line_end + 1
            if 0 <= needle < start:
                needle = _find_type(chunk, start, end)
            if 0 <= escape < start:
                escape = _find_escape(chunk, start, end)

    def _extend(self, piece: bytes) -> None:
        self._pending.append(piece)
        self._tail = (self._tail + piece[-_OVERLAP:])[-_OVERLAP:]

    def _check(self, line: bytes) -> None:
        if not self._found and _line_has_empty_compaction(line):
            self._found = True
            self._pending, self._tail = [], b""

    def finish(self) -> bool:
        """Judge the trailing partial line, if any; True when any compaction summary is empty."""
        if self._pending and self._candidate:
            self._check(b"".join(self._pending))
        self._pending, self._tail, self._candidate = [], b"", False
        return self._found


def transcript_has_empty_compaction(data: bytes) -> bool:
    """Gate 12 over a whole transcript held in memory."""
    scanner = EmptyCompactionScanner()
    scanner.feed(data)
    return scanner.finish()
