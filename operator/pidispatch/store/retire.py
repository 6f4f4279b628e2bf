"""Retiring a key (a pull request closed or merged, an issue closed): its conversation ends for good.

Like a forget (``forget.py``), every Job in flight on the key is marked first, so none of them brings the
conversation back by promoting it; then the key directory goes: deleted, or archived. An archive is the
key directory itself, whole and unchanged, renamed to ``<root>/.retired-<key>-<ms>`` (not a key name, so
no resolution ever reaches it; a person can move it back by hand). Both reapers (ours and pi-dispatch's)
treat every real directory of the root as a key and age it by its transcript's mtime, so an archive
lives exactly as long as the key would have (``docs/store-divergences.md``).

Never follows a link: a link or file planted at the key's name is removed itself (nothing to archive).
"""

from __future__ import annotations

import os
import shutil
from enum import StrEnum

from pidispatch.events import emit
from pidispatch.settings import Settings
from pidispatch.store import fsio, keyguard
from pidispatch.store.forget import mark_jobs_in_flight
from pidispatch.store.keys import is_key

ARCHIVE_PREFIX = ".retired-"
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # the configured root may itself be a link


class RetireMode(StrEnum):
    """What retiring does with the key directory (the chart's ``sessions.retire``)."""

    DELETE = "delete"
    ARCHIVE = "archive"


def archive_name(key: str, clock_ms: float) -> str:
    """The root entry an archived key directory is renamed to."""
    return f"{ARCHIVE_PREFIX}{key}-{int(clock_ms)}"


def retire_key(settings: Settings, staging_root: str, key: str, mode: RetireMode, *,
               clock_ms: float | None = None) -> str | None:
    """Mark the Jobs in flight on ``key``, then delete or archive its directory.

    Returns the archive's entry name (relative to the store root) when a directory was archived, else
    ``None`` (deleted, nothing there, no store, not a key). Idempotent: retiring a retired key finds nothing.
    Raises on a filesystem fault (the caller retries: the annotation that asked stays until it is done).
    """
    if settings.sessions_dir is None or not is_key(key):
        return None
    with keyguard.exclusive(key):
        marked = mark_jobs_in_flight(staging_root, key)
        root_fd = os.open(settings.sessions_dir, _ROOT_FLAGS)
        try:
            st = fsio.lstat_or_none(key, dir_fd=root_fd)
            archived = None
            if fsio.is_real_dir(st) and mode is RetireMode.ARCHIVE:
                archived = archive_name(key, fsio.now_ms() if clock_ms is None else clock_ms)
                # One rename on one filesystem, by the root's descriptor: atomic, and nothing is followed.
                os.rename(key, archived, src_dir_fd=root_fd, dst_dir_fd=root_fd)
                os.fsync(root_fd)
            elif fsio.is_real_dir(st):
                shutil.rmtree(os.path.join(settings.sessions_dir, key))  # fd-based: never follows a link inside
            elif st is not None:
                os.unlink(key, dir_fd=root_fd)
        finally:
            os.close(root_fd)
        emit("session_retired", key=key, jobsInFlight=marked, archived=archived is not None)
        return archived
