"""The operator's own watch of its Jobs, in place of kopf's: started when this replica leads, stopped with it.

Why not kopf's: a Job's event goes straight from the watch's connection into the operator's one queue
(``handlers/feed.py``), without kopf's asyncio loop, its per-object streams and its executor in between (the
latency is docs/benchmarks.md's "Job → Pod"). With leadership the operator's own (``handlers/leadership.py``),
kopf's peering is no longer a reason to keep the Jobs in kopf: a standby watches no Jobs at all.

Each Job's events are handled in order, and different Jobs in parallel, by the queue: a Job is its key, never
in two workers at once (docs/architecture.md#event-path). The list+watch itself (resourceVersion, bookmarks,
410 → relist, back-off) is ``pidispatch/election/watch.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from pidispatch.election.watch import ListWatch
from pidispatch.handlers.feed import Body
from pidispatch.kubeapi import Api

Deliver = Callable[[str | None, Body], None]


class JobWatch:
    """Watches the Jobs of ``path`` and hands each event (type, body) to ``deliver``, which only queues it."""

    def __init__(self, api: Api, path: str, deliver: Deliver, *, server_timeout: int = 300,
                 client_timeout: float = 330.0) -> None:
        self.watch = ListWatch(api, path, deliver, server_timeout=server_timeout, client_timeout=client_timeout,
                               name="job-watch")

    def start(self) -> None:
        """Start the list+watch (its first list delivers every Job, as kopf's did)."""
        self.watch.start()

    def stop(self) -> None:
        """Stop watching; what it queued already is the queue's to finish or drop (``Feed.stop``).

        The watch's thread is not waited for: it may sit in a read until the next bookmark (about a minute),
        and the Lease is released only after this returns (a planned stop hands over at once). It delivers
        nothing more once stopping, and it is a daemon thread."""
        self.watch.stop(timeout=0)
