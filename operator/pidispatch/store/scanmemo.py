"""Gate 12's answer, remembered per version of a transcript file.

Gate 12 (`compaction-summary-empty`) is the only gate that reads every byte. Its answer is a function
of the bytes, and the store never changes a transcript's bytes in place: promotion writes a new file
and renames it over the old one, so every version is a new inode. A version is named by
``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)``. Any write to a file sets its ctime to the
current time, and no system call sets ctime to a chosen value (``utimensat`` sets mtime and *also*
bumps ctime), so a file whose bytes changed after its scan no longer matches the name it was
scanned under, even if someone restored its size and mtime. An answer is recorded only when the
descriptor's stat taken before the read equals the one taken after it (nothing wrote during the
scan) and the read covered the whole judged size.

What uses it: the `SessionKey` status dry run after each promotion scans the new transcript once; the
next job's stage of that transcript then copies it in the kernel without scanning it again, and the
`Resumable` refresh timer does not re-read unchanged transcripts every few minutes. The same entry
also remembers the transcript's sha256 once a waiting letter made someone hash it (store/handoff.py:
a letter waits only beside the transcript it names), so the refresh does not hash it again either.
After an operator restart the memo is empty and the first refresh reads every transcript once.

Bounded (least recently used first out) so a store of many keys cannot grow the operator's memory
without limit. A version is packed into 40 bytes, so an entry costs about 180 bytes (a tuple of five
large integers cost 330), 250 with a digest: the bound of 131 072 versions is at most about 23 MiB
(32 MiB if every key held a letter), and covers a `Resumable` refresh over 100 000 keys with room for
the versions that promotions replace between two refreshes (the refresh touches every live version
each cycle, so the replaced ones are the least recently used and go first). Beyond the bound the
refresh cycles through more keys than the memo holds, and least-recently-used eviction then misses
every time: each refresh reads every transcript again, as it did before the memo existed.

:class:`HeaderMemo` remembers, under the same version name, what gates 11 and 13 take from the header
line (whether it is a session header, and its timestamp), so the `Resumable` refresh does not read the
header of a version it has already judged either. Only the dry run uses it (store/resolve.py): a
stage reads the header itself, as the store contract says. Same bound and eviction; an entry is one small
object (``False``, ``True`` or a float) beside its 40-byte key: about 200 bytes, about 25 MiB at the bound.
"""

from __future__ import annotations

import os
import struct
import threading
from collections import OrderedDict
from typing import Any

CAPACITY = 131_072

Version = bytes
_VERSION = struct.Struct("<QQqqq")  # dev, ino, size, mtime_ns, ctime_ns
# An entry is the gate-12 answer alone (the common case: no tuple allocated), or, once the version's
# digest is known, the pair (answer or None, sha256 digest).
_Entry = bool | tuple[bool | None, bytes]


def pack(dev: int, ino: int, size: int, mtime_ns: int, ctime_ns: int) -> Version:
    return _VERSION.pack(dev, ino, size, mtime_ns, ctime_ns)


def version_of(st: os.stat_result) -> Version:
    return _VERSION.pack(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _Bounded:
    """A thread-safe map from transcript versions, least recently used out past ``capacity``."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[Version, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0  # answers used instead of a read (tests and the benchmark check which path ran)

    def _hit(self, version: Version) -> None:
        """Count a use of ``version``'s entry and make it the most recently used; the caller holds the lock."""
        self._entries.move_to_end(version)
        self.hits += 1

    def _store(self, version: Version, entry: Any) -> None:
        """Put ``entry`` as the most recently used; the caller holds the lock."""
        self._entries[version] = entry
        self._entries.move_to_end(version)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._forget_counts()

    def _forget_counts(self) -> None:
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)


class ScanMemo(_Bounded):
    """Gate 12's answer per version (and the version's digest, once known)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        super().__init__(capacity)
        self.digest_hits = 0  # digests used instead of hashing the transcript

    def get(self, version: Version) -> bool | None:
        with self._lock:
            entry = self._entries.get(version)
            answer: bool | None = entry[0] if isinstance(entry, tuple) else entry
            if answer is None:
                return None
            self._hit(version)
            return answer

    def put(self, version: Version, has_empty_compaction: bool) -> None:
        with self._lock:
            entry = self._entries.get(version)
            self._store(version, (has_empty_compaction, entry[1]) if isinstance(entry, tuple) else has_empty_compaction)

    def digest(self, version: Version) -> bytes | None:
        """The sha256 digest of this version's bytes, when it was hashed before."""
        with self._lock:
            entry = self._entries.get(version)
            if not isinstance(entry, tuple):
                return None
            self._entries.move_to_end(version)
            self.digest_hits += 1
            digest: bytes = entry[1]
            return digest

    def put_digest(self, version: Version, digest: bytes) -> None:
        with self._lock:
            entry = self._entries.get(version)
            self._store(version, (entry[0] if isinstance(entry, tuple) else entry, digest))

    def _forget_counts(self) -> None:
        self.hits = 0
        self.digest_hits = 0


MEMO = ScanMemo()

#: What gates 11 and 13 need from one version's header line: ``False`` when it is not a session header
#: (gate 11 refuses; gate 13 is never reached), else its timestamp in epoch ms, or ``True`` when the
#: header parses but has no usable timestamp (gate 13 fails closed on it when the age cap is on).
HeaderFacts = bool | float


class HeaderMemo(_Bounded):
    """Gates 11 and 13's :data:`HeaderFacts` per version."""

    def get(self, version: Version) -> HeaderFacts | None:
        with self._lock:
            facts = self._entries.get(version)
            if facts is not None:
                self._hit(version)
            return facts

    def put(self, version: Version, facts: HeaderFacts) -> None:
        with self._lock:
            self._store(version, facts)


HEADERS = HeaderMemo()
