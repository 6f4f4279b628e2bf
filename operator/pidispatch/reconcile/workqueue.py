"""A keyed, rate-limited workqueue with a fixed pool of workers: the operator's one event path.

controller-runtime's workqueue, in threads (docs/architecture.md#event-path):

* **Keyed, serialised per key.** A key is in the queue at most once and never in two workers at once. An
  event for a key already queued replaces its item; one for a key being processed marks it *dirty*, and it
  is processed again once the worker is done, with the latest item (level-triggered and coalescing: ten
  updates of a Pod while its last one is handled cost one more pass, not ten).
* **Rate-limited retries.** A reconcile that raises is retried after its key's back-off
  (``reconcile/backoff.py``: exponential, capped), with the newest item known by then; past the cap on the
  attempts the key is dropped with an error line and ``pidispatch_workqueue_dropped_total``. A success
  forgets the key's failures (and cancels a retry still waiting: the success saw a newer item).
* **Resync.** Every ``resync_seconds``, every known key (its last item, unless it was forgotten) is queued
  again, so a key dropped or an event lost between the watch and the reconciler costs a period, not forever.
* **Requeue after.** ``add_after`` brings a key back after a delay (a reconcile that must wait for the world
  returns instead of sleeping in its worker).
* **The fence.** ``acting()`` is asked as each item is taken: an item taken while it says no is dropped.

The items are opaque here; ``merge`` decides what a new item makes of one still waiting (by default, the new
one wins).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from pidispatch import metrics
from pidispatch.reconcile.backoff import Backoff, RateLimiter

log = logging.getLogger("pidispatch.operator")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# 5 ms doubling to 5 min, as controller-runtime's default per-item limiter (5 ms → 1000 s); dropped after 15
# failures in a row (about 2 min 45 s of trying), then back at the next event or resync.
DEFAULT_BACKOFF = Backoff(first=0.005, cap=300.0, attempts=15)


def _latest(_old: V, new: V) -> V:
    return new


class WorkQueue(Generic[K, V]):
    """``reconcile(key, item)`` for each key queued, on ``workers`` threads, one key at a time per key.

    ``kind(key)`` names a key's kind in logs and metrics (a closed set: never a name). ``merge(waiting, new)``
    folds a new item into one still waiting for its turn.
    """

    def __init__(self, reconcile: Callable[[K, V], None], *, name: str, workers: int = 8,
                 backoff: Backoff = DEFAULT_BACKOFF, resync_seconds: float | None = None,
                 acting: Callable[[], bool] = lambda: True, kind: Callable[[K], str] | None = None,
                 merge: Callable[[V, V], V] = _latest, clock: Callable[[], float] = time.monotonic) -> None:
        self._reconcile, self.name, self._workers = reconcile, name, workers
        self._acting, self._merge, self._clock = acting, merge, clock
        self._kind: Callable[[K], str] = kind or (lambda _key: name)
        self.limiter: RateLimiter[K] = RateLimiter(backoff)
        self.resync_seconds = resync_seconds
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # the workers wait on it: a key is ready
        self._timer = threading.Condition(lock)  # the timer waits on it: a retry was scheduled, or stop
        self._ready: deque[K] = deque()  # keys waiting for a worker, oldest first; each at most once
        self._items: dict[K, V] = {}  # the item each queued or dirty key is to be processed with
        self._processing: set[K] = set()
        self._dirty: set[K] = set()  # being processed, and a newer item came: queued again when done
        self._known: dict[K, V] = {}  # the last item of every key not forgotten: what a resync replays
        self._retries: list[tuple[float, int, K]] = []  # (due, ticket, key): a heap of waiting retries
        self._ticket: dict[K, int] = {}  # the one retry of each key that still counts
        self._retry_items: dict[int, V] = {}  # the item that failed, by ticket: replayed if the key is not known
        self._tickets = itertools.count()
        self._later: list[tuple[float, int, K, V]] = []  # (due, ticket, key, item): a heap of add_after's
        self._next_resync = float("inf")
        self._stopping = False
        self._threads: list[threading.Thread] = []

    # ---- feeding ----------------------------------------------------------------------------------

    def add(self, key: K, item: V, *, remember: bool | None = True) -> None:
        """Queue ``key`` with ``item`` (merged into one still waiting). ``remember`` False: the key is
        processed but not replayed by a resync (a deletion); ``None``: what a resync replays is left as it is
        (a nudge that carries no newer object)."""
        with self._cond:
            if self._stopping:
                return
            self._put(key, item)
            if remember:
                self._known[key] = item
            elif remember is not None:
                self._known.pop(key, None)

    def add_after(self, key: K, item: V, seconds: float) -> None:
        """Queue ``key`` with ``item`` once ``seconds`` have passed (controller-runtime's ``AddAfter``: a
        reconcile that must wait returns, and its key comes back), leaving what a resync replays as it is.
        Not cancelled by a success or a failure of the key meanwhile."""
        with self._cond:
            if self._stopping:
                return
            heapq.heappush(self._later, (self._clock() + seconds, next(self._tickets), key, item))
            self._timer.notify()

    def discard(self, key: K) -> None:
        """No resync replays ``key`` any more (its object is gone); an item already waiting is still processed."""
        with self._cond:
            self._known.pop(key, None)

    def resync(self) -> None:
        """Queue every known key again with its last item: a key already waiting keeps its one turn, one being
        processed is processed once more after."""
        with self._cond:
            self._resync_locked()

    def _resync_locked(self) -> None:
        for key, item in list(self._known.items()):
            if key not in self._items:
                self._put(key, item)

    def _put(self, key: K, item: V) -> None:  # under the lock
        waiting = key in self._items
        self._items[key] = self._merge(self._items[key], item) if waiting else item
        if key in self._processing:
            self._dirty.add(key)
        elif not waiting:
            self._ready.append(key)
            self._cond.notify()

    # ---- life cycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the workers and the timer (the retries' back-offs and the resync)."""
        with self._cond:
            if self.resync_seconds is not None:
                self._next_resync = self._clock() + self.resync_seconds
        for i in range(self._workers):
            self._spawn(self._work, f"pidispatch-{self.name}-{i}")
        self._spawn(self._time, f"pidispatch-{self.name}-timer")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop: the workers finish the item in hand; what still waits is dropped, and nothing more is taken."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            self._timer.notify_all()
        for thread in self._threads:
            thread.join(timeout)

    @property
    def depth(self) -> int:
        """Keys waiting for a worker (not those being processed or waiting out a back-off)."""
        with self._cond:
            return len(self._ready)

    def idle(self) -> bool:
        """Nothing waiting for a worker, in a worker, or waiting out a back-off."""
        with self._cond:
            return not self._ready and not self._processing and not self._ticket and not self._later

    # ---- the workers ------------------------------------------------------------------------------

    def _take(self) -> tuple[K, V] | None:
        with self._cond:
            while not self._ready and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            key = self._ready.popleft()
            self._processing.add(key)
            return key, self._items.pop(key)

    def _work(self) -> None:
        while (taken := self._take()) is not None:
            key, item = taken
            try:
                if self._acting():  # the fence: a replica that may have lost the Lease drops the item
                    self._process(key, item)
            finally:
                self._done(key)

    def _process(self, key: K, item: V) -> None:
        try:
            self._reconcile(key, item)
        except Exception as exc:  # the one place a reconcile's failure stops: retried after a back-off, capped
            self._failed(key, item, exc)
        else:
            self.limiter.forget(key)
            with self._cond:
                self._ticket.pop(key, None)

    def _failed(self, key: K, item: V, exc: Exception) -> None:
        kind = self._kind(key)
        failures, delay = self.limiter.when(key)
        if delay is None:
            log.error("%s %s failed %d times in a row, dropped until its next event or resync: %s: %s", kind,
                      _name(key), failures, type(exc).__name__, exc)
            metrics.WORKQUEUE_DROPPED.labels(kind).inc()
            with self._cond:
                self._ticket.pop(key, None)
            return
        log.warning("%s %s failed (attempt %d), retried in %.3f s: %s: %s", kind, _name(key), failures, delay,
                    type(exc).__name__, exc)
        metrics.WORKQUEUE_RETRIES.labels(kind).inc()
        with self._cond:
            ticket = self._ticket[key] = next(self._tickets)
            heapq.heappush(self._retries, (self._clock() + delay, ticket, key))
            self._retry_items[ticket] = item  # replayed if the key is forgotten by then (a deletion)
            self._timer.notify()

    def _done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._ready.append(key)
                self._cond.notify()

    # ---- the timer: due retries, the resync ---------------------------------------------------------

    def _time(self) -> None:
        with self._cond:
            while not self._stopping:
                now = self._clock()
                while self._retries and self._retries[0][0] <= now:
                    _, ticket, key = heapq.heappop(self._retries)
                    item = self._retry_items.pop(ticket)
                    if self._ticket.get(key) == ticket:  # else a success or a newer failure superseded it
                        del self._ticket[key]
                        if key not in self._items:
                            self._put(key, self._known.get(key, item))
                while self._later and self._later[0][0] <= now:
                    _, _, key, later = heapq.heappop(self._later)
                    self._put(key, later)
                if now >= self._next_resync:
                    self._next_resync = now + (self.resync_seconds or float("inf"))
                    self._resync_locked()
                due = min(self._retries[0][0] if self._retries else float("inf"),
                          self._later[0][0] if self._later else float("inf"), self._next_resync)
                self._timer.wait(None if due == float("inf") else max(0.0, due - now))


def _name(key: Hashable) -> str:
    return str(key[1]) if isinstance(key, tuple) and len(key) == 2 else str(key)
