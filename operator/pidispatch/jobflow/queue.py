"""The line for a slot: the budget (``slots.py``), the queue policy (``queuepolicy.py``) and each Job's
record in the job table (its place, its Queued mark, its failed starts), held together.

The dispatcher puts an admitted Job in line (:meth:`JobQueue.line_up`), takes Jobs from it for free slots
(the pump: it hands each to its Job's key in the operator's one queue, which starts it),
gives a Job whose start failed back at its place after a back-off (:meth:`JobQueue.retry_later`; the
operator's one back-off, ``reconcile/backoff.py``, capped at ``queuepolicy.START_ATTEMPTS`` failures in a row, after
which the Job leaves the line until the resync puts it back), and frees slots (:meth:`JobQueue.free`). Two
events wake its loops: ``wake`` the pump (a slot freed, an arrival), ``mark`` the Queued marker (an arrival
that may need a mark). Both loops only decide and hand over; the writes are the Job's key's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pidispatch import metrics
from pidispatch.api.views import JobView
from pidispatch.events import emit
from pidispatch.jobflow import queuepolicy
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.slots import Slots
from pidispatch.jobflow.summarize import TERMINAL_PHASES, Queued, Retrying
from pidispatch.jobflow.table import JobTable

log = logging.getLogger("pidispatch.operator")


class JobQueue:
    """The Jobs waiting for a slot of ``slots`` and the Jobs holding one. Thread-safe as the dispatcher uses it:
    each Job's writes run in the queue's worker for that Job's key (docs/architecture.md#event-path); the
    pump's and the marker's threads only read, and hand a Job its slot or its mark through that key."""

    def __init__(self, slots: Slots, table: JobTable, cluster: Cluster, monotonic: Callable[[], float]) -> None:
        self.slots, self.table, self.cluster, self._monotonic = slots, table, cluster, monotonic
        self.wake, self.mark = threading.Event(), threading.Event()

    def line_up(self, job: JobView, order: tuple[str, str]) -> None:
        """Put an admitted Job in line at ``order`` (in its key's worker). Marked Queued only if it is
        still waiting a moment later (:meth:`mark_queued`): a Job that gets a slot within the grace goes
        straight to Running, one write fewer."""
        name = job.name
        self.table.line_up(name, order)
        self.slots.enqueue(name, order)
        if queuepolicy.marks_later(self.slots.position(name), self.slots.free, job.phase):
            self.table.wait_unmarked(name, (self._monotonic(), self.cluster.clock()))
            self.mark.set()

    def next_mark_in(self, handed: set[str]) -> float:
        """The marker's wait: until the next Job's mark is due (an arrival wakes it sooner); ``handed``: the
        Jobs whose mark is handed to their key already, not waited for again."""
        unmarked = self.table.unmarked()
        return queuepolicy.next_mark_in([t for name, t in unmarked.items() if name not in handed], self._monotonic())

    def due_marks(self, handed: set[str]) -> list[str]:
        """The Jobs that have waited for a slot longer than the grace, their mark not yet handed (the marker's
        turn: it hands each to its Job's key, which writes it with :meth:`mark_queued`)."""
        return [name for name in queuepolicy.due_for_mark(self.table.unmarked(), self._monotonic())
                if name not in handed]

    def mark_queued(self, name: str) -> None:
        """Write ``Queued`` for ``name``, still waiting for a slot (in its key's worker)."""
        marked = self.table.take_unmarked(name)
        if marked is None or self.slots.position(name) is None:
            return  # it got its slot, or went away, in the meantime
        job = self.table.body(name) or self.cluster.job(name)
        if job is None or job.phase in TERMINAL_PHASES | {"Queued", "Running"}:
            return
        self.table.keep_body(self.cluster.record(job, Queued(marked[1], self.slots.capacity)), "Queued")

    def next_ready_in(self) -> float:
        """The pump's wait when nothing wakes it: until the earliest back-off ends, at most 5 s."""
        ready_in = self.slots.next_ready_in()
        return 5.0 if ready_in is None else min(5.0, max(0.05, ready_in))

    def retry_later(self, name: str, exc: Exception) -> bool:
        """A start that failed for a passing reason (GitHub or apiserver outage, an old Pod of the name not
        yet collected): back in line at its place after a back-off, while the Jobs behind it start.
        True when ``StartRetrying`` is to be written (:meth:`note_retrying`): only for the first failure in
        a row, so a long outage costs one write.

        Past ``queuepolicy.START_ATTEMPTS`` failures in a row the Job is dropped from the line instead (its slot freed,
        its count reset; an error line and ``pidispatch_workqueue_dropped_total{kind="JobStart"}``): the
        resync lines it up again, as a controller-runtime key dropped after its last retry comes back."""
        failures = self.table.failed_start(name)
        delay = queuepolicy.START_BACKOFF.delay(failures)
        if delay is None:
            log.error("starting job %s failed %d times in a row: out of line until the resync puts it back: %s: %s",
                      name, failures, type(exc).__name__, exc)
            metrics.WORKQUEUE_DROPPED.labels("JobStart").inc()
            self.table.start_succeeded(name)  # resets its count of failures in a row: the next round starts at 1 s
            self.table.drop_body(name)
            self.free(name)
            return False
        log.warning("starting job %s failed (attempt %d), retried in %.0f s: %s", name, failures, delay, exc)
        metrics.WORKQUEUE_RETRIES.labels("JobStart").inc()
        emit("job_start_retrying", job=name, attempt=failures, delaySeconds=delay, error=type(exc).__name__)
        self.table.drop_body(name)  # the retry reads the Job afresh
        self.slots.defer(name, self.table.order(name), delay)
        return queuepolicy.writes_retrying(failures)

    def note_retrying(self, name: str, exc: Exception) -> None:
        job = self.cluster.job(name)
        if job is None or self.slots.position(name) is None or job.phase in TERMINAL_PHASES | {"Running"}:
            return  # gone, or started by now
        self.cluster.record(job, Retrying(queuepolicy.retrying_message(exc)))

    def free(self, name: str) -> None:
        """Free ``name``'s slot (or its place in line), and wake the pump for the next Job if that changed."""
        if self.slots.release(name):
            self.wake.set()

    def gauges(self) -> None:
        counts = self.table.phase_counts()
        for phase in ("Pending", "Refused", "Queued", "Running", "Succeeded", "Failed"):
            metrics.JOBS.labels(phase).set(counts.get(phase, 0))
        metrics.QUEUE_DEPTH.set(self.slots.queued)
        metrics.SLOTS_IN_USE.set(self.slots.running)

