"""The job table: which Job (uid) each name stands for now, and what the operator knows of it.

Names repeat (a Job deleted and re-created under its name is another Job), uids never do, and kopf
orders events per uid, not per name: the old Job's late events may arrive after the new one's. So
every per-name fact is tied to the uid it belongs to, and uids of Jobs deleted or superseded are
*retired*: their late events are ignored.

* :meth:`claim` ties a name to the uid of an event's body (one fresh read when the name is re-used);
* :meth:`adopt` ties it to a uid a fresh read found (the start in progress keeps its slot);
* :meth:`retire` remembers a uid as gone (bounded, oldest forgotten first);
* :meth:`forget` drops what is kept under a name for one uid.

Thread-safe for the dispatcher's use: each Job's steps run under that Job's lock, and the maps here
are only read or changed whole-entry.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pidispatch.api.views import JobView
from pidispatch.jobflow.summarize import TERMINAL_PHASES

RETIRED_UIDS_KEPT = 4096  # uids of deleted or superseded Jobs remembered, so their late events are ignored


class JobTable:
    """Per-name facts of the Jobs one operator process tracks, each tied to a uid."""

    def __init__(self, current_uid: Callable[[str], str | None]) -> None:
        # A fresh read of the uid that has a name now (``None``: no Job of that name): consulted only
        # when an event's uid differs from the one the name is tied to.
        self._current_uid = current_uid
        self.uids: dict[str, str] = {}
        self.phases: dict[str, str] = {}
        # The latest body the watch delivered for each Job that may still start, so its start need not
        # read it again; trusted only as far as the Running write's resourceVersion confirms it.
        self.bodies: dict[str, JobView] = {}
        # Uids of the Jobs listed at start-up: an earlier operator process may have created their Pods.
        self.preexisting: set[str] = set()
        # Jobs whose Pod this process created and whose end it has not yet recorded → their session key.
        self.in_flight: dict[str, str] = {}
        self._retired: OrderedDict[str, None] = OrderedDict()
        self._guard = threading.Lock()

    def claim(self, name: str, uid: str | None) -> bool:
        """Tie ``name`` to ``uid``; False when the body is not of the Job that has the name now.

        A listed body (resync) may be older than the watch's, so a uid other than the one tied is
        checked against a fresh read. If it is the current Job, the old one is gone (two Jobs never
        share a name at once): its facts are forgotten as its DELETED would, and its uid retired so
        that its late events, DELETED included, no longer touch the new Job's.
        """
        if not uid:
            return True
        if self.is_retired(uid):
            return False
        held = self.uids.get(name)
        if held is None or held == uid:
            self.uids[name] = uid
            return True
        if self._current_uid(name) != uid:
            return False
        self.forget(name, held)
        self.uids[name] = uid
        return True

    def adopt(self, name: str, uid: str) -> None:
        """A fresh read found ``uid`` under ``name`` (the current Job, newer than any event handled): tie the
        name to it. Unlike a superseding event this keeps the slot and the place in line, which the
        start in progress now holds for this very Job."""
        held = self.uids.get(name)
        if held == uid:
            return
        if held is not None:
            self.retire(held)
            self.phases.pop(name, None)
            self.in_flight.pop(name, None)
        with self._guard:
            self._retired.pop(uid, None)
        self.uids[name] = uid

    def retire(self, uid: str) -> None:
        with self._guard:
            self._retired[uid] = None
            while len(self._retired) > RETIRED_UIDS_KEPT:
                self._retired.popitem(last=False)

    def is_retired(self, uid: str) -> bool:
        with self._guard:
            return uid in self._retired

    def forget(self, name: str, uid: str | None) -> None:
        """Drop what is kept under ``name`` for the Job ``uid`` (deleted, or superseded by a new Job)."""
        if uid:
            self.retire(uid)
        kept = self.bodies.get(name)
        if kept is None or kept.uid in (uid, ""):
            self.bodies.pop(name, None)
        self.uids.pop(name, None)
        self.phases.pop(name, None)
        self.in_flight.pop(name, None)

    def owns(self, name: str, uid: str) -> bool:
        """True when ``name`` is tied to ``uid`` or to nothing (a DELETED of the name's own Job)."""
        held = self.uids.get(name)
        return held is None or held == uid

    def drop_uid(self, name: str, uid: str) -> None:
        """A DELETED of a Job whose name another Job has taken over: only that uid's traces go."""
        self.preexisting.discard(uid)
        self.retire(uid)
        kept = self.bodies.get(name)
        if kept is not None and kept.uid == uid:
            self.bodies.pop(name, None)

    def keep_body(self, job: JobView, phase: str | None) -> None:
        """Remember the watch's latest body of a Job that may still start; forget it once it cannot.

        A body whose uid differs from the one kept is not trusted either way: the entry is dropped
        and the start reads the Job instead.
        """
        name, uid = job.name, job.uid
        kept = self.bodies.get(name)
        if phase in TERMINAL_PHASES or phase == "Running":
            self.bodies.pop(name, None)
        elif kept is None or kept.uid == uid:
            self.bodies[name] = job
        else:
            self.bodies.pop(name, None)

    def track(self, name: str, phase: str | None) -> None:
        self.phases[name] = phase or "Pending"

    def ended(self, name: str) -> bool:
        """True when this process recorded (or saw) the Job's terminal phase."""
        return self.phases.get(name) in TERMINAL_PHASES

    def phase_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for phase in list(self.phases.values()):
            counts[phase] = counts.get(phase, 0) + 1
        return counts


class NameLocks:
    """One lock per Job name, kept only while someone holds it or waits for it.

    A lock carries no state of its own, so the map need not outlive its users: each :meth:`hold`
    counts itself in under the guard before it waits and out after it releases, and the last one out
    drops the entry. Two holders of one name always overlap in the map (the second counted itself
    in while the first was still counted), so they share one lock; a name nobody uses costs nothing,
    and the map stays as small as the set of Jobs being acted on, however many Jobs come and go.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, list[int]]] = {}  # name -> (lock, [holders and waiters])

    @contextmanager
    def hold(self, name: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.setdefault(name, (threading.Lock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._guard:
                users[0] -= 1
                if users[0] == 0:
                    del self._locks[name]

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)
