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
`Resumable` refresh timer does not re-read unchanged transcripts every few minutes. After an operator
restart the memo is empty and every gate-12 answer is read from the bytes again.

Bounded (least recently used first out) so a store of many keys cannot grow the operator's memory
without limit. A version is packed into 40 bytes, so an entry costs about 180 bytes (a tuple of five
large integers cost 330): the bound of 65 536 versions is at most about 12 MB, and covers a
`Resumable` refresh over 65 536 keys. Beyond that the refresh cycles through more keys than the memo
holds, and least-recently-used eviction then misses every time: each refresh reads every transcript
again, as it did before the memo existed.
"""

from __future__ import annotations

import os
import struct
import threading
from collections import OrderedDict

CAPACITY = 65_536

Version = bytes
_VERSION = struct.Struct("<QQqqq")  # dev, ino, size, mtime_ns, ctime_ns


def pack(dev: int, ino: int, size: int, mtime_ns: int, ctime_ns: int) -> Version:
    return _VERSION.pack(dev, ino, size, mtime_ns, ctime_ns)


def version_of(st: os.stat_result) -> Version:
    return _VERSION.pack(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class ScanMemo:
    """Thread-safe bounded map from a transcript version to its gate-12 answer."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._answers: OrderedDict[Version, bool] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0  # answers used instead of a read (tests and the benchmark check which copy ran)

    def get(self, version: Version) -> bool | None:
        with self._lock:
            answer = self._answers.get(version)
            if answer is None:
                return None
            self._answers.move_to_end(version)
            self.hits += 1
            return answer

    def put(self, version: Version, has_empty_compaction: bool) -> None:
        with self._lock:
            self._answers[version] = has_empty_compaction
            self._answers.move_to_end(version)
            while len(self._answers) > self.capacity:
                self._answers.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._answers.clear()
            self.hits = 0

    def __len__(self) -> int:
        return len(self._answers)


MEMO = ScanMemo()
