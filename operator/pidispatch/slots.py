"""The job budget (ARCHITECTURE §4.4): at most N job Pods at once, the rest wait in FIFO order.

Pure and thread-safe; the operator feeds it from Job events and asks it which Jobs may start. A
burst is never dropped: every queued Job stays queued until a slot frees or the Job goes away.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping


class Slots:
    """``capacity`` slots; ``holders`` own one each; ``waiting`` is ordered by arrival key."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._holders: set[str] = set()
        self._waiting: dict[str, Hashable] = {}
        self._lock = threading.Lock()

    def hold(self, job: str) -> None:
        """Record a Job already running (found at start-up): it owns a slot even above capacity."""
        with self._lock:
            self._waiting.pop(job, None)
            self._holders.add(job)

    def enqueue(self, job: str, order: Hashable) -> bool:
        """Queue ``job`` unless it is queued or holding; ``order`` sorts arrivals (oldest first)."""
        with self._lock:
            if job in self._holders or job in self._waiting:
                return False
            self._waiting[job] = order
            return True

    def take_next(self) -> str | None:
        """Move the oldest waiting Job into a free slot and return it, or ``None``."""
        with self._lock:
            if len(self._holders) >= self.capacity or not self._waiting:
                return None
            job = min(self._waiting, key=lambda j: (self._waiting[j], j))
            del self._waiting[job]
            self._holders.add(job)
            return job

    def release(self, job: str) -> bool:
        """Free ``job``'s slot (or drop it from the queue). True when something changed."""
        with self._lock:
            held = job in self._holders
            self._holders.discard(job)
            return self._waiting.pop(job, None) is not None or held

    def position(self, job: str) -> int | None:
        """1-based place of ``job`` in the queue, ``None`` when not waiting."""
        with self._lock:
            if job not in self._waiting:
                return None
            mine = (self._waiting[job], job)
            return 1 + sum(1 for j, o in self._waiting.items() if (o, j) < mine)

    @property
    def free(self) -> int:
        with self._lock:
            return max(0, self.capacity - len(self._holders))

    @property
    def running(self) -> int:
        with self._lock:
            return len(self._holders)

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._waiting)


def waited_longer_than(since: Mapping[str, float], now: float, seconds: float) -> list[str]:
    """The Jobs of ``since`` (name → time they started waiting) that have waited ``seconds`` or more, oldest first."""
    return sorted((job for job, t in since.items() if now - t >= seconds), key=lambda job: (since[job], job))
