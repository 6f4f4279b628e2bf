"""The promotion lock (spec §6.3): an empty ``lock`` file made by exclusive create.

No daemon, no lease, no content: only its existence and its ``lstat`` mtime matter, so pi-dispatch
hosts and this operator can share one store. A lock older than an hour is taken over; a lock dated
in the future is never stale.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pidispatch.events import emit
from pidispatch.store import fsio
from pidispatch.store.sidecars import LOCK

LOCK_STALE_MS = 3_600_000
LOCK_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def take_lock(dir_fd: int, key: str, clock: Callable[[], float]) -> int | None:
    """Return the lock's descriptor, or ``None`` when a live lock is held. Other errors raise.

    At most two attempts: a stale lock is removed once and the create retried; if a rival wins
    that race we report ``locked`` rather than loop.
    """
    stale_age: int | None = None
    for _ in range(2):
        try:
            fd = os.open(LOCK, LOCK_FLAGS, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            st = fsio.lstat_or_none(LOCK, dir_fd)
            if st is None:  # released between our create and our look
                continue
            age = clock() - fsio.mtime_ms(st)
            if age <= LOCK_STALE_MS:
                return None
            try:
                os.unlink(LOCK, dir_fd=dir_fd)
            except OSError:
                pass
            stale_age = round(age)
            continue
        if stale_age is not None:
            emit("session_lock_stale_taken", key=key, ageMs=stale_age)
        return fd
    return None


def release_lock(dir_fd: int, lock_fd: int, key: str) -> None:
    """Close and unlink the lock; a lock that cannot be removed is logged and left to the takeover rule."""
    os.close(lock_fd)
    try:
        os.unlink(LOCK, dir_fd=dir_fd)
    except OSError:
        emit("session_lock_stuck", key=key)
