"""The operator's one event path: every kind's watch event becomes a key ``(kind, name)`` in one workqueue
(``reconcile/workqueue.py``), and the queue's workers hand it to the dispatcher's entry point for that kind.

Who feeds it: the operator's own Job watch (``handlers/jobwatch.py``) and kopf's Pod, SessionKey and
Trigger handlers (``handlers/register.py``), which only call :meth:`Feed.event` (docs/architecture.md#event-path).
What each kind's events mean here, level-triggered: the newest body of a key is the one reconciled, and a
resync replays every live key's newest body, but a SessionKey's (the store may hold 100 000 keys; their bodies
would be the operator's memory, and the SessionKey refresh reads them a page at a time instead) and a Pod's (the
dispatcher's resync reads the Pod of each running Job afresh; a burst's Pods were 20 MiB kept). Deletions are
not replayed: a deleted Job's, Trigger's or SessionKey's key is reconciled once and then forgotten; a Pod's
deletion is only forgotten (the dispatcher never acted on it, and a vanished Pod of a running Job is the
dispatcher's resync's to find).

The dispatcher hands work back to a Job's key through the feed (:meth:`Feed.job`, :meth:`Feed.job_after`): its
pump gives a Job a slot, its marker a ``Queued`` mark, a Pod's worker an ended Pod, its resync a listing; the
key's item is then a bare turn (:attr:`Event.body` ``None``), and every Job key's reconcile ends with the
dispatcher's ``job_turn``, which does that work in the key's worker. So every step on a Job runs in its key's
worker, one at a time (docs/architecture.md#event-path).

One thing a coalescing queue could lose, kept: a Job deleted and re-created under its name while the
deletion still waited. The deleted uid travels with the newer body (:attr:`Event.gone`) and is reconciled as
a deletion first, so its staging and its uid-keyed state go as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from pidispatch.reconcile.workqueue import WorkQueue

log = logging.getLogger("pidispatch.operator")

Kind = Literal["Job", "Pod", "SessionKey", "Trigger"]
Key = tuple[Kind, str]
# An object as the API sent it: this is the edge, where nothing reads it; each entry point reads it once into
# its typed view (``api/views.py``).
Body = dict[str, Any]

WORKERS = 8  # as many as the Job watch had; a slow step holds up only its own key, and a worker
# Replays every live key's last body this often. The dispatcher's own resync (30 s) reads the Jobs and Triggers
# afresh from the apiserver; this one brings back a key the queue dropped (attempt cap) or an event lost in
# between, for every kind.
RESYNC_SECONDS = 300.0


@dataclass(frozen=True)
class Event:
    """A watch event as the queue carries it: its type (``None``: listed), the object's body as the API sent
    it (read into its typed view by the dispatcher's entry point; ``None``: a Job's bare turn, handed back by
    the dispatcher), and for a Job the uids deleted while this body's key waited."""

    type: str | None
    body: Body | None
    gone: tuple[str, ...] = ()

    @property
    def uid(self) -> str:
        return str(((self.body or {}).get("metadata") or {}).get("uid") or "")


TURN = Event(None, None)  # a Job's key queued for its turn alone: no newer body


class Reconcilers(Protocol):
    """The dispatcher's entry points, one per kind (``jobflow/dispatcher.py``)."""

    def on_job(self, event_type: str | None, body: Body) -> None: ...
    def on_pod(self, pod: Body) -> None: ...
    def on_sessionkey(self, event_type: str | None, body: Body) -> None: ...
    def on_trigger(self, body: Body) -> None: ...
    def on_trigger_deleted(self, name: str) -> None: ...
    def job_turn(self, name: str) -> None: ...
    def attach(self, keys: Feed) -> None: ...


def without_managed_fields(body: Body) -> Body:
    """``body`` without ``metadata.managedFields`` (server-side apply's bookkeeping, which nothing here reads):
    it is about half of a Pod's or a Job's body as the API sends it, and the queue keeps the last body of every
    live Job and Trigger for its resync. A shallow copy: the caller's body is left as it was."""
    meta = body.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return body
    return {**body, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def merge(waiting: Event, new: Event) -> Event:
    """What a new event makes of one still waiting for its key's turn: the new one, carrying the uids of Jobs
    deleted in between (a deletion of another uid than the new body's). A bare turn leaves the waiting event
    as it is (every Job key's reconcile ends with its turn)."""
    if new.body is None:
        return waiting
    gone = waiting.gone
    if waiting.type == "DELETED" and waiting.uid and waiting.uid != new.uid:
        gone = (*gone, waiting.uid)
    return replace(new, gone=gone) if gone else new


class Feed:
    """The queue of every kind, and how each kind's events enter it and leave it for the dispatcher (which
    hands its work back to a key through it: built, it is attached to ``reconcilers``)."""

    deferring = True  # job_after returns at once: the key comes back later, no worker waits

    def __init__(self, reconcilers: Reconcilers, *, acting: Callable[[], bool] = lambda: True,
                 workers: int = WORKERS, resync_seconds: float | None = RESYNC_SECONDS) -> None:
        self._to = reconcilers
        self.queue: WorkQueue[Key, Event] = WorkQueue(self._reconcile, name="events", workers=workers,
                                                      resync_seconds=resync_seconds, acting=acting,
                                                      kind=lambda key: key[0], merge=merge)
        reconcilers.attach(self)

    def start(self) -> None:
        self.queue.start()

    def stop(self) -> None:
        self.queue.stop()

    def event(self, kind: Kind, event_type: str | None, body: Body) -> None:
        """Queue one watch event of ``kind``; nothing is done here (the caller is a watch's thread)."""
        body = without_managed_fields(body)
        key: Key = (kind, str((body.get("metadata") or {}).get("name") or ""))
        if event_type != "DELETED":
            # A SessionKey's body is not kept for the resync: there may be 100 000 of them, and the refresh
            # (``jobflow/timers.py``) already reads them a page at a time, never all at once. Nor a Pod's: the
            # dispatcher's resync GETs the Pod of every running Job afresh, and 500 kept Pods were 20 MiB of a
            # 500-Job burst's peak (docs/benchmarks.md#issue-41-one-event-path-measured-side-by-side-with-main).
            # Their retries are kept.
            self.queue.add(key, Event(event_type, body), remember=kind not in ("SessionKey", "Pod"))
        elif kind == "Pod":
            self.queue.discard(key)
        else:
            self.queue.add(key, Event(event_type, body), remember=False)

    def job(self, name: str) -> None:
        """Queue the Job ``name``'s key for its turn (what the dispatcher handed it); a resync replays its body
        as before."""
        self.queue.add(("Job", name), TURN, remember=None)

    def job_after(self, name: str, seconds: float) -> None:
        """Queue the Job ``name``'s key for its turn once ``seconds`` have passed (a wait that holds no worker)."""
        self.queue.add_after(("Job", name), TURN, seconds)

    def trigger(self, body: Body) -> None:
        """A Trigger as listed (the dispatcher's resync): reconciled in its key's worker."""
        self.event("Trigger", None, body)

    def _reconcile(self, key: Key, event: Event) -> None:
        kind, name = key
        if kind == "Job":
            try:
                for uid in event.gone:
                    self._to.on_job("DELETED", {"metadata": {"name": name, "uid": uid}})
                if event.body is not None:
                    self._to.on_job(event.type, event.body)
            finally:  # a failing event (retried) must not hold back a start or an end handed to the Job meanwhile
                self._to.job_turn(name)
        elif event.body is None:
            return  # only a Job's key is ever queued for a bare turn
        elif kind == "Pod":
            self._to.on_pod(event.body)
        elif kind == "SessionKey":
            self._to.on_sessionkey(event.type, event.body)
        elif event.type == "DELETED":
            self._to.on_trigger_deleted(name)
        else:
            self._to.on_trigger(event.body)
