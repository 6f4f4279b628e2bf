"""Never hand pi a session file it would damage (docs/pi-behaviour.md#damaged-files,
docs/store-contract.md#runner-side).

pi is silent about the files it mangles: it truncates a file whose first line is not a header, glues
its next entry onto an unterminated last line (orphaning all earlier history on the resume after),
and exits 1 when the header's `cwd` does not exist in this Pod. So before pi starts, the runner makes
the file either empty or a valid v3 session ending in `\\n` whose header `cwd` is the workspace:

- `normalise` decides, over bytes (pure): keep, repair (cut a torn tail, terminate a complete last
  line, pin the header `cwd`), or quarantine (the file is not a session pi can resume);
- `open_session` does it on the real file, never following a link the agent may have planted, and
  answers how pi must be started (`--session FILE` or `--no-session`) and what the report says.

Decisions where the store contract is silent:

- **An unterminated last line that is a complete entry** is terminated (`\\n` appended) rather than
  cut: JSON cannot be cut inside an object and still parse as one, so such a line is whole (pi's
  case d2), and cutting it would throw away the last reply. A line that does not parse is torn and
  cut back to the last newline (case d3).
- **A 0-byte file is left as it is** (not removed): pi starts a new session in it (case b; its
  duplicate header line is tolerated by pi and by our parsers) and the mount's contract, "the file
  exists", still holds for the operator if pi dies before writing anything.
- **Unparseable** means the strict parser (`parse_transcript`) rejects the file after the tail repair
  — not only pi's own header test. Anything the strict parser rejects is a file pi did not write in
  one piece, and resuming it risks the silent history loss above.
- **A failed repair write** is handled like a failed quarantine: pi runs in memory and the report
  says `unparseable` (the staged file could not be made safe to hand over).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pidispatch.events import emit
from pidispatch.record import SessionReason
from pidispatch.store import fsio
from pidispatch.transcript.model import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomMessageEntry,
    MessageEntry,
)
from pidispatch.transcript.parser import Transcript, TranscriptError, parse_transcript, torn_tail

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
QUARANTINE_INFIX = ".invalid-"
# The staged copy is bounded by the store (PI_SESSION_MAX_BYTES, default 8 MiB); the final file is
# written by the agent, which could grow it without bound. Beyond this the runner does not measure.
READ_LIMIT = 64 * 1024 * 1024

EVENT_DEGRADED = "session_resume_degraded"
EVENT_NORMALISED = "session_normalised"


class Repair(StrEnum):
    """What `normalise` changed, in the order it is applied."""

    CUT_TORN_TAIL = "cut-torn-tail"
    TERMINATED_LAST_LINE = "terminated-last-line"
    PINNED_CWD = "pinned-cwd"


class Degraded(StrEnum):
    """`session_resume_degraded` reasons (docs/store-contract.md#log-events)."""

    UNPARSEABLE = "unparseable"
    QUARANTINE_FAILED = "quarantine-failed"


@dataclass(frozen=True)
class Normalised:
    """The verdict on one file's bytes.

    `data` is what to hand to pi (`None`: quarantine, `problem` says why); `repairs` lists what
    changed; `messages` counts the context messages pi would rebuild (resumed ⇔ ≥ 1); `entry_ids`
    are the ids already in the file, so the report can sum only what this run adds.
    """

    data: bytes | None
    repairs: tuple[Repair, ...] = ()
    problem: str | None = None
    messages: int = 0
    entry_ids: frozenset[str] = frozenset()


def context_message_count(transcript: Transcript) -> int:
    """Entries on the branch pi resumes that become context messages; non-zero exactly when pi's
    rebuilt context holds at least one message (the `resumed` criterion of docs/store-contract.md#runner-side).

    A `message`, a `custom_message`, a `branch_summary` with a summary, and a `compaction` (its
    summary is always the first message of a compacted context, so the count may exceed what a
    compaction keeps, but never hides an empty context).
    """
    count = 0
    for entry in transcript.active_path():
        if isinstance(entry, (MessageEntry, CustomMessageEntry, CompactionEntry)):
            count += 1
        elif isinstance(entry, BranchSummaryEntry) and entry.summary:
            count += 1
    return count


def _strict(data: bytes) -> Transcript | None:
    try:
        return parse_transcript(data)
    except TranscriptError:
        return None


def _repair_tail(data: bytes) -> tuple[bytes, tuple[Repair, ...]]:
    cut = torn_tail(data)
    if cut is None:
        return data, ()
    terminated = data + b"\n"
    if _strict(terminated) is not None:
        return terminated, (Repair.TERMINATED_LAST_LINE,)
    return data[:cut], (Repair.CUT_TORN_TAIL,)


def pin_cwd(first_line: bytes, workspace: str) -> bytes | None:
    """Line 1 with its `cwd` set to `workspace`, or `None` when it already is (keys keep their order)."""
    header = json.loads(first_line)
    if header.get("cwd") == workspace:
        return None
    header["cwd"] = workspace
    # JSON.stringify's form: compact, non-ASCII kept as is.
    return json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def normalise(data: bytes, workspace: str) -> Normalised:
    """Decide what pi may be handed for these bytes (pure; the module docstring has the rules)."""
    if not data:
        return Normalised(b"")
    data, repairs = _repair_tail(bytes(data))
    if not data:
        return Normalised(b"", repairs)
    try:
        transcript = parse_transcript(data)
    except TranscriptError as error:
        return Normalised(None, repairs, problem=f"not a valid pi v3 session: {error}")
    newline = data.index(b"\n")
    pinned = pin_cwd(data[:newline], workspace)
    if pinned is not None:
        data = pinned + data[newline:]
        repairs += (Repair.PINNED_CWD,)
    return Normalised(data, repairs, messages=context_message_count(transcript),
                      entry_ids=frozenset(entry.id for entry in transcript.entries))


@dataclass(frozen=True)
class OpenedSession:
    """How pi is started and what the report's `session` says.

    `session_file` is `None` for an in-memory run (`--no-session`).
    """

    session_file: str | None
    resumed: bool
    reason: SessionReason
    entry_ids: frozenset[str] = frozenset()
    repairs: tuple[Repair, ...] = ()
    quarantined_as: str | None = None


def disabled_session() -> OpenedSession:
    """No `PI_SESSION_FILE`: pi's in-memory session (docs/store-contract.md#runner-side)."""
    return OpenedSession(None, False, SessionReason.DISABLED)


def quarantine_name(base: str, epoch_ms: int) -> str:
    """`current.jsonl.invalid-<epoch ms>` (docs/store-contract.md#runner-side)."""
    return f"{base}{QUARANTINE_INFIX}{epoch_ms}"


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _read_regular(name: str, dir_fd: int) -> bytes:
    """The bytes of `name`, opened without following a link; `OSError` when it is not a regular file."""
    fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"the session file is {_kind(st.st_mode)}")
        chunks = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > READ_LIMIT:
                raise OSError(errno.EFBIG, f"the session file is larger than {READ_LIMIT} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _rewrite(name: str, dir_fd: int, old: bytes, new: bytes) -> None:
    """Put `new` in place of `old`: a cut is an in-place truncate; anything else a temp and a rename.

    The rename keeps a failed write (a full disk) from leaving half a file: either the old bytes or the
    new ones are there.
    """
    if old.startswith(new):
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.ftruncate(fd, len(new))
        finally:
            os.close(fd)
        return
    mode = stat.S_IMODE(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    temp = f".{name}.runner-{os.getpid()}.tmp"
    fd = os.open(temp, CREATE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)  # the staged copy's mode (0600) stays whatever the operator made it
            fsio.write_all(fd, new)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def _quarantine(name: str, dir_fd: int, clock: Callable[[], float]) -> str:
    """Move whatever is at `name` (a file, a link, a directory: never followed) aside; create an empty file.

    Returns the quarantine name. A rename moves the directory entry itself, so a planted symlink is
    moved, not its target.
    """
    epoch_ms = int(clock())
    while True:
        target = quarantine_name(name, epoch_ms)
        try:
            os.stat(target, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            break
        epoch_ms += 1  # never replace an earlier quarantine
    os.rename(name, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    os.close(os.open(name, CREATE_FLAGS, 0o600, dir_fd=dir_fd))
    return target


def _now_ms() -> float:
    return time.time() * 1000


def open_session(session_file: str, workspace: str, *, clock: Callable[[], float] = _now_ms) -> OpenedSession:
    """Make `session_file` safe to hand to pi and say how pi must be started. Never raises.

    Mount readiness has been checked already; what can still go wrong here is content (unparseable:
    quarantine and start fresh) or the quarantine itself (run in memory). Neither is an exit 1: a
    content fault would be retried as infrastructure and fail the same way (docs/store-contract.md#runner-side).
    """
    directory, name = os.path.split(session_file)
    unparseable = SessionReason.UNPARSEABLE
    try:
        dir_fd = os.open(directory or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        emit(EVENT_DEGRADED, reason=Degraded.QUARANTINE_FAILED.value, detail=f"cannot open the session directory: "
             f"{error.strerror}")
        return OpenedSession(None, False, unparseable)
    try:
        try:
            data: bytes | None = _read_regular(name, dir_fd)
        except OSError as error:
            data, problem = None, error.strerror or str(error)
            if error.errno == errno.ELOOP:
                problem = "the session file is a symbolic link"
        verdict = normalise(data, workspace) if data is not None else Normalised(None, problem=problem)
        if verdict.data is not None and data is not None:
            try:
                if verdict.data != data:
                    _rewrite(name, dir_fd, data, verdict.data)
            except OSError as error:
                verdict = Normalised(None, verdict.repairs, problem=f"cannot repair the session file: "
                                     f"{error.strerror or error}")
            else:
                if verdict.repairs:
                    emit(EVENT_NORMALISED, repairs=[repair.value for repair in verdict.repairs])
                resumed = verdict.messages > 0
                return OpenedSession(session_file, resumed, SessionReason.RESUMED if resumed else SessionReason.ABSENT,
                                     verdict.entry_ids, verdict.repairs)
        try:
            target = _quarantine(name, dir_fd, clock)
        except OSError as error:
            emit(EVENT_DEGRADED, reason=Degraded.QUARANTINE_FAILED.value,
                 detail=f"{verdict.problem}; quarantine failed: {error.strerror or error}")
            return OpenedSession(None, False, unparseable, repairs=verdict.repairs)
        emit(EVENT_DEGRADED, reason=Degraded.UNPARSEABLE.value, detail=f"{verdict.problem}; moved aside as {target}")
        return OpenedSession(session_file, False, unparseable, repairs=verdict.repairs, quarantined_as=target)
    finally:
        os.close(dir_fd)


def read_final(session_file: str) -> bytes | None:
    """The file pi left behind, read without following a link the agent may have put there; None if unusable."""
    directory, name = os.path.split(session_file)
    try:
        dir_fd = os.open(directory or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _read_regular(name, dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
