"""The handoff's files on disk: the letter and ledger in a key's directory, and what a Job's staging holds.

The formats are ``handoff.py``'s (parse, render, fold); this module reads and writes them where they live:
the key directory, through its no-follow descriptor, regular files only, size-capped, replaced by temp
and rename; the Job's staging directory, where a waiting letter and the ledger are staged for the job and
its ``handoff.json`` is read back; and the promotion's last step, which writes the job's handoff beside
the transcript it promoted.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass
from typing import Any

from pidispatch.store import fsio, scanmemo
from pidispatch.store.agenttext import utf8_prefix
from pidispatch.store.handoff import (
    HANDOFF,
    HANDOFF_MAX_BYTES,
    LEDGER,
    LEDGER_MAX_BYTES,
    LETTER,
    LETTER_CUT,
    LETTER_MAX_BYTES,
    LETTER_READ_MAX_BYTES,
    SESSION_ID,
    TRANSCRIPT_HASH_LIMIT,
    Handoff,
    Letter,
    append_entry,
    entry_count,
    parse_handoff,
    parse_letter_head,
    render_letter,
)


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
    return sid if isinstance(sid, str) and SESSION_ID.fullmatch(sid) else None


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
