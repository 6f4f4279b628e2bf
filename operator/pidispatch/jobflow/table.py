"""The job table: which Job (uid) each name stands for now, and what the operator knows of it.

One :class:`JobRecord` per name holds all of it: the uid, the phase this process saw, the watch's
latest body, the place in line and the queue policy's counts, the session key in flight. The slot
itself is the budget's (``slots.py``); everything else about a Job is here, read and changed through
the table's methods.

Names repeat (a Job deleted and re-created under its name is another Job), uids never do, and kopf
orders events per uid, not per name: the old Job's late events may arrive after the new one's. So
every per-name fact is tied to the uid it belongs to, and uids of Jobs deleted or superseded are
*retired*: their late events are ignored.

* :meth:`claim` ties a name to the uid of an event's body (one fresh read when the name is re-used);
* :meth:`adopt` ties it to a uid a fresh read found (the start in progress keeps its slot);
* :meth:`retire` remembers a uid as gone (bounded, oldest forgotten first);
* :meth:`forget` drops what is kept under a name for one uid.

Thread-safe for the dispatcher's use: a Job's record is changed only by the queue's worker for that Job's
key (one at a time: docs/architecture.md#event-path); other threads only read (the gauges, the marker, the
SessionKey refresh), whole-entry. What other threads hand to a Job goes through ``handoff.Inbox``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from pidispatch.api.views import JobView
from pidispatch.jobflow.summarize import TERMINAL_PHASES

RETIRED_UIDS_KEPT = 4096  # uids of deleted or superseded Jobs remembered, so their late events are ignored


@dataclass
class JobRecord:
    """What this process knows of the Job that has ``name`` now (all of it ``None`` or 0 when unknown)."""

    name: str
    uid: str | None = None  # the Job (uid) the name stands for now
    phase: str | None = None  # the phase this process recorded or saw last (``None``: not tracked)
    # The latest body the watch delivered while the Job may still start, so its start need not read it
    # again; trusted only as far as the Running write's resourceVersion confirms it.
    body: JobView | None = None
    order: tuple[str, str] | None = None  # its place in the FIFO (creation time, name), once admitted
    # Waiting for a slot, not yet marked Queued: (monotonic time queued, wall-clock stamp for the status).
    unmarked_since: tuple[float, str] | None = None
    failures: int = 0  # failed starts in a row, for the back-off (``queuepolicy.py``)
    in_flight: str | None = None  # the session key of a Pod this process created, its end not yet recorded

    def empty(self) -> bool:
        return self == JobRecord(self.name)


class JobTable:
    """Per-name facts of the Jobs one operator process tracks, each tied to a uid."""

    def __init__(self, current_uid: Callable[[str], str | None]) -> None:
        # A fresh read of the uid that has a name now (``None``: no Job of that name): consulted only
        # when an event's uid differs from the one the name is tied to.
        self._current_uid = current_uid
        self._records: dict[str, JobRecord] = {}
        # Uids of the Jobs listed at start-up: an earlier operator process may have created their Pods.
        self._preexisting: set[str] = set()
        self._retired: OrderedDict[str, None] = OrderedDict()
        self._guard = threading.Lock()

    def _record(self, name: str) -> JobRecord:
        return self._records.setdefault(name, JobRecord(name))

    def _get(self, name: str) -> JobRecord:
        return self._records.get(name) or JobRecord(name)

    def _tidy(self, name: str) -> None:
        record = self._records.get(name)
        if record is not None and record.empty():
            self._records.pop(name, None)

    # ---- identity: which uid a name stands for ---------------------------------------------------

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
        held = self._get(name).uid
        if held is None or held == uid:
            self._record(name).uid = uid
            return True
        if self._current_uid(name) != uid:
            return False
        self.forget(name, held)
        self._record(name).uid = uid
        return True

    def adopt(self, name: str, uid: str) -> None:
        """A fresh read found ``uid`` under ``name`` (the current Job, newer than any event handled): tie the
        name to it. Unlike a superseding event this keeps the slot and the place in line, which the
        start in progress now holds for this very Job."""
        held = self._get(name).uid
        if held == uid:
            return
        record = self._record(name)
        if held is not None:
            self.retire(held)
            record.phase = None
            record.in_flight = None
        with self._guard:
            self._retired.pop(uid, None)
        record.uid = uid

    def retire(self, uid: str) -> None:
        with self._guard:
            self._retired[uid] = None
            while len(self._retired) > RETIRED_UIDS_KEPT:
                self._retired.popitem(last=False)

    def is_retired(self, uid: str) -> bool:
        with self._guard:
            return uid in self._retired

    def forget(self, name: str, uid: str | None, *, place_too: bool = False) -> None:
        """Drop what is kept under ``name`` for the Job ``uid`` (deleted, or superseded by a new Job).

        ``place_too``: its place in line and the queue policy's counts as well (a DELETED). A
        superseding Job keeps them, as it keeps the slot (``slots.py`` knows names, not uids).
        """
        if uid:
            self.retire(uid)
        record = self._records.get(name)
        if record is None:
            return
        if record.body is None or record.body.uid in (uid, ""):
            record.body = None
        record.uid = record.phase = record.in_flight = None
        if place_too:
            record.order = record.unmarked_since = None
            record.failures = 0
        self._tidy(name)

    def owns(self, name: str, uid: str) -> bool:
        """True when ``name`` is tied to ``uid`` or to nothing (a DELETED of the name's own Job)."""
        held = self._get(name).uid
        return held is None or held == uid

    def drop_uid(self, name: str, uid: str) -> None:
        """A DELETED of a Job whose name another Job has taken over: only that uid's traces go."""
        self._preexisting.discard(uid)
        self.retire(uid)
        record = self._records.get(name)
        if record is not None and record.body is not None and record.body.uid == uid:
            record.body = None
            self._tidy(name)

    # ---- Jobs an earlier process may have started -------------------------------------------------

    def note_preexisting(self, uids: set[str]) -> None:
        """The uids of the Jobs listed at start-up that had not ended."""
        self._preexisting = set(uids)

    def listed_at_start(self, uid: str) -> bool:
        return uid in self._preexisting

    def unlist(self, uid: str) -> None:
        """The Job reads ``Running`` (or is gone): no need to look for an earlier process's Pod again."""
        self._preexisting.discard(uid)

    # ---- the watch's body ------------------------------------------------------------------------

    def keep_body(self, job: JobView, phase: str | None) -> None:
        """Remember the watch's latest body of a Job that may still start; forget it once it cannot.

        A body whose uid differs from the one kept is not trusted either way: the entry is dropped
        and the start reads the Job instead.
        """
        name, uid = job.name, job.uid
        kept = self._get(name).body
        if phase in TERMINAL_PHASES or phase == "Running":
            self.drop_body(name)
        elif kept is None or kept.uid == uid:
            self._record(name).body = job
        else:
            self.drop_body(name)

    def body(self, name: str) -> JobView | None:
        return self._get(name).body

    def drop_body(self, name: str, only: JobView | None = None) -> None:
        """Forget the kept body (``only``: if it is still that very body, not a newer one)."""
        record = self._records.get(name)
        if record is not None and (only is None or record.body is only):
            record.body = None
            self._tidy(name)

    # ---- phase -----------------------------------------------------------------------------------

    def track(self, name: str, phase: str | None) -> None:
        self._record(name).phase = phase or "Pending"

    def phase(self, name: str) -> str | None:
        """The phase this process recorded or saw last, ``None`` when it tracks none."""
        return self._get(name).phase

    def ended(self, name: str) -> bool:
        """True when this process recorded (or saw) the Job's terminal phase."""
        return self._get(name).phase in TERMINAL_PHASES

    def phase_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in list(self._records.values()):
            if record.phase is not None:
                counts[record.phase] = counts.get(record.phase, 0) + 1
        return counts

    # ---- the queue: place in line, Queued mark, failed starts ---------------------------------------

    def line_up(self, name: str, order: tuple[str, str]) -> None:
        self._record(name).order = order

    def order(self, name: str) -> tuple[str, str]:
        """Its place in the FIFO; a Job never admitted by this process sorts by its name alone."""
        return self._get(name).order or ("", name)

    def wait_unmarked(self, name: str, since: tuple[float, str]) -> None:
        """It waits for a slot, to be marked Queued later; an earlier wait already noted is kept."""
        record = self._record(name)
        if record.unmarked_since is None:
            record.unmarked_since = since

    def unmarked(self) -> dict[str, float]:
        """The Jobs waiting unmarked: name → monotonic time they started waiting."""
        return {r.name: r.unmarked_since[0] for r in list(self._records.values()) if r.unmarked_since is not None}

    def take_unmarked(self, name: str) -> tuple[float, str] | None:
        """Stop counting ``name`` as waiting unmarked; when it started waiting, if it was."""
        record = self._records.get(name)
        if record is None:
            return None
        since, record.unmarked_since = record.unmarked_since, None
        self._tidy(name)
        return since

    def failed_start(self, name: str) -> int:
        """One more failed start in a row; how many now."""
        record = self._record(name)
        record.failures += 1
        return record.failures

    def start_succeeded(self, name: str) -> None:
        record = self._records.get(name)
        if record is not None:
            record.failures = 0
            self._tidy(name)

    # ---- the Pod in flight -----------------------------------------------------------------------

    def fly(self, name: str, key: str) -> None:
        """This process created ``name``'s Pod for the session key ``key``; its end is not yet recorded."""
        self._record(name).in_flight = key

    def land(self, name: str) -> None:
        record = self._records.get(name)
        if record is not None:
            record.in_flight = None
            self._tidy(name)

    def keys_in_flight(self) -> set[str]:
        return {r.in_flight for r in list(self._records.values()) if r.in_flight is not None}
