"""The TTL reaper (docs/store-contract.md#reaper): one recursive delete per idle key directory, never following links.

Disk hygiene only; the read-side TTL gate is what keeps an old transcript from being resumed. The
reaper ignores locks on purpose: it is the second way out of a wedged key.

Everything under the store root is reached by descriptor: each key directory is opened once with
``O_NOFOLLOW``, its transcript is looked up and its files unlinked relative to that descriptor, and the
directory itself is removed relative to the root's. No path is resolved twice, so a key swapped for a
link after the listing is never followed, and a key costs one ``open`` and one ``stat`` before its
deletes (``shutil.rmtree`` by path added an ``lstat``, a second ``stat`` and an ``fstat``).
"""

from __future__ import annotations

import collections
import errno
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pidispatch.events import emit
from pidispatch.settings import Settings
from pidispatch.store import fsio, sidecars
from pidispatch.store.fsio import now_ms
from pidispatch.store.gates import DAY_MS

#: Key directories judged and deleted at once. On ext4 an unlink mostly waits (for the journal, the disk),
#: with the GIL released, so unlinks in different directories overlap: on a 2-CPU VM four threads deleted
#: 3–6× faster than one, and eight or sixteen no faster than four (docs/benchmarks.md, "Store reaper").
WORKERS = 4
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # the configured root may itself be a mount's link
_NOT_A_DIRECTORY = (errno.ENOTDIR, errno.ELOOP)  # what O_NOFOLLOW | O_DIRECTORY says of a link or a file


def reap(settings: Settings, clock: Callable[[], float] = now_ms, workers: int = WORKERS) -> Iterator[dict[str, Any]]:
    """One sweep, yielding one event dict per key it reaped or skipped (also logged), in listing order.

    A generator over ``os.scandir``, so memory stays flat however many keys the store holds: at most
    ``2 × workers`` keys are in flight at any time.
    """
    if settings.sessions_dir is None or settings.ttl_days == 0:
        return
    cutoff = clock() - settings.ttl_days * DAY_MS
    # One handler for a listing that cannot start and one that fails part-way (``_reap_entry``
    # handles its own errors, so only the listing raises here): the sweep stops and says so.
    try:
        root_fd = os.open(settings.sessions_dir, _ROOT_FLAGS)
    except OSError as exc:
        yield _event("session_reaper_skipped", reason=f"cannot list the store: {exc.strerror or exc}")
        return
    pool = ThreadPoolExecutor(workers, thread_name_prefix="reaper") if workers > 1 else None
    pending: collections.deque[Future[dict[str, Any] | None]] = collections.deque()
    try:
        with os.scandir(root_fd) as entries:
            for entry in entries:
                if pool is None:
                    event = _reap_entry(root_fd, entry.name, cutoff)
                    if event is not None:
                        yield _emitted(event)
                    continue
                pending.append(pool.submit(_reap_entry, root_fd, entry.name, cutoff))
                while len(pending) >= 2 * workers:
                    event = pending.popleft().result()
                    if event is not None:
                        yield _emitted(event)
        while pending:
            event = pending.popleft().result()
            if event is not None:
                yield _emitted(event)
    except OSError as exc:
        yield _event("session_reaper_skipped", reason=f"cannot list the store: {exc.strerror or exc}")
    finally:
        for future in pending:  # the consumer stopped early: let what is in flight finish, start nothing new
            future.cancel()
        if pool is not None:
            pool.shutdown(wait=True)
        os.close(root_fd)


def _reap_entry(root_fd: int, name: str, cutoff: float) -> dict[str, Any] | None:
    """Judge and, when idle, delete one entry of the root; the event it earns (not yet logged), or ``None``."""
    try:
        key_fd, listable = _open_key(root_fd, name)
    except OSError as exc:
        if exc.errno in _NOT_A_DIRECTORY:  # a stray file or any link: the reaper's lstat-first rule
            return {"event": "session_not_reaped", "key": name, "reason": "key-not-a-directory"}
        return {"event": "session_reaper_skipped", "key": name, "reason": exc.strerror or str(exc)}
    try:
        try:
            age_source = os.stat(sidecars.TRANSCRIPT, dir_fd=key_fd, follow_symlinks=False)
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # a disk fault is not proof of age
                return {"event": "session_reaper_skipped", "key": name, "reason": exc.strerror or str(exc)}
            # No transcript (a first promotion died early): the directory's own age decides.
            age_source = os.fstat(key_fd)
        if fsio.mtime_ms(age_source) >= cutoff:
            return None
        try:
            # One recursive delete of the whole directory, by descriptor: its contents, then itself.
            _empty(key_fd if listable else os.open(".", fsio.DIR_FLAGS, dir_fd=key_fd), close=not listable)
            os.rmdir(name, dir_fd=root_fd)
        except OSError as exc:
            return {"event": "session_reaper_skipped", "key": name, "reason": exc.strerror or str(exc)}
        return {"event": "reaped_session", "key": name}
    finally:
        os.close(key_fd)


def _open_key(root_fd: int, name: str) -> tuple[int, bool]:
    """The key directory's descriptor, never through a link, and whether it can be listed.

    A directory this process may search but not list is still judged by its transcript's age, as a
    lookup by path would (its delete then fails at the listing and says so).
    """
    try:
        return os.open(name, fsio.DIR_FLAGS, dir_fd=root_fd), True
    except PermissionError:
        return os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd), False


def _empty(dir_fd: int, *, close: bool = False) -> None:
    """Unlink everything in the open directory ``dir_fd``, subdirectories by descriptor; raise the first error."""
    try:
        with os.scandir(dir_fd) as entries:
            names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for child, is_dir in names:
            if is_dir:
                sub = os.open(child, fsio.DIR_FLAGS, dir_fd=dir_fd)
                try:
                    _empty(sub)
                finally:
                    os.close(sub)
                os.rmdir(child, dir_fd=dir_fd)
            else:
                os.unlink(child, dir_fd=dir_fd)
    finally:
        if close:
            os.close(dir_fd)


def _emitted(event: dict[str, Any]) -> dict[str, Any]:
    emit(**event)
    return event


def _event(event: str, **fields: Any) -> dict[str, Any]:
    emit(event, **fields)
    return {"event": event, **fields}
