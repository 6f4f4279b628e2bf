"""The operator's own watch of its Jobs, in place of kopf's: started when this replica leads, stopped with it.

Why not kopf's: a Job's event goes straight from the watch's connection to ``Dispatcher.on_job`` through
one queue, without kopf's asyncio loop, its per-object streams and its executor in between (the latency
is docs/benchmarks.md's "Job → Pod"). With leadership the operator's own (``handlers/leadership.py``),
kopf's peering is no longer a reason to keep the Jobs in kopf: a standby watches no Jobs at all.

Each Job's events are handled in order, and different Jobs in parallel: an event goes to one of
``workers`` threads chosen by the Job's name, as kopf gives each object its own worker. A slow step (a
checkout resolution, staging, a Pod create that retries) holds up only the Jobs that share its worker.
The list+watch itself (resourceVersion, bookmarks, 410 → relist, back-off) is ``pidispatch/election/watch.py``.
"""

from __future__ import annotations

import logging
import queue
import threading
import zlib
from collections.abc import Callable
from typing import Any

from pidispatch.election.watch import ListWatch
from pidispatch.kubeapi import Api

log = logging.getLogger("pidispatch.operator")

OnJob = Callable[[str | None, dict[str, Any]], None]
_STOP = object()


class JobWatch:
    """Watches the Jobs of ``path`` and hands each event to ``on_job`` on the Job's own worker, while
    ``acting()`` holds (the fence: a replica that may have lost the Lease drops events at once)."""

    def __init__(self, api: Api, path: str, on_job: OnJob, acting: Callable[[], bool] = lambda: True, *,
                 workers: int = 8, server_timeout: int = 300, client_timeout: float = 330.0) -> None:
        self._on_job, self._acting = on_job, acting
        self._queues: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in range(workers)]
        self._threads: list[threading.Thread] = []
        self.watch = ListWatch(api, path, self._hand_on, server_timeout=server_timeout,
                               client_timeout=client_timeout, name="job-watch")

    def start(self) -> None:
        """Start the workers, then the list+watch (its first list delivers every Job, as kopf's did)."""
        for i, q in enumerate(self._queues):
            thread = threading.Thread(target=self._work, args=(q,), name=f"pidispatch-jobs-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.watch.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching; the workers finish the event in hand and drop the rest.

        The watch's thread is not waited for: it may sit in a read until the next bookmark (about a minute),
        and the Lease is released only after this returns (a planned stop hands over at once). It delivers
        nothing more once stopping, and it is a daemon thread."""
        self.watch.stop(timeout=0)
        for q in self._queues:
            q.put(_STOP)
        for thread in self._threads:
            thread.join(timeout)

    def _hand_on(self, event_type: str | None, body: dict[str, Any]) -> None:
        name = (body.get("metadata") or {}).get("name", "")
        self._queues[zlib.crc32(name.encode()) % len(self._queues)].put((event_type, body))

    def _work(self, q: queue.SimpleQueue[Any]) -> None:
        while (item := q.get()) is not _STOP:
            if self.watch.stopping.is_set() or not self._acting():
                continue
            event_type, body = item
            try:
                self._on_job(event_type, body)
            except Exception:  # one Job's failure must not stop its worker (kopf logged and went on too)
                log.exception("handling a %s event of Job %s failed", event_type or "listed",
                              (body.get("metadata") or {}).get("name"))
