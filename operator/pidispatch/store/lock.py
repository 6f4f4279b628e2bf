"""The promotion lock (docs/store-contract.md#lock): an empty ``lock`` file that exists only while a promotion runs.

No daemon, no lease, no content: only its existence and its ``lstat`` mtime matter, so pi-dispatch
hosts and this operator can share one store. A lock older than an hour is taken over; a lock dated
in the future is never stale.

How it is made differs from pi-dispatch's letter, not its effect (``docs/store-divergences.md``): the
writer first creates an empty **candidate** under a name of its own choosing
(``lock.<pid>.<seq>.<12hex>.incoming``) and then *links* it to ``lock``. ``link(2)`` is as exclusive as
``O_CREAT|O_EXCL`` (it fails with EEXIST when anything, a dangling link included, is at ``lock``, and
follows nothing there), and the end state is the same empty file. What it adds is proof of ownership:
while the lock is held, ``lock`` and the candidate are two names of one inode. A writer that journaled
the candidate's name before taking the lock can tell after a crash whether the ``lock`` it finds is
the one it took (same inode as its candidate) and remove it, instead of leaving the key ``locked`` for
an hour. The same test lets a release spare a lock that another writer took over meanwhile.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

from pidispatch.events import emit
from pidispatch.store import fsio
from pidispatch.store.sidecars import LOCK

LOCK_STALE_MS = 3_600_000
_sequence = itertools.count(1)


def candidate_name() -> str:
    """``lock.<pid>.<seq>.<12hex>.incoming``: unique per writer, as the transcript temps are
    (docs/store-contract.md#promotion-steps)."""
    return f"{LOCK}.{os.getpid()}.{next(_sequence)}.{os.urandom(6).hex()}.incoming"


def take_lock(dir_fd: int, key: str, clock: Callable[[], float], candidate: str) -> int | None:
    """Take the key's lock through ``candidate``: its descriptor, or ``None`` when a live lock is held.
    Other errors raise.

    At most two attempts: a stale lock is removed once and the link retried; if a rival wins that
    race we report ``locked`` rather than loop. The candidate is left in place while the lock is
    held (``release_lock`` removes both) and removed when the lock is not taken. The descriptor stays
    open for writing while the lock is held, so the kernel refuses to remount the store read-only
    (EBUSY) under a promotion.
    """
    fd = fsio.create_exclusive(candidate, dir_fd)
    try:
        taken = _link_lock(dir_fd, key, clock, candidate)
    except BaseException:
        os.close(fd)
        _unlink_quietly(candidate, dir_fd)
        raise
    if not taken:
        os.close(fd)
        _unlink_quietly(candidate, dir_fd)
        return None
    return fd


def _link_lock(dir_fd: int, key: str, clock: Callable[[], float], candidate: str) -> bool:
    stale_age: int | None = None
    for _ in range(2):
        try:
            os.link(candidate, LOCK, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            st = fsio.lstat_or_none(LOCK, dir_fd)
            if st is None:  # released between our link and our look
                continue
            age = clock() - fsio.mtime_ms(st)
            if age <= LOCK_STALE_MS:
                return False
            try:
                os.unlink(LOCK, dir_fd=dir_fd)
            except OSError:
                pass
            stale_age = round(age)
            continue
        if stale_age is not None:
            emit("session_lock_stale_taken", key=key, ageMs=stale_age)
        return True
    return False


def release_lock(dir_fd: int, key: str, candidate: str, lock_fd: int | None = None) -> None:
    """Close the lock's descriptor, remove ``lock`` if it is still ours, then the candidate.

    A lock that is ours and cannot be removed is logged and left to the takeover rule. A lock that is
    no longer ours (taken over as stale by another writer) is left to its new holder. Without
    ``lock_fd`` (a recovery after a crash: the descriptor died with its process), only the names go.
    """
    if lock_fd is not None:
        os.close(lock_fd)
    if holds_lock(dir_fd, candidate):
        try:
            os.unlink(LOCK, dir_fd=dir_fd)
        except OSError:
            emit("session_lock_stuck", key=key)
    _unlink_quietly(candidate, dir_fd)


def holds_lock(dir_fd: int, candidate: str) -> bool:
    """True when ``lock`` is the inode of ``candidate``: the lock taken through it is still in place."""
    mine = fsio.lstat_or_none(candidate, dir_fd)
    lock = fsio.lstat_or_none(LOCK, dir_fd)
    return (mine is not None and lock is not None and fsio.is_regular(mine)
            and (mine.st_dev, mine.st_ino) == (lock.st_dev, lock.st_ino))


def _unlink_quietly(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass  # gone already, or not removable: a stray candidate holds no lock
