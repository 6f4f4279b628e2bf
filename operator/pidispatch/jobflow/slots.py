"""The job budget (docs/architecture.md#slot): at most N job Pods at once, the rest wait in FIFO order.

Pure and thread-safe; the operator feeds it from Job events and asks it which Jobs may start. A
burst is never dropped: every queued Job stays queued until a slot frees or the Job goes away.

A Job whose start failed for a passing reason is *deferred*: it keeps its place in the order but is
not offered again before its back-off ends, so the Jobs behind it start meanwhile (one failing Job
must never hold the head of the queue). Among the Jobs that are ready, the order is FIFO. How long the
back-off is, and when a waiting Job is marked ``Queued``, is the queue policy's (``queuepolicy.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable


class Slots:
    """``capacity`` slots; ``holders`` own one each; ``waiting`` is ordered by arrival key."""

    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._clock = clock
        self._holders: set[str] = set()
        self._waiting: dict[str, Hashable] = {}
        self._not_before: dict[str, float] = {}  # deferred Jobs → clock time their back-off ends
        self._lock = threading.Lock()

    def hold(self, job: str) -> None:
        """Record a Job already running (found at start-up): it owns a slot even above capacity."""
        with self._lock:
            self._waiting.pop(job, None)
            self._not_before.pop(job, None)
            self._holders.add(job)

    def enqueue(self, job: str, order: Hashable) -> bool:
        """Queue ``job`` unless it is queued or holding; ``order`` sorts arrivals (oldest first)."""
        with self._lock:
            if job in self._holders or job in self._waiting:
                return False
            self._waiting[job] = order
            return True

    def take_next(self) -> str | None:
        """Move the oldest *ready* waiting Job (no back-off running) into a free slot and return it, or ``None``."""
        with self._lock:
            if len(self._holders) >= self.capacity:
                return None
            now = self._clock()
            ready = [j for j in self._waiting if self._not_before.get(j, now) <= now]
            if not ready:
                return None
            job = min(ready, key=lambda j: (self._waiting[j], j))
            del self._waiting[job]
            self._not_before.pop(job, None)
            self._holders.add(job)
            return job

    def defer(self, job: str, order: Hashable, seconds: float) -> None:
        """Give ``job``'s slot back and queue it at its place, not to be taken again for ``seconds``."""
        with self._lock:
            self._holders.discard(job)
            self._waiting[job] = order
            self._not_before[job] = self._clock() + seconds

    def next_ready_in(self) -> float | None:
        """Seconds until the earliest back-off still running ends, ``None`` when no Job is deferred.

        Ready Jobs are not counted: a freed slot or an arrival wakes the pump for them, and counting
        them would make a pump at capacity spin.
        """
        with self._lock:
            now = self._clock()
            pending = [t for t in self._not_before.values() if t > now]
            return max(0.0, min(pending) - now) if pending else None

    def release(self, job: str) -> bool:
        """Free ``job``'s slot (or drop it from the queue). True when something changed."""
        with self._lock:
            held = job in self._holders
            self._holders.discard(job)
            self._not_before.pop(job, None)
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

