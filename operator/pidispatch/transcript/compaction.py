"""Gate 12, `compaction-summary-empty` (session-store-spec §3.5).

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

from typing import Any

from pidispatch.transcript._jsjson import JS_WHITESPACE, TOO_DEEP, loads

PLACEHOLDER = "No prior history."
SPLIT_TURN_MARKER = "\n\n---\n\n**Turn Context (split turn):**\n\n"
# The marker without its trailing blank line: the turn part may be empty, and a summary that was
# trimmed after the marker must still be recognised.
_MARKER_CORE = SPLIT_TURN_MARKER.rstrip("\n")
_TAGS = ("read-files", "modified-files")


def _file_list(details: dict[str, Any], key: str) -> list[str] | None:
    """The list under `key` if it is usable to rebuild pi's suffix: missing means empty."""
    value = details.get(key)
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(name, str) for name in value):
        return value
    return None


def file_list_suffix(details: object) -> str | None:
    """pi's file-list suffix rebuilt byte-exactly from `details`, or None if `details` cannot say.

    None when `details` is not an object or a list is not a list of strings: pi never writes such
    details, so the entry was not written by pi's own compaction and its suffix cannot be rebuilt.
    """
    if not isinstance(details, dict):
        return None
    suffix = ""
    for tag, key in zip(_TAGS, ("readFiles", "modifiedFiles"), strict=True):
        names = _file_list(details, key)
        if names is None:
            return None
        if names:
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

    Rules (spec §3.5), in order:

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


# A line can only hold a `compaction` entry if its bytes contain "compaction" literally, or if the
# type is spelled with \u escapes (JSON.parse decodes "\u0063ompaction" to "compaction"; an agent
# that can write the file could use that to slip past a literal-only filter).
_NEEDLE = b'"compaction"'
_ESCAPE = b"\\u"


def _line_has_empty_compaction(line: bytes) -> bool:
    if _NEEDLE not in line and _ESCAPE not in line:
        return False
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

    Cheap by construction: a chunk is searched with `bytes.find` and only lines that could hold a
    `compaction` entry are decoded and parsed; partial lines are carried across chunks (joined once,
    when their newline arrives). Lines that do not parse are skipped, as pi skips them, except a
    candidate line nested too deeply for Python's parser (JavaScript's reads it): that one counts as
    an empty compaction (fail closed). A final line without a newline is judged in `finish()`, since
    pi parses it too.
    """

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        self._found = False

    def feed(self, chunk: bytes) -> None:
        """Scan the complete lines in `chunk` (plus any partial line carried from earlier chunks)."""
        if self._found or not chunk:
            return
        chunk = bytes(chunk)
        first = chunk.find(b"\n")
        if first < 0:
            self._pending.append(chunk)
            return
        self._check(b"".join([*self._pending, chunk[:first]]))
        self._pending = []
        if self._found:
            return
        last = chunk.rfind(b"\n")
        if last > first:
            middle = chunk[first + 1 : last]
            if _NEEDLE in middle or _ESCAPE in middle:
                for line in middle.split(b"\n"):
                    self._check(line)
                    if self._found:
                        return
        if last + 1 < len(chunk):
            self._pending.append(chunk[last + 1 :])

    def _check(self, line: bytes) -> None:
        if not self._found and _line_has_empty_compaction(line):
            self._found = True
            self._pending = []

    def finish(self) -> bool:
        """Judge the trailing partial line, if any; True when any compaction summary is empty."""
        if self._pending:
            self._check(b"".join(self._pending))
            self._pending = []
        return self._found


def transcript_has_empty_compaction(data: bytes) -> bool:
    """Gate 12 over a whole transcript held in memory."""
    scanner = EmptyCompactionScanner()
    scanner.feed(data)
    return scanner.finish()
