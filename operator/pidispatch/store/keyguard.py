"""One in-process mutex per session key, for the steps that must not interleave on a key.

Staging a Job, promoting one (with its crash recovery) and forgetting a key each read and change a
key's directory and the records of the Jobs on it; two of them at once on the same key, from two of
the operator's threads, could stage a copy of a conversation being forgotten or recover a promotion
while another runs. The on-disk lock (``lock.py``) does not cover this: it is held only inside a
promotion, and is shared with other writers of the store.

The mutexes are striped (a fixed number, chosen by the key's first hex digits), so memory stays
flat over any number of keys; two keys that share a stripe only wait for each other.
"""

from __future__ import annotations

import threading

STRIPES = 64
_stripes = tuple(threading.Lock() for _ in range(STRIPES))


def guard(key: str) -> threading.Lock:
    """The mutex for ``key`` (a 32-hex session key; any other text is hashed into a stripe too)."""
    try:
        index = int(key[:8], 16)
    except ValueError:
        index = hash(key)
    return _stripes[index % STRIPES]
