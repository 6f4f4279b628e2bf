"""A Job's private directory on the staging volume: the staged copy and the Job's journal.

``<staging>/<job-uid>/session/`` is what the job Pod mounts (subPath) at ``/session``; the journal
files next to it (``host.json``, ``promotion.json``) are out of the Pod's reach. The journal is what
makes the flow restartable: the host verdict is written before the Pod exists (made durable right
after the Pod's create, before the Job reads ``Running``), and promotion is
bracketed by ``started`` and ``done`` records, so an operator killed at any point can tell on
restart whether a promotion already landed and never promotes a Job twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from typing import Any

from pidispatch.store import fsio

SESSION = "session"
HOST = "host.json"
PROMOTION = "promotion.json"
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: the staged file is agent-writable, and opening a FIFO planted there must not hang.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
MAX_RECORD = 64 * 1024


class JobDir:
    """Paths and journal of one Job (by uid, which never repeats, unlike names)."""

    def __init__(self, staging_root: str, uid: str) -> None:
        if not uid or "/" in uid or uid in (".", ".."):
            raise ValueError(f"not a Job uid: {uid!r}")
        self.path = os.path.join(staging_root, uid)
        self.session = os.path.join(self.path, SESSION)

    def prepare(self) -> None:
        """Create the directory and its ``session/`` (0700), refusing anything that is not a real directory."""
        for path in (self.path, self.session):
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            if not fsio.is_real_dir(fsio.lstat_or_none(path)):
                raise NotADirectoryError(f"staging path is not a real directory: {path}")

    def exists(self) -> bool:
        return fsio.is_real_dir(fsio.lstat_or_none(self.path))

    def write(self, name: str, record: dict[str, Any], *, durable: bool = True) -> None:
        """Replace journal file ``name`` atomically (temp, rename) and, unless ``durable`` is false, durably
        (fsync of the temp before the rename, fsync of the directory after it).

        ``durable=False`` leaves the record in the page cache only: every process sees it at once and a
        killed operator keeps it, but a power cut may lose it (or leave a torn file, which :meth:`read`
        reports as missing). The caller then owes a :meth:`sync` before anything depends on the record
        surviving a power cut.
        """
        data = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
        dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            temp = f".{name}.incoming"
            fsio.clear_name(temp, dir_fd)
            fd = os.open(temp, _WRITE | os.O_EXCL, 0o600, dir_fd=dir_fd)
            try:
                fsio.write_all(fd, data)
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            if durable:
                fsio.fsync_dir(dir_fd)
        finally:
            os.close(dir_fd)

    def sync(self, name: str) -> None:
        """Make an earlier ``write(name, ..., durable=False)`` durable: fsync the file, then the directory."""
        dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsio.fsync_dir(dir_fd)
        finally:
            os.close(dir_fd)

    def read(self, name: str) -> dict[str, Any] | None:
        """A journal record, or ``None`` when missing, not a regular file, oversized or not a JSON object."""
        try:
            fd = os.open(os.path.join(self.path, name), _READ)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_RECORD:
                return None
            data = os.read(fd, MAX_RECORD + 1)
        finally:
            os.close(fd)
        try:
            record = json.loads(data)
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def file_digest(path: str, max_bytes: int = 0) -> tuple[int, str] | None:
    """``(size, sha256)`` of a regular file read without following links, or ``None``.

    With ``max_bytes`` (0: no cap), a file larger than the cap is ``None`` too, and is not read: the
    staged file is agent-written and may be of any size, and the store's size cap rejects it anyway.
    The cap is checked before the first byte is read, and again while reading (the file may grow).
    """
    try:
        fd = os.open(path, _READ)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or _over_cap(st.st_size, max_bytes):
            return None
        digest = hashlib.sha256()
        size = 0
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
            size += len(chunk)
            if _over_cap(size, max_bytes):
                return None
        return size, digest.hexdigest()
    finally:
        os.close(fd)


def _over_cap(size: int, max_bytes: int) -> bool:
    return max_bytes > 0 and size > max_bytes


def staged_uids(staging_root: str) -> list[str]:
    """The Job uids that have a directory on the staging volume (links and files are not Jobs)."""
    try:
        names = os.listdir(staging_root)
    except FileNotFoundError:
        return []
    return [n for n in names if fsio.is_real_dir(fsio.lstat_or_none(os.path.join(staging_root, n)))]
