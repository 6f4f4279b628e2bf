"""How work reaches a Job's key in the operator's one queue (docs/architecture.md#event-path).

A step on a Job runs only in the queue's worker for that Job's key. What another thread decides for a Job (the
pump a slot, the Queued marker a mark, a Pod's worker the Pod's end, the resync a listing) it puts in the
:class:`Inbox` and then queues the Job's key through :class:`Keys` (the operator's queue, ``handlers/feed.py``;
:class:`InPlace` without one); the key's worker takes it on its turn (``Dispatcher.job_turn``). Per-key
serialisation is then all that keeps two paths off one Job: no lock per Job.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from pidispatch.api.views import JobView
from pidispatch.jobflow.podview import PodView

# A listed Trigger as the API sent it, handed on to its key unread (its reconcile reads it into its view).
Body = dict[str, Any]


@dataclass
class Handed:
    """Work handed to one Job's key by another thread, not yet done by that key's worker."""

    listed: JobView | None = None  # the resync's listing (its turn finds what a lost watch event would have said)
    granted: bool = False  # the pump gave it a slot: its start is due
    marked: bool = False  # the marker found it waiting longer than the grace: its ``Queued`` is due
    pod_seen: bool = False  # a Pod of it ended, never started, or vanished (``pod`` ``None``): its end is due
    pod: PodView | None = None

    def empty(self) -> bool:
        return self == Handed()

    def merged(self, newer: Handed) -> Handed:
        """This (given back undone) with what was handed since: the newer listing or Pod wins."""
        return Handed(listed=newer.listed if newer.listed is not None else self.listed,
                      granted=self.granted or newer.granted, marked=self.marked or newer.marked,
                      pod_seen=self.pod_seen or newer.pod_seen, pod=newer.pod if newer.pod_seen else self.pod)


class Inbox:
    """What other threads hand to a Job's key (docs/architecture.md#event-path): the pump a slot, the marker a
    ``Queued`` mark, a Pod's worker the Pod's end, the resync its listing. They put it here and queue the Job's
    key; the key's worker takes it on its turn and does it, so every step on a Job runs in that one worker.
    Also the deadlines of the ledger waits (``usage.py``): a Job's end put off until the gateway's ledger settles.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._work: dict[str, Handed] = {}
        self._settle: dict[str, float] = {}  # Job name -> wall time its end stops waiting for the ledger

    def _hand(self, name: str, handed: Handed) -> None:
        with self._guard:
            held = self._work.get(name)
            self._work[name] = held.merged(handed) if held is not None else handed

    def listed(self, job: JobView) -> None:
        self._hand(job.name, Handed(listed=job))

    def grant(self, name: str) -> None:
        self._hand(name, Handed(granted=True))

    def mark(self, name: str) -> None:
        self._hand(name, Handed(marked=True))

    def pod(self, name: str, pod: PodView | None) -> None:
        self._hand(name, Handed(pod_seen=True, pod=pod))

    def take(self, name: str) -> Handed | None:
        with self._guard:
            return self._work.pop(name, None)

    def give_back(self, name: str, undone: Handed) -> None:
        """Put back what a turn did not do (it failed, or waits): anything handed since is newer and wins."""
        if undone.empty():
            return
        with self._guard:
            newer = self._work.get(name)
            self._work[name] = undone.merged(newer) if newer is not None else undone

    def marking(self) -> set[str]:
        """The Jobs whose ``Queued`` mark is handed and not yet done (the marker does not hand them again)."""
        with self._guard:
            return {name for name, handed in self._work.items() if handed.marked}

    def settle_until(self, name: str, until: float) -> float:
        """The deadline of ``name``'s ledger wait: ``until`` if none is running, else the first one (the cap)."""
        with self._guard:
            return self._settle.setdefault(name, until)

    def settled(self, name: str) -> None:
        with self._guard:
            self._settle.pop(name, None)

    def drop(self, name: str) -> None:
        """The Job is gone: nothing handed to it is left to do (a listing of its name comes again if it returns)."""
        with self._guard:
            self._work.pop(name, None)
            self._settle.pop(name, None)

    def __len__(self) -> int:
        with self._guard:
            return len(self._work) + len(self._settle)


class Keys(Protocol):
    """Where the dispatcher hands work back to a key of the operator's one queue (``handlers/feed.py``)."""

    deferring: bool  # whether :meth:`job_after` returns at once (a queue), so a wait need not hold the caller

    def job(self, name: str) -> None:
        """Queue the Job ``name``'s key: its worker takes what was handed to it (:meth:`Dispatcher.job_turn`)."""

    def job_after(self, name: str, seconds: float) -> None:
        """The same, once ``seconds`` have passed."""

    def trigger(self, body: Body) -> None:
        """Queue a listed Trigger's key."""


class Turns(Protocol):
    """The dispatcher's side of a key's turn (``dispatcher.py``)."""

    def job_turn(self, name: str) -> None: ...
    def on_trigger(self, body: Body) -> None: ...


class InPlace:
    """No queue (a test driving the dispatcher by hand, without threads): a key's turn runs at once, in the caller."""

    deferring = False

    def __init__(self, dispatcher: Turns) -> None:
        self._d = dispatcher

    def job(self, name: str) -> None:
        self._d.job_turn(name)

    def job_after(self, name: str, seconds: float) -> None:
        time.sleep(seconds)
        self._d.job_turn(name)

    def trigger(self, body: Body) -> None:
        self._d.on_trigger(body)
