"""The handoff beside a transcript: pi-rethread's letter and ledger, carried across jobs (ARCHITECTURE §5b).

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
Both files are read and written as every file of the store is: through the key directory's no-follow
descriptor, regular files only, size-capped, replaced by temp and rename.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import time
from dataclasses import dataclass
from typing import Any

from pidispatch.record import SessionReason as R
from pidispatch.store import fsio, scanmemo
from pidispatch.store.agenttext import clean, escape, fit, utf8_prefix

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
_SESSION_ID = re.compile(_TOKEN)


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
    sid = session if session and _SESSION_ID.fullmatch(session) else "-"
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


# -- files -------------------------------------------------------------------------------------------------

def read_text(name: str, dir_fd: int, limit: int) -> str | None:
    """A regular file of at most ``limit`` bytes in ``dir_fd``, never through a link; ``None`` otherwise."""
    try:
        fd = os.open(name, fsio.READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > limit:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def write_text(name: str, dir_fd: int, text: str) -> None:
    """Replace ``name`` in ``dir_fd`` by temp and rename (a link planted at the name is replaced, not followed)."""
    temp = f".{name}.incoming"
    fsio.clear_name(temp, dir_fd)
    fd = os.open(temp, fsio.CREATE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        fsio.write_all(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def remove(name: str, dir_fd: int) -> bool:
    """Remove ``name`` (whatever it is); True when something was there."""
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    fsio.clear_name(name, dir_fd)
    return True


def transcript_digest(dir_fd: int, name: str, expected_size: int) -> str | None:
    """The sha256 of ``name`` when it is a regular file of ``expected_size`` bytes (checked before reading).

    Remembered per version of the file (store/scanmemo.py), so the ``Resumable`` refresh asking every few
    minutes whether a letter still waits hashes each transcript once, not once per refresh. A digest is
    remembered only when the read covered the judged size and nothing wrote to the file meanwhile.
    """
    try:
        fd = os.open(name, fsio.READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != expected_size or st.st_size > TRANSCRIPT_HASH_LIMIT:
            return None
        version = scanmemo.version_of(st)
        known = scanmemo.MEMO.digest(version)
        if known is not None:
            return known.hex()
        digest, read = hashlib.sha256(), 0
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
            read += len(chunk)
        if read == st.st_size and scanmemo.version_of(os.fstat(fd)) == version:
            scanmemo.MEMO.put_digest(version, digest.digest())
        return digest.hexdigest()
    finally:
        os.close(fd)


def waiting_letter(dir_fd: int, transcript: str = "current.jsonl") -> tuple[Letter, str] | None:
    """The letter and its text when one waits: written by the operator, for the transcript stored now.

    A letter past :data:`LETTER_MAX_BYTES` (an older operator measured characters, not bytes) is handed
    out cut at its last whole line within the cap, with the visible marker, rather than never.
    """
    text = read_text(LETTER, dir_fd, LETTER_READ_MAX_BYTES)
    letter = parse_letter_head(text) if text is not None else None
    if letter is None or text is None:
        return None
    if transcript_digest(dir_fd, transcript, letter.size) != letter.sha256:
        return None  # a letter left beside another transcript (a promotion cut short): never handed out
    if len(text.encode()) > LETTER_MAX_BYTES:
        kept = utf8_prefix(text, LETTER_MAX_BYTES - len(LETTER_CUT.encode()) - 2)
        text = kept[:kept.rfind("\n") + 1] + "\n" + LETTER_CUT + "\n"  # whole lines: a cut makes no new one
    return letter, text


@dataclass(frozen=True)
class Staged:
    """What ``stage_handoff`` put in a Job's session directory for the unpack."""

    letter: Letter
    entries: int


def stage_handoff(key_dir: str, stage_dir: str) -> Staged | None:
    """Copy a waiting letter and the ledger into ``stage_dir`` (as ``letter.md``, ``ledger.md``), or ``None``.

    Called only after the gates refused for a lineage reason; the copies are what the runner unpacks.
    """
    try:
        dir_fd = os.open(key_dir, fsio.DIR_FLAGS)
    except OSError:
        return None
    try:
        waiting = waiting_letter(dir_fd)
        if waiting is None:
            return None
        letter, text = waiting
        ledger = read_text(LEDGER, dir_fd, LEDGER_MAX_BYTES * 2) or ""
    finally:
        os.close(dir_fd)
    stage_fd = os.open(stage_dir, fsio.DIR_FLAGS)
    try:
        for name, content in ((LETTER, text), (LEDGER, ledger)):
            fsio.clear_name(name, stage_fd)
            fd = os.open(name, fsio.CREATE_FLAGS, 0o600, dir_fd=stage_fd)
            try:
                fsio.write_all(fd, content.encode("utf-8"))
            finally:
                os.close(fd)
    finally:
        os.close(stage_fd)
    return Staged(letter, entry_count(ledger))


def clear_staged(stage_dir: str) -> None:
    """Remove what an earlier stage of the same Job left (a re-stage after a restart)."""
    try:
        stage_fd = os.open(stage_dir, fsio.DIR_FLAGS)
    except OSError:
        return
    try:
        for name in (LETTER, LEDGER, HANDOFF):
            fsio.clear_name(name, stage_fd)
    finally:
        os.close(stage_fd)


def read_staged_handoff(stage_dir: str) -> Handoff | None:
    """The runner's ``handoff.json`` from the Job's session directory, validated; ``None`` when absent or wrong."""
    try:
        stage_fd = os.open(stage_dir, fsio.DIR_FLAGS)
    except OSError:
        return None
    try:
        text = read_text(HANDOFF, stage_fd, HANDOFF_MAX_BYTES)
    finally:
        os.close(stage_fd)
    if text is None:
        return None
    try:
        return parse_handoff(json.loads(text))
    except (ValueError, RecursionError):
        return None


def session_id(stage_dir: str, transcript: str = "current.jsonl") -> str | None:
    """The ``id`` in the staged transcript's header line (what the next session's ``parentSession`` names)."""
    try:
        fd = os.open(os.path.join(stage_dir, transcript), fsio.READ_FLAGS)
    except OSError:
        return None
    try:
        first = os.pread(fd, 4096, 0).split(b"\n", 1)[0]
    finally:
        os.close(fd)
    try:
        header = json.loads(first)
    except ValueError:
        return None
    sid = header.get("id") if isinstance(header, dict) else None
    return sid if isinstance(sid, str) and _SESSION_ID.fullmatch(sid) else None


@dataclass(frozen=True)
class Written:
    """What promotion did with the handoff: the writer of a new letter (``None``: none), entries, a letter removed."""

    writer: str | None
    status: str | None
    entries: int
    removed_letter: bool = False


def finish_handoff(dir_fd: int, stage_dir: str, *, job: str, sha256: str, size: int,
                   now_s: float | None = None) -> Written:
    """The promotion step after the transcript's swap, under the key's lock: this Job's handoff, or none.

    With a handoff: the ledger gets its entry (once, even when run again after a kill), then the letter
    is replaced. Without one: a letter left by an earlier job is removed, since it belongs to the
    transcript this one replaced. Either way, what remains beside the transcript is this Job's.
    """
    now_s = time.time() if now_s is None else now_s
    h = read_staged_handoff(stage_dir)
    ledger = read_text(LEDGER, dir_fd, LEDGER_MAX_BYTES * 2)
    if h is None:
        return Written(None, None, entry_count(ledger), removed_letter=remove(LETTER, dir_fd))
    updated = append_entry(ledger, h, job=job, sha256=sha256, now_s=now_s)
    if updated is not None:
        write_text(LEDGER, dir_fd, updated)
        ledger = updated
    write_text(LETTER, dir_fd, render_letter(h, job=job, sha256=sha256, size=size, session=session_id(stage_dir),
                                             now_s=now_s))
    return Written(h.writer, h.status, entry_count(ledger))


def describe(key_dir: str) -> dict[str, Any]:
    """For ``store inspect`` and the SessionKey: the ledger's entry count and whether a letter waits."""
    try:
        dir_fd = os.open(key_dir, fsio.DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return {"entries": 0, "letter": None}
        raise
    try:
        waiting = waiting_letter(dir_fd)
        ledger = read_text(LEDGER, dir_fd, LEDGER_MAX_BYTES * 2)
    finally:
        os.close(dir_fd)
    letter = None if waiting is None else {"job": waiting[0].job, "writer": waiting[0].writer,
                                           "written": waiting[0].written}
    return {"entries": entry_count(ledger), "letter": letter}
