"""The transfer body: a job's session directory as one stream, strict to read. Standard library only.

Not tar: tar carries links, directories, devices, owners, long-name and pax extensions, each a way for
an agent-written archive to reach outside the directory. This format can say only "a regular file of
this name and these bytes", so the reader's whole job is the name allow-list and the sizes::

    magic    b"PITX\\x01\\n"                                  6 bytes
    entry*   name length (u16, big-endian, 1..255)
             name (ASCII, one of NAMES)
             size (u64, big-endian) and that many bytes
    end      u16 0
    trailer  SHA-256 of every byte before it                32 bytes

Nothing may follow the trailer; a name appears at most once; the whole stream is capped. The trailer
lets a streamed GET (whose digest is not known when its headers go out) be checked at its end; a PUT
carries the digest of the whole body in a header as well, checked by the server before it unpacks.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

MAGIC = b"PITX\x01\n"
TRAILER_BYTES = 32
MAX_NAME = 255
MAX_ENTRIES = 64
CHUNK = 1 << 16
# What a job may hand back, and what the operator stages: the transcript (``runner/session.py``), the
# runner's quarantine of an unparseable one (``current.jsonl.invalid-<epoch ms>``), the rethread letter
# and ledger the operator stages and the handoff the runner writes (``store/handoff.py``). Nothing else:
# not the runner's temporary files, not anything the agent makes.
NAMES = re.compile(r"current\.jsonl(?:\.invalid-[0-9]{1,20})?|handoff\.json|letter\.md|ledger\.md")

_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ArchiveError(ValueError):
    """The stream is not an archive this side accepts (the message says why, never with file contents)."""


class OverCap(ArchiveError):
    """The stream passed its cap."""


def allowed(name: str) -> bool:
    """True when ``name`` may travel: on the allow-list, so a plain single path segment."""
    return NAMES.fullmatch(name) is not None


@dataclass(frozen=True)
class Member:
    """An open regular file of the directory being sent (``fd`` is owned by whoever closes the members)."""

    name: str
    fd: int
    size: int


def open_members(dir_fd: int) -> tuple[list[Member], list[str]]:
    """Open the allowed regular files directly in ``dir_fd`` without following a link; and what was skipped.

    Names come from the directory's listing only. A link, a directory, a FIFO or a name outside the
    allow-list is skipped (listed in the second value); the caller closes the members' fds.
    """
    members: list[Member] = []
    skipped: list[str] = []
    try:
        for name in sorted(os.listdir(dir_fd)):
            if not allowed(name):
                skipped.append(name)
                continue
            try:
                fd = os.open(name, _OPEN, dir_fd=dir_fd)
            except OSError:  # ELOOP: a link; or it vanished
                skipped.append(name)
                continue
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                skipped.append(name)
                continue
            members.append(Member(name, fd, st.st_size))
    except BaseException:
        close_members(members)
        raise
    if len(members) > MAX_ENTRIES:
        close_members(members)
        raise ArchiveError(f"more than {MAX_ENTRIES} files to send")
    return members, skipped


def close_members(members: list[Member]) -> None:
    for member in members:
        os.close(member.fd)


def archive_size(members: list[Member]) -> int:
    """The exact length of :func:`stream`'s output for these members."""
    return len(MAGIC) + sum(2 + len(m.name) + 8 + m.size for m in members) + 2 + TRAILER_BYTES


def stream(members: list[Member]) -> Iterator[bytes]:
    """The archive of ``members``, in chunks; raises :class:`ArchiveError` when a file shrank while read
    (the length already promised could not be kept: the receiver sees a short body and refuses it)."""
    digest = hashlib.sha256()

    def out(data: bytes) -> bytes:
        digest.update(data)
        return data

    yield out(MAGIC)
    for m in members:
        name = m.name.encode("ascii")
        yield out(struct.pack(">H", len(name)) + name + struct.pack(">Q", m.size))
        left = m.size
        offset = 0
        while left:
            chunk = os.pread(m.fd, min(CHUNK, left), offset)
            if not chunk:
                raise ArchiveError(f"{m.name} shrank while it was sent")
            offset += len(chunk)
            left -= len(chunk)
            yield out(chunk)
    yield out(struct.pack(">H", 0))
    yield digest.digest()


@dataclass(frozen=True)
class Unpacked:
    """What :func:`unpack` wrote: the names and sizes, and the archive's length."""

    files: tuple[tuple[str, int], ...]
    bytes: int


def unpack(read: Callable[[int], bytes], dest_fd: int, *, max_bytes: int) -> Unpacked:
    """Read one archive from ``read`` (a file's or a response's ``read``) into the empty directory ``dest_fd``.

    Files are created new (``O_EXCL``, ``O_NOFOLLOW``, 0600) and fsynced. Raises :class:`ArchiveError`
    (or :class:`OverCap` past ``max_bytes``) on anything out of shape, after which ``dest_fd`` may hold
    some files: the caller unpacks into a directory of its own and removes it on failure.
    """
    digest = hashlib.sha256()
    total = 0

    def exact(n: int) -> bytes:
        nonlocal total
        if total + n > max_bytes:
            raise OverCap(f"the archive is larger than the cap of {max_bytes} bytes")
        parts: list[bytes] = []
        want = n
        while want:
            chunk = read(min(want, CHUNK))
            if not chunk:
                raise ArchiveError("the archive ends early")
            parts.append(chunk)
            want -= len(chunk)
        data = b"".join(parts)
        total += n
        digest.update(data)
        return data

    if exact(len(MAGIC)) != MAGIC:
        raise ArchiveError("not a pi-dispatch transfer archive (v1)")
    files: list[tuple[str, int]] = []
    seen: set[str] = set()
    while True:
        (length,) = struct.unpack(">H", exact(2))
        if length == 0:
            break
        if length > MAX_NAME or len(files) >= MAX_ENTRIES:
            raise ArchiveError("an entry's name is too long, or there are too many entries")
        raw = exact(length)
        try:
            name = raw.decode("ascii")
        except UnicodeDecodeError:
            raise ArchiveError("an entry's name is not ASCII") from None
        if not allowed(name):
            raise ArchiveError(f"{name!r} is not a file a job may hand over")
        if name in seen:
            raise ArchiveError(f"{name!r} appears twice")
        seen.add(name)
        (size,) = struct.unpack(">Q", exact(8))
        if total + size > max_bytes:
            raise OverCap(f"the archive is larger than the cap of {max_bytes} bytes")
        _write_member(name, size, exact, dest_fd)
        files.append((name, size))
    expected = digest.digest()
    if total + TRAILER_BYTES > max_bytes:
        raise OverCap(f"the archive is larger than the cap of {max_bytes} bytes")
    trailer = read(TRAILER_BYTES)
    while len(trailer) < TRAILER_BYTES:
        more = read(TRAILER_BYTES - len(trailer))
        if not more:
            raise ArchiveError("the archive ends early")
        trailer += more
    if trailer != expected:
        raise ArchiveError("the archive's checksum does not match its content")
    if read(1):
        raise ArchiveError("bytes follow the archive's end")
    return Unpacked(tuple(files), total + TRAILER_BYTES)


def _write_member(name: str, size: int, exact: Callable[[int], bytes], dest_fd: int) -> None:
    fd = os.open(name, _CREATE, 0o600, dir_fd=dest_fd)
    try:
        left = size
        while left:
            chunk = exact(min(CHUNK, left))
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
            left -= len(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
