"""Forgetting a key (``kubectl delete sessionkey``): its directory goes, and stays gone.

Removing the directory alone is not enough: a Job already running on the key holds a staged copy of
the conversation (or, on a cold start, will write a new one), and its promotion would re-create the
key with the deleted conversation in it, for the next delivery to resume. So every Job in flight on
the key is marked first (``forgotten.json`` in its staging directory, written durably); a marked Job
promotes nothing (``journal.promote_once``) and its completion leaves the SessionKey alone.

Under the key's guard (``keyguard.py``): a Job staged concurrently is staged either before (and is
marked) or after (and sees no transcript). Idempotent: a forget interrupted by a kill is redone in
full when the finalizer runs again, and marking a Job twice is harmless.
"""

from __future__ import annotations

import os
import shutil

from pidispatch.events import emit
from pidispatch.settings import Settings
from pidispatch.store import fsio, keyguard
from pidispatch.store.keys import is_key
from pidispatch.store.staging import FORGOTTEN, JobDir, staged_uids


def forget_key(settings: Settings, staging_root: str, key: str) -> int:
    """Mark the Jobs in flight on ``key``, then remove the key's directory. Returns the number marked.

    A real directory is removed recursively without following any link inside it; a link or file
    planted at the key's name is removed itself, never its target. Without a store, or for a name
    that is not a key, nothing is touched. Raises on a filesystem fault (the finalizer is retried).
    """
    if settings.sessions_dir is None or not is_key(key):
        return 0
    with keyguard.exclusive(key):
        marked = mark_jobs_in_flight(staging_root, key)
        path = os.path.join(settings.sessions_dir, key)
        st = fsio.lstat_or_none(path)
        if fsio.is_real_dir(st):
            shutil.rmtree(path)  # fd-based on Linux: never follows a link inside the directory
        elif st is not None:
            os.unlink(path)
        emit("session_forgotten", key=key, jobsInFlight=marked)
        return marked


def mark_jobs_in_flight(staging_root: str, key: str) -> int:
    """Mark every Job staged on ``key`` (``forgotten.json``): none of them may promote. The caller holds the
    key's guard exclusively (:func:`forget_key`, ``store/retire.py``). Returns the number marked."""
    marked = 0
    for uid in staged_uids(staging_root):
        jd = JobDir(staging_root, uid)
        host = jd.read_host()
        if host is None or host.key != key:
            continue
        try:
            jd.write(FORGOTTEN, {"key": key})
        except FileNotFoundError:
            continue  # the Job ended and its staging went meanwhile
        marked += 1
    return marked
