"""The TTL reaper (spec §7): one recursive delete per idle key directory, never following links.

Disk hygiene only; the read-side TTL gate is what keeps an old transcript from being resumed. The
reaper ignores locks on purpose: it is the second way out of a wedged key.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

from pidispatch.events import emit
from pidispatch.settings import Settings
from pidispatch.store import fsio, sidecars
from pidispatch.store.fsio import now_ms
from pidispatch.store.gates import DAY_MS


def reap(settings: Settings, clock: Callable[[], float] = now_ms) -> Iterator[dict[str, Any]]:
    """One sweep, yielding one event dict per key it reaped or skipped (also logged).

    A generator over ``os.scandir``, so memory stays flat however many keys the store holds.
    """
    if settings.sessions_dir is None or settings.ttl_days == 0:
        return
    cutoff = clock() - settings.ttl_days * DAY_MS
    # One handler for a listing that cannot start and one that fails part-way (``_reap_entry``
    # handles its own errors, so only the listing raises here): the sweep stops and says so.
    try:
        with os.scandir(settings.sessions_dir) as entries:
            for entry in entries:
                event = _reap_entry(entry.path, entry.name, cutoff)
                if event is not None:
                    yield event
    except OSError as exc:
        yield _event("session_reaper_skipped", reason=f"cannot list the store: {exc.strerror or exc}")


def _reap_entry(path: str, name: str, cutoff: float) -> dict[str, Any] | None:
    if not fsio.is_real_dir(fsio.lstat_or_none(path)):
        return _event("session_not_reaped", key=name, reason="key-not-a-directory")
    try:
        age_source = os.stat(os.path.join(path, sidecars.TRANSCRIPT), follow_symlinks=False)
    except OSError as exc:
        if exc.errno != errno.ENOENT:  # a disk fault is not proof of age
            return _event("session_reaper_skipped", key=name, reason=exc.strerror or str(exc))
        try:
            # No transcript (a first promotion died early): the directory's own age decides.
            age_source = os.stat(path, follow_symlinks=False)
        except OSError as inner:
            return _event("session_reaper_skipped", key=name, reason=inner.strerror or str(inner))
    if fsio.mtime_ms(age_source) >= cutoff:
        return None
    try:
        # One recursive delete of the whole directory; rmtree refuses a symlink and walks by fd.
        shutil.rmtree(path)
    except OSError as exc:
        return _event("session_reaper_skipped", key=name, reason=exc.strerror or str(exc))
    return _event("reaped_session", key=name)


def _event(event: str, **fields: Any) -> dict[str, Any]:
    emit(event, **fields)
    return {"event": event, **fields}
