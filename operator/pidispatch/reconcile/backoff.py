"""Per-key exponential back-off with two caps: on the delay, and on the attempts.

One definition of "try again later" for the operator: the workqueue's retries (``reconcile/workqueue.py``)
and the pump's failed starts (``jobflow/queue.py``) both ask it. As controller-runtime's per-item
exponential rate limiter, with the cap on the attempts that its callers add by hand (``NumRequeues``):
past it the key is dropped, and a later event or the resync brings it back with a fresh count.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Backoff:
    """``first`` seconds after the first failure, doubling up to ``cap``; a retry after each of the first
    ``attempts`` failures in a row, and the next failure drops the key."""

    first: float
    cap: float
    attempts: int

    def delay(self, failures: int) -> float | None:
        """The wait after ``failures`` failures in a row; ``None`` once ``attempts`` is spent (drop the key)."""
        if failures > self.attempts:
            return None
        if failures < 1:
            return 0.0
        return min(self.cap, self.first * 2.0 ** min(failures - 1, 62))


class RateLimiter(Generic[K]):
    """Failures in a row per key, and the wait each earns (:class:`Backoff`). Thread-safe."""

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self._failures: dict[K, int] = {}
        self._lock = threading.Lock()

    def when(self, key: K) -> tuple[int, float | None]:
        """Count one more failure of ``key``: (failures in a row, the wait before its retry or ``None``: drop it).
        A dropped key's count is reset, so a later event starts afresh."""
        with self._lock:
            failures = self._failures.get(key, 0) + 1
            delay = self.backoff.delay(failures)
            if delay is None:
                self._failures.pop(key, None)
            else:
                self._failures[key] = failures
            return failures, delay

    def failures(self, key: K) -> int:
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        """``key`` succeeded: its next failure waits ``first`` again."""
        with self._lock:
            self._failures.pop(key, None)
