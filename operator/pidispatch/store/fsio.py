"""Filesystem primitives that never follow a link where the store contract says they must not.

Everything in a key directory is agent-reachable or attacker-plantable (the key is computable), so
shapes are judged with ``lstat`` and files are opened with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so a
FIFO swapped in after the check cannot hang the operator).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import time
from typing import NamedTuple

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Identity(NamedTuple):
    """``dev:ino:size:mtime`` of a file; the same representation on both sides of every comparison."""

    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def matches(self, st: os.stat_result) -> bool:
        """``Identity.of(st) == self``, without building the second identity (a stage compares two)."""
        return self == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def now_ms() -> float:
    """The wall clock in milliseconds (float), the unit every store timestamp is compared in."""
    return time.time_ns() / 1e6


def mtime_ms(st: os.stat_result) -> float:
    """Modification time in milliseconds (float), the store contract's clock unit."""
    return st.st_mtime_ns / 1e6


def lstat_or_none(path: str, dir_fd: int | None = None) -> os.stat_result | None:
    """``lstat``, or ``None`` when it fails for any reason."""
    try:
        return os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def is_real_dir(st: os.stat_result | None) -> bool:
    return st is not None and stat.S_ISDIR(st.st_mode)


def is_regular(st: os.stat_result | None) -> bool:
    return st is not None and stat.S_ISREG(st.st_mode)


def same_dir(st: os.stat_result | None, pinned: tuple[int, int]) -> bool:
    """A real directory with the pinned ``dev:ino``."""
    return is_real_dir(st) and (st.st_dev, st.st_ino) == pinned  # type: ignore[union-attr]


def clear_name(name: str, dir_fd: int) -> None:
    """Make sure nothing is left at ``name``: not a file, a planted directory or a dangling link."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.EISDIR, errno.EPERM):
            raise
        shutil.rmtree(name, dir_fd=dir_fd)


def create_exclusive(name: str, dir_fd: int, mode: int = 0o600) -> int:
    """Create ``name`` in ``dir_fd`` afresh, never through a link, and return its descriptor for writing.

    Whatever is already at ``name`` (a leftover of a crash, a planted link or FIFO, a directory) is
    removed first, as :func:`clear_name` does. The exclusive create is tried before that because it
    refuses every such shape (``EEXIST``) without opening it: the usual case is then one call, not an
    unlink that finds nothing followed by the create.
    """
    try:
        return os.open(name, CREATE_FLAGS, mode, dir_fd=dir_fd)
    except FileExistsError:
        clear_name(name, dir_fd)
        return os.open(name, CREATE_FLAGS, mode, dir_fd=dir_fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_dir(dir_fd: int) -> None:
    """Persist directory entries (a rename, a create) so a power cut cannot undo them."""
    os.fsync(dir_fd)
