"""Mount readiness (docs/store-contract.md#runner-side): is `/session` usable by this uid, before anything is spent?

An ordered chain of small checks over facts gathered once: each returns `None` or the one line the
runner prints before exiting 2. The order is the store contract's; the fourth check (the staged file can
be read and rewritten) is ours: the operator stages the copy 0600 under its own uid, so a job Pod
running as another uid would otherwise reach pi and fail there as an "infrastructure" exit 1, which
is retried, instead of as the configuration error it is.

The facts are data so the chain is testable as a table; `gather_mount_facts` asks the kernel with
`access(2)` on the effective ids (the answers differ for root, which the tests account for).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class MountFacts:
    """What this uid can do with the session directory and the staged file."""

    uid: int
    session_file: str
    dir_searchable: bool  # X_OK on the directory (and it is a directory)
    file_present: bool  # something exists at the name (lstat), whatever its type
    dir_writable: bool  # W_OK on the directory: pi appends, the runner may quarantine
    file_regular: bool  # a regular file (a link or anything else is judged later: unparseable)
    file_read_write: bool  # R_OK and W_OK on the regular file

    @property
    def session_dir(self) -> str:
        return os.path.dirname(self.session_file) or "/"


def cannot_enter_session_dir(f: MountFacts) -> str | None:
    if f.dir_searchable:
        return None
    return (f"uid {f.uid} cannot enter {f.session_dir} (the directory of PI_SESSION_FILE={f.session_file}): "
            "it is missing, not a directory, or not searchable by this user; mount the job's staging "
            "directory there and run the Pod as the uid that owns it")


def session_file_missing(f: MountFacts) -> str | None:
    if f.file_present:
        return None
    return (f"the expected session file PI_SESSION_FILE={f.session_file} is missing from the mount "
            f"(uid {f.uid}): the operator stages one (0 bytes on a cold start) whenever it mounts "
            f"{f.session_dir}, so a missing file is a fault, not a cold start")


def cannot_write_session_dir(f: MountFacts) -> str | None:
    if f.dir_writable:
        return None
    return (f"uid {f.uid} cannot write to {f.session_dir} (the directory of PI_SESSION_FILE={f.session_file}): "
            "mount it read-write and run the Pod as the uid that owns it")


def cannot_rewrite_session_file(f: MountFacts) -> str | None:
    if not f.file_regular or f.file_read_write:
        return None
    return (f"uid {f.uid} cannot read and write the session file PI_SESSION_FILE={f.session_file}: "
            "run the Pod as the uid that staged it (the operator's)")


MOUNT_CHECKS: tuple[Callable[[MountFacts], str | None], ...] = (
    cannot_enter_session_dir,
    session_file_missing,
    cannot_write_session_dir,
    cannot_rewrite_session_file,
)


def mount_problem(facts: MountFacts) -> str | None:
    """The first failing check's message, or `None` when the mount is ready."""
    for check in MOUNT_CHECKS:
        problem = check(facts)
        if problem is not None:
            return problem
    return None


def _access(path: str, mode: int) -> bool:
    try:
        return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)
    except OSError:
        return False


def gather_mount_facts(session_file: str) -> MountFacts:
    """Ask the kernel what this process's uid may do with the session file's directory and the file."""
    directory = os.path.dirname(session_file) or "/"
    try:
        is_dir = stat.S_ISDIR(os.stat(directory).st_mode)
    except OSError:
        is_dir = False
    searchable = is_dir and _access(directory, os.X_OK)
    try:
        st: os.stat_result | None = os.lstat(session_file)
    except OSError:
        st = None
    regular = st is not None and stat.S_ISREG(st.st_mode)
    return MountFacts(
        uid=os.geteuid(),
        session_file=session_file,
        dir_searchable=searchable,
        file_present=st is not None,
        dir_writable=searchable and _access(directory, os.W_OK | os.X_OK),
        file_regular=regular,
        file_read_write=regular and _access(session_file, os.R_OK | os.W_OK),
    )
