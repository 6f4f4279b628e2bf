"""The handoff beside a transcript: pi-rethread's letter and ledger, carried across jobs
(docs/architecture.md#rethreading).

Two files in the key directory, next to ``current.jsonl``:

``letter.md``  the letter to the next session (Where we are · Do first · Watch out · Don't redo · Trust),
               written by the last job that packed. Its first line names the job, who wrote it (the agent
               through its handoff tool, or the runner's summary call) and the transcript it belongs to
               (size and sha256). A letter *waits* only while that transcript is the stored one: a letter
               is never handed out beside another job's transcript.
``ledger.md``  the durable facts, one entry per pack, newest last (Goal · Done · Decisions · Files ·
               Commands · Open problems · Next steps, opening with one verified / assumed / still broken
               line). Capped at :data:`LEDGER_MAX_BYTES`: the oldest entries are folded into one summary
               entry that keeps each one's heading and its verified line, never dropped without a trace.

The agent supplies only field text (``handoff.json`` in its ``/session``, written by the runner); the
operator renders every heading and every line of metadata, and escapes the agent's text so it cannot
forge either: control characters and terminal escapes are removed, every line ending becomes ``\\n``, and
a line that Markdown would read as a heading, a setext underline, a rule, a code fence or a raw HTML
block is escaped. Both caps are on the rendered UTF-8 bytes: a letter or an entry over its cap is cut,
field by field, with a visible marker, and still handed out (a letter over the read cap would never be).
Both files are read and written as every file of the store is (``handoffdir.py``: the files on disk); this
module is their formats.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from pidispatch.record import SessionReason as R
from pidispatch.store.agenttext import clean, escape, fit

LETTER = "letter.md"
LEDGER = "ledger.md"
HANDOFF = "handoff.json"  # the runner's output in the Job's session directory (agent-reachable: validated)
LETTER_MAX_BYTES = 32 * 1024
LEDGER_MAX_BYTES = 64 * 1024
# The runner writes the validated handoff, UTF-8 unescaped: 15 fields of at most 4 000 characters and the cut
# note, at most 4 bytes each in JSON, fit. A larger file would be refused, and the job's handoff lost.
HANDOFF_MAX_BYTES = 256 * 1024
ENTRY_MAX_BYTES = LEDGER_MAX_BYTES // 2  # the newest entry stays whole: half the ledger, the rest for the fold
LETTER_READ_MAX_BYTES = 3 * LETTER_MAX_BYTES  # a letter an older operator wrote past its cap is cut, not lost
FIELD_MAX_CHARS = 4000
LETTER_CUT = f"[… cut: the letter passed its {LETTER_MAX_BYTES // 1024} KiB cap]"
ENTRY_CUT = f"[… cut: the entry passed its {ENTRY_MAX_BYTES // 1024} KiB cap]"
FOLDED_LINE_MAX_CHARS = 300
TRANSCRIPT_HASH_LIMIT = 256 * 1024 * 1024

# The gate refusals that end a conversation's lineage (it grew too long, too old, too large, or a new pi
# cannot be trusted to read it): a waiting letter carries the work across. Every other refusal (a link,
# an unparseable file, a changed venue, an expired key) keeps the cold start: the key itself is suspect.
LINEAGE_REASONS = frozenset({R.CONTEXT_TOO_FULL, R.RESUME_CHAIN_TOO_LONG, R.CONVERSATION_TOO_OLD, R.TOO_LARGE,
                             R.COMPACTION_SUMMARY_EMPTY, R.PI_VERSION_CHANGED})

STATUSES = ("landed", "partial", "blocked")
WRITERS = ("agent", "summary")
LETTER_FIELDS = (("whereWeAre", "Where we are"), ("doFirst", "Do first"), ("watchOut", "Watch out"),
                 ("dontRedo", "Don't redo"), ("trust", "Trust: verified vs assumed"))
TRUST_FIELDS = (("verified", "Verified"), ("assumed", "Assumed"), ("stillBroken", "Still broken"))
ENTRY_FIELDS = (("goal", "Goal"), ("done", "Done"), ("decisions", "Decisions"), ("files", "Files"),
                ("commands", "Commands"), ("openProblems", "Open problems"), ("nextSteps", "Next steps"))
NOT_STATED = "(not stated)"

_TOKEN = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,252}"
_LETTER_HEAD = re.compile(
    rf"<!-- pi-dispatch letter v1 job=(?P<job>{_TOKEN}) writer=(?P<writer>agent|summary) "
    r"transcript=(?P<sha>[0-9a-f]{64}) size=(?P<size>0|[1-9][0-9]{0,15}) "
    rf"session=(?P<session>{_TOKEN}|-) written=(?P<written>[0-9TZ:.-]{{1,40}}) -->")
_ENTRY_HEAD = re.compile(r"## (?:Entry (?P<n>[1-9][0-9]{0,8})|Folded: entries (?P<first>[0-9]+)[–-](?P<last>[0-9]+))"
                         r"(?P<rest>[^\n]*)")
_ENTRY_META = re.compile(rf"<!-- entry transcript=(?P<sha>[0-9a-f]{{64}}) job=(?P<job>{_TOKEN}) -->")
_LEDGER_TITLE = "# Ledger\n\nDurable facts of this conversation, one entry per handoff, newest last.\n"
SESSION_ID = re.compile(_TOKEN)


class HandoffError(ValueError):
    """A handoff the operator will not render (the wrong shape); the message says what was wrong."""


@dataclass(frozen=True)
class Handoff:
    """One validated handoff: the letter's fields, the entry's fields, who wrote it and how the work stands."""

    writer: str
    status: str
    letter: dict[str, str]
    entry: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """The object :func:`parse_handoff` reads back as this handoff (what the runner writes, once validated)."""
        return {"writer": self.writer, "status": self.status, "letter": dict(self.letter), "entry": dict(self.entry)}


@dataclass(frozen=True)
class Letter:
    """A letter's first line, parsed."""

    job: str
    writer: str
    sha256: str
    size: int
    session: str | None
    written: str


@dataclass(frozen=True)
class LedgerEntry:
    """One entry of the ledger as text, with what its heading and metadata say."""

    text: str
    first: int  # the entry's number (a folded entry: the first it holds)
    last: int
    folded: bool
    sha256: str | None = None
    job: str | None = None


# -- the shape ---------------------------------------------------------------------------------------------

def _field(data: Any, name: str) -> str:
    value = data.get(name) if isinstance(data, dict) else None
    if value is None:
        return NOT_STATED
    if not isinstance(value, str):
        raise HandoffError(f"{name} is not a string")
    value = clean(value).strip()
    if len(value) > FIELD_MAX_CHARS:
        value = value[:FIELD_MAX_CHARS].rstrip() + " … (cut at 4000 characters)"
    return value or NOT_STATED


def parse_handoff(data: Any) -> Handoff:
    """The runner's ``handoff.json`` object as a :class:`Handoff`; :class:`HandoffError` for any other shape.

    A missing field reads ``(not stated)`` (a summary may not find one); a field that is there must be text.
    """
    if not isinstance(data, dict):
        raise HandoffError("the handoff is not a JSON object")
    writer, status = data.get("writer"), data.get("status")
    if writer not in WRITERS:
        raise HandoffError(f"writer must be one of {', '.join(WRITERS)}")
    if status not in STATUSES:
        raise HandoffError(f"status must be one of {', '.join(STATUSES)}")
    letter, entry = data.get("letter"), data.get("entry")
    if not isinstance(letter, dict) or not isinstance(entry, dict):
        raise HandoffError("letter and entry must be JSON objects")
    return Handoff(str(writer), str(status), {name: _field(letter, name) for name, _ in LETTER_FIELDS},
                   {name: _field(entry, name) for name, _ in (*TRUST_FIELDS, *ENTRY_FIELDS)})


def _iso(clock_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock_s))


def render_letter(h: Handoff, *, job: str, sha256: str, size: int, session: str | None, now_s: float) -> str:
    """``letter.md``: the metadata line, then the five sections in pi-rethread's order.

    At most :data:`LETTER_MAX_BYTES` (the cap its reader holds it to): a longer letter is cut, never dropped.
    """
    sid = session if session and SESSION_ID.fullmatch(session) else "-"
    head = (f"<!-- pi-dispatch letter v1 job={job} writer={h.writer} transcript={sha256} size={size} "
            f"session={sid} written={_iso(now_s)} -->")
    by = "the agent" if h.writer == "agent" else "a summary of the transcript (the agent did not write it)"

    def text(fields: dict[str, str]) -> str:
        parts = [head, f"# Letter to the next session\n\nFrom job {job}, written by {by}. Status: {h.status}."]
        parts += [f"## {title}\n\n{escape(fields[name])}" for name, title in LETTER_FIELDS]
        return "\n\n".join(parts) + "\n"

    return text(fit(h.letter, text, LETTER_MAX_BYTES, LETTER_CUT))


def render_entry(h: Handoff, *, number: int, job: str, sha256: str, now_s: float) -> str:
    """One ledger entry: its heading, its metadata line, the trust line, then the seven sections.

    At most :data:`ENTRY_MAX_BYTES`, so the ledger's cap holds with its newest entry whole beside the fold.
    """
    def text(fields: dict[str, str]) -> str:
        trust = " · ".join(f"{title}: {escape(fields[name])}" for name, title in TRUST_FIELDS)
        parts = [f"## Entry {number} · {_iso(now_s)} · {h.status} · by {h.writer} · job {job}\n"
                 f"<!-- entry transcript={sha256} job={job} -->", trust]
        parts += [f"### {title}\n\n{escape(fields[name])}" for name, title in ENTRY_FIELDS]
        return "\n\n".join(parts) + "\n"

    return text(fit(h.entry, text, ENTRY_MAX_BYTES, ENTRY_CUT))


def parse_letter_head(text: str) -> Letter | None:
    """The letter's first line, or ``None`` when it is not one the operator wrote."""
    first = text.split("\n", 1)[0]
    m = _LETTER_HEAD.fullmatch(first)
    if m is None:
        return None
    session = m.group("session")
    return Letter(m.group("job"), m.group("writer"), m.group("sha"), int(m.group("size")),
                  None if session == "-" else session, m.group("written"))


def parse_ledger(text: str) -> list[LedgerEntry]:
    """The entries of ``ledger.md``, oldest first (the title and anything before the first entry are not one)."""
    entries: list[LedgerEntry] = []
    starts = [m for m in re.finditer(r"^## (?:Entry|Folded)", text, re.MULTILINE)]
    for i, start in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        chunk = text[start.start():end].rstrip("\n") + "\n"
        head = _ENTRY_HEAD.match(chunk)
        if head is None:
            continue
        meta = _ENTRY_META.search(chunk)
        if head.group("n") is not None:
            n = int(head.group("n"))
            entries.append(LedgerEntry(chunk, n, n, False, meta.group("sha") if meta else None,
                                       meta.group("job") if meta else None))
        else:
            entries.append(LedgerEntry(chunk, int(head.group("first")), int(head.group("last")), True))
    return entries


def render_ledger(entries: list[LedgerEntry]) -> str:
    return _LEDGER_TITLE + "".join("\n" + e.text for e in entries)


def _digest_lines(entry: LedgerEntry) -> list[str]:
    """What a folded entry keeps of ``entry``: its heading and trust line (a folded one: its own lines)."""
    if entry.folded:
        return [line for line in entry.text.split("\n")[1:] if line.startswith("- ")]
    lines = entry.text.split("\n")
    heading = lines[0].removeprefix("## ")
    trust = next((line for line in lines[1:] if line.startswith("Verified: ")), "")
    line = f"- {heading} — {trust}" if trust else f"- {heading}"
    return [line if len(line) <= FOLDED_LINE_MAX_CHARS else line[:FOLDED_LINE_MAX_CHARS - 1] + "…"]


def _folded(entries: list[LedgerEntry], budget: int) -> LedgerEntry:
    first, last = entries[0].first, entries[-1].last
    lines = [line for e in entries for line in _digest_lines(e)]
    head = (f"## Folded: entries {first}–{last}\n\nThe ledger outgrew {LEDGER_MAX_BYTES} bytes, so these "
            "entries were folded into their headings and trust lines, oldest first.\n")
    dropped = 0
    while lines and len((head + "\n" + "\n".join(lines) + "\n").encode()) > budget:
        lines.pop(0)
        dropped += 1
    note = f"- ({dropped} older entries are counted here only: the ledger had no room for their lines)\n" \
        if dropped else ""
    return LedgerEntry(head + "\n" + note + "\n".join(lines) + ("\n" if lines else ""), first, last, True)


def fold(entries: list[LedgerEntry], max_bytes: int = LEDGER_MAX_BYTES) -> list[LedgerEntry]:
    """Fold the oldest entries into one until the rendered ledger fits ``max_bytes``; the newest stays whole."""
    while len(render_ledger(entries).encode()) > max_bytes and len(entries) > 2:
        entries = [_folded(entries[:2], max_bytes // 2)] + entries[2:]
    if len(render_ledger(entries).encode()) > max_bytes and len(entries) == 2:
        room = max_bytes - len(render_ledger(entries[1:]).encode()) - 1
        entries = [_folded(entries[:1], max(room, 256))] + entries[1:]
    return entries


def append_entry(ledger_text: str | None, h: Handoff, *, job: str, sha256: str, now_s: float,
                 max_bytes: int = LEDGER_MAX_BYTES) -> str | None:
    """The ledger with ``h`` appended (folded to fit), or ``None`` when its newest entry already is this one.

    ``None`` makes a repeated promotion step (recovery after a kill) append nothing the second time.
    """
    entries = parse_ledger(ledger_text or "")
    if entries and entries[-1].sha256 == sha256 and entries[-1].job == job:
        return None
    number = (entries[-1].last if entries else 0) + 1
    entries.append(LedgerEntry(render_entry(h, number=number, job=job, sha256=sha256, now_s=now_s), number, number,
                               False, sha256, job))
    return render_ledger(fold(entries, max_bytes))


def entry_count(ledger_text: str | None) -> int:
    """How many entries the ledger has held (folded ones included)."""
    entries = parse_ledger(ledger_text or "")
    return entries[-1].last if entries else 0
