"""Strict parser for pi's v3 session file, the entry tree, usage sums and torn-tail detection.

`parse_transcript` is the strict view (`pidispatch transcript check`): every line must be valid UTF-8
JSON of a known shape, and every problem is reported with its 1-based line number. The tolerant view
pi itself takes (skip what does not parse) is in `context.py`; the gates use `header.py` and
`compaction.py`, which read far less.

Decisions where the docs are silent:

- **Empty file (0 bytes) is valid-empty**: no header, no entries. pi treats it as "new session" and
  the store stages exactly such a file on a cold start, so it is not damage.
- **Repeated header lines are accepted**: pi writes the header twice when it starts from an empty
  file or a header-only file (docs/pi-behaviour.md#damaged-files, cases b and e) and ignores the copy on resume. A later
  `session` line must still be a well-formed header; it is recorded in `duplicate_header_lines`.
- **Torn tail**: a non-empty file that does not end in `\n` gets a problem on its last line (pi would
  glue its next append onto that line, cases d and d2). That line is still validated when it parses
  as JSON; when it does not, the torn-tail problem alone explains it.
- **Tree**: ids must be unique and every `parentId` must name an entry on an earlier line (pi only
  ever appends children of existing entries), which also rules out cycles. Other references
  (`firstKeptEntryId`, `targetId`, `fromId`) are not checked.
- **Blank lines** are problems: pi skips them but never writes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pidispatch.transcript._jsjson import TOO_DEEP, error_column, loads
from pidispatch.transcript.context import ContextUsage, context_usage
from pidispatch.transcript.model import (
    ENTRY_MODELS,
    AssistantMessage,
    Entry,
    MessageEntry,
    SessionHeader,
)
from pidispatch.transcript.strict import ModelError, validate

__all__ = [
    "ContextUsage",
    "Problem",
    "Transcript",
    "TranscriptError",
    "UsageTotals",
    "check_transcript",
    "context_usage",
    "parse_transcript",
    "torn_tail",
]

_MAX_MESSAGE = 300


class Problem(NamedTuple):
    """One thing wrong with a transcript: 1-based line number and what is wrong.

    Messages name fields and type tags, never field values: transcripts hold personal data and the
    problems are printed by `pidispatch transcript check`.
    """

    line: int
    message: str


class TranscriptError(Exception):
    """The transcript is not a valid pi v3 session file; `problems` lists every finding."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        first = self.problems[0] if self.problems else Problem(0, "invalid transcript")
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"line {first.line}: {first.message}{more}")


@dataclass(frozen=True)
class UsageTotals:
    """Sums of assistant `usage`: tokens by kind, `totalTokens`, and `cost.total`."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    assistant_messages: int = 0


@dataclass(frozen=True)
class Transcript:
    """A parsed transcript: the first header (None for an empty file) and the entries in file order."""

    header: SessionHeader | None
    entries: list[Entry]
    duplicate_header_lines: list[int] = field(default_factory=list)

    def active_path(self) -> list[Entry]:
        """Root-to-leaf entries of the branch pi resumes: the leaf is the last entry in the file.

        pi walks `parentId` from the last line. The walk stops at a missing parent (an orphaned
        chain, case d of docs/pi-behaviour.md#damaged-files) and at an entry already visited, so it ends even on a
        cyclic tree that a hand-built Transcript might contain.
        """
        if not self.entries:
            return []
        by_id = {entry.id: entry for entry in self.entries}
        path: list[Entry] = []
        seen: set[str] = set()
        current: Entry | None = self.entries[-1]
        while current is not None and current.id not in seen:
            seen.add(current.id)
            path.append(current)
            current = by_id.get(current.parentId) if current.parentId else None
        path.reverse()
        return path

    def usage_totals(self, *, active_only: bool = False) -> UsageTotals:
        """Sum assistant `usage` over every entry in the file (default) or over the active path.

        The default answers "what did this transcript cost": every billed model reply, including
        error replies, abandoned branches and turns a compaction has since summarised. With
        `active_only` it sums only the branch pi resumes. `usage` entries and the `usage` of
        compaction / branch-summary entries (side calls) are not included.
        """
        entries = self.active_path() if active_only else self.entries
        totals = [0, 0, 0, 0, 0]
        cost = 0.0
        count = 0
        for entry in entries:
            if isinstance(entry, MessageEntry) and isinstance(entry.message, AssistantMessage):
                usage = entry.message.usage
                for index, value in enumerate(
                    (usage.input, usage.output, usage.cacheRead, usage.cacheWrite, usage.totalTokens)
                ):
                    totals[index] += value
                cost += usage.cost.total
                count += 1
        return UsageTotals(
            input=totals[0],
            output=totals[1],
            cache_read=totals[2],
            cache_write=totals[3],
            total_tokens=totals[4],
            cost=cost,
            assistant_messages=count,
        )


def torn_tail(data: bytes) -> int | None:
    """Offset to truncate to when the last line is incomplete, else None.

    A file that does not end in `\\n` has a torn (or unterminated) last line; pi would append its
    next entry onto it and silently orphan history (docs/pi-behaviour.md#damaged-files, cases d and d2).
    The runner cuts back to just after the last newline (0 when there is none). An empty file and a file
    ending in `\\n` need nothing.
    """
    if not data or data.endswith(b"\n"):
        return None
    return data.rfind(b"\n") + 1


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def _field_path(path: tuple[int | str, ...]) -> str:
    """`message.usage.input` from an error's path; `entry` for the line's object itself.

    A field name that is not printable (a newline, a lone surrogate) is shown escaped and quoted, so
    that every problem stays one printable line.
    """
    parts = [_shorten(part if isinstance(part, str) and part.isprintable() else repr(part)) for part in path]
    return ".".join(parts) or "entry"


def _describe(error: ModelError) -> list[str]:
    return [_shorten(f"{_field_path(path)}: {message}") for path, message in error.errors]


def _json_problem(text: str) -> str:
    if loads(text)[1] is TOO_DEEP:
        return "nested too deeply to check (more than about 1000 levels)"
    column = error_column(text)
    where = f" (column {column})" if column is not None else ""
    if _GLUED.search(text):
        # pi's signature damage: an entry appended onto a torn or unterminated line
        # (docs/pi-behaviour.md#damaged-files).
        return f"not valid JSON{where}: an entry starts inside this line (appended onto a line with no newline)"
    return f"not valid JSON{where}"


# An entry object that begins where no JSON value may begin (after a value, not after `[ , :`): the
# start of a second entry glued onto the line. Inside strings the quotes would be escaped.
_GLUED = re.compile(r'(?<=[^\[,:\s])\{"type":"')


def _type_name(value: object) -> str:
    return _shorten(repr(value)) if isinstance(value, str) else type(value).__name__


class _Parse:
    """Accumulates problems and results over the lines of one file."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.header: SessionHeader | None = None
        self.duplicate_headers: list[int] = []
        self.entries: list[Entry] = []
        self.first_line_of_id: dict[str, int] = {}

    def add(self, line: int, message: str) -> None:
        self.problems.append(Problem(line, message))

    def line(self, number: int, raw: bytes, torn: bool) -> None:
        if not raw.strip(b" \t\r"):
            if not torn:
                self.add(number, "blank line")
            return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            self.add(number, f"not valid UTF-8 (byte {error.start + 1} of the line)")
            return
        ok, value = loads(text)
        if not ok:
            if not torn:
                self.add(number, _json_problem(text))
            return
        if not isinstance(value, dict):
            self.add(number, f"not a JSON object (a {type(value).__name__})")
            return
        if number == 1:
            self.first(value)
        elif value.get("type") == "session":
            self.duplicate_headers.append(number)
            self.validate_header(number, value)
        else:
            self.entry(number, value)

    def first(self, value: dict[str, Any]) -> None:
        if value.get("type") != "session":
            self.add(
                1,
                f'line 1 must be the session header (type "session"), found type {_type_name(value.get("type"))}',
            )
            self.entry(1, value)
            return
        self.header = self.validate_header(1, value)

    def validate_header(self, number: int, value: dict[str, Any]) -> SessionHeader | None:
        try:
            return validate(SessionHeader, value)
        except ModelError as error:
            for message in _describe(error):
                self.add(number, f"session header: {message}")
            return None

    def entry(self, number: int, value: dict[str, Any]) -> None:
        kind = value.get("type")
        model = ENTRY_MODELS.get(kind) if isinstance(kind, str) else None
        if model is None:
            what = "missing" if "type" not in value else f"unknown ({_type_name(kind)})"
            self.add(number, f"entry type {what}")
            return
        try:
            entry: Entry = validate(model, value)  # type: ignore[assignment]
        except ModelError as error:
            for message in _describe(error):
                self.add(number, f"{kind} entry: {message}")
            return
        earlier = self.first_line_of_id.get(entry.id)
        if earlier is not None:
            self.add(number, f"duplicate entry id (first used on line {earlier})")
            return
        if entry.parentId is not None and entry.parentId not in self.first_line_of_id:
            self.add(number, "parentId does not name an entry on an earlier line")
        self.first_line_of_id[entry.id] = number
        self.entries.append(entry)


def _run(data: bytes) -> _Parse:
    parse = _Parse()
    if not data:
        return parse
    lines = data.split(b"\n")
    torn = lines[-1] != b""
    if not torn:
        lines.pop()
    last = len(lines)
    for number, raw in enumerate(lines, start=1):
        parse.line(number, raw, torn=torn and number == last)
    if torn:
        parse.add(last, "torn tail: the last line does not end with a newline")
    parse.problems.sort(key=lambda problem: problem.line)
    return parse


def parse_transcript(data: bytes) -> Transcript:
    """Parse a whole transcript strictly; raise `TranscriptError` listing every problem.

    Why strict: this is the checker behind `pidispatch transcript check` and the tests' oracle for
    "pi wrote a clean file"; the tolerant reading pi itself does lives in `context_usage`.
    """
    parse = _run(bytes(data))
    if parse.problems:
        raise TranscriptError(parse.problems)
    return Transcript(parse.header, parse.entries, parse.duplicate_headers)


def check_transcript(data: bytes) -> list[Problem]:
    """Every problem `parse_transcript` would raise, as a list (empty when the file is valid)."""
    return _run(bytes(data)).problems
