"""One in-process guard per session key: forgetting a key excludes staging and promoting it.

Staging a Job and promoting one read and change a key's directory; forgetting the key removes it and
marks the Jobs in flight on it. A forget interleaved with either could let a Job stage a copy of the
conversation being forgotten, or re-create the key after the removal. So staging and promotion hold
the key's guard **shared** (they may run side by side: two promotions on one key still meet at the
on-disk lock, ``lock.py``, and the second is ``locked`` as the store contract says), and forgetting holds it
**exclusive**. A waiting forget goes before new shared holders, so it cannot be starved.

The guards are striped (a fixed number, chosen by the key's first hex digits), so memory stays flat
over any number of keys; two keys that share a stripe only wait for each other's forgets.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

STRIPES = 64


class _Stripe:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.shared = 0
        self.exclusive = False
        self.waiting = 0  # exclusive holders waiting: new shared holders let them go first


_stripes = tuple(_Stripe() for _ in range(STRIPES))


def _stripe(key: str) -> _Stripe:
    try:
        index = int(key[:8], 16)
    except ValueError:
        index = hash(key)
    return _stripes[index % STRIPES]


@contextmanager
def shared(key: str) -> Iterator[None]:
    """Hold ``key`` for a stage or a promotion (any number at once, none during a forget)."""
    s = _stripe(key)
    with s.cond:
        while s.exclusive or s.waiting:
            s.cond.wait()
        s.shared += 1
    try:
        yield
    finally:
        with s.cond:
            s.shared -= 1
            s.cond.notify_all()


@contextmanager
def exclusive(key: str) -> Iterator[None]:
    """Hold ``key`` alone, for a forget: no stage or promotion of it runs meanwhile."""
    s = _stripe(key)
    with s.cond:
        s.waiting += 1
        try:
            while s.exclusive or s.shared:
                s.cond.wait()
        finally:
            s.waiting -= 1
        s.exclusive = True
    try:
        yield
    finally:
        with s.cond:
            s.exclusive = False
            s.cond.notify_all()


def held(key: str) -> bool:
    """True while anything holds ``key``'s stripe (for tests of who holds it when)."""
    s = _stripe(key)
    with s.cond:
        return s.exclusive or s.shared > 0
