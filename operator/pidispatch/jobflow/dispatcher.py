"""The dispatcher: owns the threads, the job table and the queue, and calls the steps in order.

It holds no decisions of its own. For one delivery it goes, top to bottom:

1. ``on_job`` → :meth:`admit` (``admit.py``: refusals before any spend, their comment) → the FIFO queue;
2. a free slot → :meth:`start_job` (in the Job event's thread, else the pump's) → ``start.launch`` → ``Running``;
3. ``on_pod`` → :meth:`complete` (``complete.py``: promote at most once, merge the record) →
   ``sessionkey.update`` → the Job's terminal status → slot and staging freed;
4. the timers (``timers.py``): resync, ``Resumable`` refresh, reaper and staging sweep.

Every status write goes through ``Cluster.record`` (``summarize``: one writer of phase and conditions,
and no write when nothing changed). Each Job's steps run under that Job's lock; kopf calls in from its
worker threads, the timers from their own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from pidispatch import metrics
from pidispatch.api.conditions import now_rfc3339
from pidispatch.api.views import JobView, SessionKeyView, TriggerView
from pidispatch.contract import JOB_LABEL
from pidispatch.events import emit
from pidispatch.forge.github import Forge
from pidispatch.jobflow import sessionkey, timers
from pidispatch.jobflow.admit import arrival, refusal
from pidispatch.jobflow.checkout import checkout_of
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.comment import comment_pending, comment_refusal
from pidispatch.jobflow.complete import Completion, complete, record_end, unstarted
from pidispatch.jobflow.pod import never_started, owner_name, owner_uid, pod_phase
from pidispatch.jobflow.stage import session_view, start_message
from pidispatch.jobflow.start import Launched, launch
from pidispatch.jobflow.summarize import TERMINAL_PHASES, Queued, Refused, Retrying, Running
from pidispatch.jobflow.table import JobTable, NameLocks
from pidispatch.jobflow.trigger import Triggers
from pidispatch.kubeapi import Api, ApiError
from pidispatch.manifests.pod import pod_name
from pidispatch.record import JobReason
from pidispatch.settings import OperatorSettings
from pidispatch.slots import Slots, backoff_seconds, waited_longer_than
from pidispatch.store.journal import release_interrupted
from pidispatch.store.staging import HostRecord, JobDir

log = logging.getLogger("pidispatch.operator")

RESYNC_SECONDS = 30
QUEUED_AFTER_SECONDS = 2.0  # a Job still waiting for a slot after this long is marked Queued (one write)


class _StaleBody(Exception):
    """The Job changed since the watch body a start acted on (the apiserver refused its resourceVersion)."""


class Dispatcher:
    """All operator behaviour for one namespace. Thread-safe: kopf calls it from its worker threads.

    ``clock`` stamps status times (RFC 3339); ``monotonic`` measures waits (the Queued grace, back-offs);
    ``wall`` ages Pods against the start timeout (their creation time is the apiserver's wall clock).
    """

    def __init__(self, settings: OperatorSettings, api: Api, namespace: str, forge: Forge | None = None, *,
                 clock: Callable[[], str] = now_rfc3339, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.s = settings
        self.store = settings.store
        self.api = api
        self.ns = namespace
        self.cluster = Cluster(api, namespace, clock)
        # None: no GitHub credentials for the operator's own calls. PR heads then come from the Job's
        # spec.resolved (as before the GitHub client existed) and refusals post no comment.
        self.forge = forge
        self._monotonic = monotonic
        self._wall = wall
        self.slots = Slots(settings.max_concurrent_jobs, monotonic)
        self.table = JobTable(self._current_uid)
        self._order: dict[str, tuple[str, str]] = {}
        self._locks = NameLocks()  # per Job name; an entry lives only while the lock is held or waited for
        self.triggers = Triggers(self.cluster, self.store)
        # Waiting for a slot, not yet marked Queued: name → (monotonic time queued, wall-clock stamp).
        self._unmarked: dict[str, tuple[float, str]] = {}
        # Failed starts in a row, for the back-off of a Job whose start keeps failing for a passing reason.
        self._failures: dict[str, int] = {}
        self._mark = threading.Event()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _current_uid(self, name: str) -> str | None:
        job = self.cluster.job(name)
        return (job.uid or None) if job is not None else None

    def _lock(self, job: str) -> AbstractContextManager[None]:
        return self._locks.hold(job)

    # ---- life cycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Free what a killed predecessor held, seed the queue from the Jobs that exist (oldest first), then
        start the worker threads."""
        release_interrupted(self.store, self.s.staging_dir)
        jobs = sorted(self.cluster.jobs(), key=arrival)
        self.table.preexisting = {job.uid for job in jobs if job.phase not in TERMINAL_PHASES}
        for job in jobs:  # running Jobs hold their slots before any waiting Job is admitted
            self.table.claim(job.name, job.uid)
            self.table.track(job.name, job.phase)
            if job.phase == "Running":
                self.slots.hold(job.name)
        for job in jobs:
            if job.phase not in TERMINAL_PHASES | {"Running"}:
                self._guarded(self.admit, job)
            elif comment_pending(job):  # refused before a restart, its comment not yet recorded
                self._guarded(self.comment_refusal, job.name)
        loops: list[tuple[str, Callable[[], None], float]] = [
            ("pump", self._pump_once, 0), ("queued", self._mark_queued, -1), ("resync", self.resync, RESYNC_SECONDS),
            ("sessionkeys", self.refresh_sessionkeys, self.s.resumable_refresh_seconds),
            ("sweep", self.sweep, self.s.sweep_interval_seconds),
        ]
        for name, fn, interval in loops:
            thread = threading.Thread(target=self._loop, args=(name, fn, interval), name=f"pidispatch-{name}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._mark.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _loop(self, name: str, fn: Callable[[], None], interval: float) -> None:
        while not self._stop.is_set():
            if interval > 0:
                if self._stop.wait(interval):
                    return
            elif interval < 0:  # the Queued marker: until the next Job's wait is due, or a new arrival
                self._mark.wait(self._next_mark_in())
                self._mark.clear()
            else:  # the pump: a wake-up (slot freed, arrival), or the end of the earliest back-off
                ready_in = self.slots.next_ready_in()
                self._wake.wait(5 if ready_in is None else min(5.0, max(0.05, ready_in)))
                self._wake.clear()
            self._guarded(fn)

    def _guarded(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # one failure must not stop the loop; the resync retries
            log.warning("%s failed: %s: %s", getattr(fn, "__name__", fn), type(exc).__name__, exc)
            return None

    # ---- events from kopf --------------------------------------------------------------------------

    def on_job(self, event_type: str | None, body: dict[str, Any]) -> None:
        """A Job's watch event: the Job enters the job flow here, as a view parsed once."""
        job = JobView.of(body)
        name = job.name
        if event_type == "DELETED":
            self._deleted(name, job.uid or None)
            return
        if not self.table.claim(name, job.uid or None):
            return  # a late event of a Job deleted or re-created since
        phase = job.phase
        if self.table.ended(name) and phase not in TERMINAL_PHASES:
            return  # a stale body from before our own terminal status write
        self.table.keep_body(job, phase)
        self.table.track(name, phase)
        if phase in TERMINAL_PHASES:
            if self.slots.release(name):
                self._wake.set()
        elif phase == "Running":
            self.slots.hold(name)
        elif self.admit(job) and self.slots.free:
            self._guarded(self._pump_once)  # in kopf's thread: waking the pump would add a hand-off before the Pod
        else:
            self._wake.set()

    def on_pod(self, pod: dict[str, Any]) -> None:
        # The Job's name from the owner reference: the label holds a short form when the name is long.
        job = owner_name(pod) or (pod["metadata"].get("labels") or {}).get(JOB_LABEL)
        if not job:
            return
        if pod_phase(pod) is not None:
            self.complete(job, pod)
        else:
            self._check_started(job, pod)

    def _check_started(self, name: str, pod: dict[str, Any]) -> None:
        """A Pod still not started after the start timeout ends its Job (checked on its events and by the resync)."""
        why = never_started(pod, self._wall(), self.s.job_start_timeout_seconds)
        if why is not None:
            self.give_up(name, pod, why)

    def on_sessionkey(self, event_type: str | None, body: dict[str, Any]) -> None:
        sk = SessionKeyView.of(body)
        if event_type == "DELETED" or not sk.meta.deletion or sessionkey.FINALIZER not in sk.meta.finalizers:
            return
        sessionkey.finalize(self.s, self.cluster, sk)

    def on_trigger(self, body: dict[str, Any]) -> None:
        self.triggers.on_trigger(TriggerView.of(body))

    def on_trigger_deleted(self, name: str) -> None:
        self.triggers.forget(name)

    # ---- 1. admit ----------------------------------------------------------------------------------

    def admit(self, job: JobView) -> bool:
        """Refuse ``job`` or put it in line: True when it waits for a slot (the caller starts it or wakes the pump)."""
        name = job.name
        with self._lock(name):
            if not self.table.claim(name, job.uid or None):
                return False  # a listed body of a Job the watch has since seen replaced or deleted
            refused = refusal(job, self.triggers.of(job), self.store, self.s.github)
            if refused is not None:
                self._refuse(job, refused)
                self._comment_refusal_locked(name)
                return False
            self._order[name] = arrival(job)
            self.slots.enqueue(name, self._order[name])
            place = self.slots.position(name)
            if place is not None and place > self.slots.free and job.phase != "Queued":
                # Marked Queued only if it is still waiting a moment later (``_mark_queued``): a Job that
                # gets a slot within QUEUED_AFTER_SECONDS goes straight to Running, one write fewer.
                self._unmarked.setdefault(name, (self._monotonic(), self.cluster.clock()))
                self._mark.set()
        return True

    def _next_mark_in(self) -> float:
        due = [since + QUEUED_AFTER_SECONDS for since, _ in list(self._unmarked.values())]
        return max(0.05, min(due) - self._monotonic()) if due else 5.0

    def _mark_queued(self) -> None:
        """Write ``Queued`` for each Job that has waited for a slot longer than QUEUED_AFTER_SECONDS."""
        since = {name: mark[0] for name, mark in list(self._unmarked.items())}
        for name in waited_longer_than(since, self._monotonic(), QUEUED_AFTER_SECONDS):
            with self._lock(name):
                marked = self._unmarked.pop(name, None)
                if marked is None or self.slots.position(name) is None:
                    continue  # it got its slot, or went away, in the meantime
                job = self.table.bodies.get(name) or self.cluster.job(name)
                if job is None or job.phase in TERMINAL_PHASES | {"Queued", "Running"}:
                    continue
                updated = self.cluster.record(job, Queued(marked[1], self.slots.capacity))
                self.table.keep_body(updated, "Queued")

    def _refuse(self, job: JobView, refused: Refused) -> None:
        self.cluster.record(job, refused)
        self.table.track(job.name, refused.phase)  # a stale event must not admit it again
        emit("job_refused", job=job.name, reason=refused.reason or refused.condition_reason)
        # The spec's own refusal events (§9.3, §10), by the names pi-dispatch hosts log them under.
        kind = job.spec.forge if job.spec is not None else "local"  # the job's forge kind (spec §1.2)
        if refused.reason == JobReason.SESSIONS_DIR_UNSET:
            emit("refused_sessions_dir_unset", kind=kind)
        elif refused.reason == JobReason.CONFIG_REFUSED:
            emit("refused_config", kind=kind, refunded=False)  # refused before any budget was reserved
        self.cluster.event(job, "Warning", refused.condition_reason, refused.message)

    def comment_refusal(self, name: str) -> None:
        """Post a refused Job's issue comment if it is still owed (restart, resync)."""
        with self._lock(name):
            self._comment_refusal_locked(name)

    def _comment_refusal_locked(self, name: str) -> None:
        job = self.cluster.job(name)
        commented = comment_refusal(self.forge, job) if job is not None else None
        if job is not None and commented is not None:
            self.cluster.record(job, commented)

    # ---- 2. start ----------------------------------------------------------------------------------

    def _pump_once(self) -> None:
        while not self._stop.is_set() and (name := self.slots.take_next()) is not None:
            try:
                self.start_job(name)
            except Exception as exc:
                self._retry_later(name, exc)
            else:
                self._failures.pop(name, None)
        self._gauges()

    def _retry_later(self, name: str, exc: Exception) -> None:
        """A start that failed for a passing reason (GitHub or apiserver outage, an old Pod of the name not
        yet collected): back in line at its place after a back-off, while the Jobs behind it start. Only
        the first failure in a row is written (``StartRetrying``): a long outage costs one write.
        """
        failures = self._failures.get(name, 0) + 1
        self._failures[name] = failures
        delay = backoff_seconds(failures)
        log.warning("starting job %s failed (attempt %d), retried in %.0f s: %s", name, failures, delay, exc)
        emit("job_start_retrying", job=name, attempt=failures, delaySeconds=delay, error=type(exc).__name__)
        self.table.bodies.pop(name, None)  # the retry reads the Job afresh
        self.slots.defer(name, self._order.get(name, ("", name)), delay)
        if failures == 1:
            self._guarded(self._note_retrying, name, exc)

    def _note_retrying(self, name: str, exc: Exception) -> None:
        with self._lock(name):
            job = self.cluster.job(name)
            if job is None or self.slots.position(name) is None or job.phase in TERMINAL_PHASES | {"Running"}:
                return  # gone, or started by now
            self.cluster.record(job, Retrying(
                f"Starting the job failed ({type(exc).__name__}: {str(exc)[:300]}); it is retried with a back-off "
                "of up to a minute, and the Jobs queued behind it start meanwhile."))

    def start_job(self, name: str) -> None:
        with self._lock(name):
            watched = self.table.bodies.get(name)
            if watched is not None:
                try:
                    self._start_locked(name, watched, watched=True)
                    return
                except _StaleBody:
                    if self.table.bodies.get(name) is watched:
                        self.table.bodies.pop(name, None)
            self._start_locked(name, self.cluster.job(name), watched=False)

    def _start_locked(self, name: str, job: JobView | None, *, watched: bool) -> None:
        """Start ``job`` from the watch's body (``watched``) or from a fresh read.

        A watched body saves a GET before the Pod, but it may be behind the Job: this operator is the
        only writer of Job status, yet the Job may have been deleted and re-created under its name, or
        edited. So it is used only for the straight path, and the ``Running`` write carries its
        resourceVersion: if the Job changed since, the write is refused (409) and the start is redone
        from a fresh read, which finds the Pod (host record written) or, for a re-created Job, a Pod
        that belongs to the old uid (garbage-collected; the pump retries). Anything off the straight
        path (a refusal, a token GitHub refused) is decided on a fresh read too.
        """
        if job is None:
            self.slots.release(name)
            return
        if watched and (job.phase in TERMINAL_PHASES or self.table.ended(name)):
            raise _StaleBody(name)
        if job.phase in TERMINAL_PHASES:
            self.slots.release(name)
            return
        trigger = self.triggers.of(job)
        refused = refusal(job, trigger, self.store, self.s.github)
        if refused is not None or trigger is None:
            if watched:
                raise _StaleBody(name)
            self.slots.release(name)
            if refused is not None:
                self._refuse(job, refused)
                self._comment_refusal_locked(name)
            return
        uid = job.uid
        if not watched:
            self.table.adopt(name, uid)
        jd = JobDir(self.s.staging_dir, uid)
        launched = launch(self.s, self.cluster, self.forge, job, trigger, jd,
                          listed_at_start=uid in self.table.preexisting)
        if not isinstance(launched, Launched):
            if watched:
                raise _StaleBody(name)  # refused for good: confirmed on a fresh read first
            if launched.staging_used:
                jd.remove()
            self.slots.release(name)
            self._refuse(job, launched.refused)
            self._comment_refusal_locked(name)  # fork-not-allowed found by the forge API owes its comment
            return
        if launched.created and launched.host is not None:
            self.table.in_flight[name] = launched.host.key
            self._guarded(sessionkey.ensure, self.cluster, launched.host)
        running = Running(launched.pod["metadata"]["name"], session_view(launched.host), start_message(launched.host),
                          checkout_of(launched.pod))
        try:
            self.cluster.record(job, running, resource_version=job.meta.resource_version if watched else None)
        except ApiError as exc:
            if watched and exc.status in (404, 409):
                raise _StaleBody(name) from exc
            raise
        self.table.track(name, "Running")
        self.table.preexisting.discard(uid)
        self._unmarked.pop(name, None)
        if pod_phase(launched.pod) is not None:  # it already ended while we were away
            threading.Thread(target=self._guarded, args=(self.complete, name, launched.pod), daemon=True).start()

    # ---- 3. complete -------------------------------------------------------------------------------

    def complete(self, name: str, pod: dict[str, Any] | None) -> None:
        with self._lock(name):
            found = self._job_of(name, pod)
            if found is None:
                return
            job, jd = found
            host = jd.read_host()
            done = complete(self.s, jd, host, pod, name)
            if done is not None:
                self._finish(name, job, jd, host, done)

    def give_up(self, name: str, pod: dict[str, Any], why: str) -> None:
        """The Pod never started: delete it, then end the Job ``Failed`` (``PodNeverStarted``) and free its slot."""
        with self._lock(name):
            found = self._job_of(name, pod)
            if found is None:
                return
            job, jd = found
            # Judged again on a fresh read, under the Job's lock: the Pod may have started since.
            pod = self.api.get_or_none(self.cluster.pods(pod["metadata"]["name"])) or {}
            why = never_started(pod, self._wall(), self.s.job_start_timeout_seconds) if pod else None
            if why is None or owner_uid(pod) != job.uid:
                return  # started, gone (its end is the completion's), or another Job's
            try:
                self.api.delete(self.cluster.pods(pod["metadata"]["name"]))
            except ApiError as exc:
                if exc.status != 404:
                    raise  # the Pod might still start: the Job stays Running, and the resync tries again
            emit("job_pod_never_started", job=name, reason=why.split(":", 1)[0])
            host = jd.read_host()
            self._finish(name, job, jd, host, unstarted(jd, host, why, self.s.job_start_timeout_seconds))

    def _job_of(self, name: str, pod: dict[str, Any] | None) -> tuple[JobView, JobDir] | None:
        """The Job ``pod`` belongs to, if it has not ended yet (an ended one only gets its slot and staging freed)."""
        job = self.cluster.job(name)
        if job is None:
            return None
        uid = job.uid
        jd = JobDir(self.s.staging_dir, uid)
        if job.phase in TERMINAL_PHASES:
            self._release(name, jd)
            return None
        if pod is not None and owner_uid(pod) != uid:
            return None  # a Pod of an earlier Job with the same name
        return job, jd

    def _finish(self, name: str, job: JobView, jd: JobDir, host: HostRecord | None, done: Completion) -> None:
        record_end(self.s, self.cluster, job, host, done)
        self.table.track(name, done.ended.outcome)
        self._release(name, jd)

    def _release(self, name: str, jd: JobDir) -> None:
        self.table.in_flight.pop(name, None)
        jd.remove()
        if self.slots.release(name):
            self._wake.set()

    def _deleted(self, name: str, uid: str | None) -> None:
        """A Job's DELETED: its staging and uid-keyed state always; its name-keyed state (slot, place in
        line) only if it is still that Job's (a Job re-created under the name may have taken it over)."""
        if uid:
            JobDir(self.s.staging_dir, uid).remove()
            self.table.preexisting.discard(uid)
            if not self.table.owns(name, uid):
                self.table.drop_uid(name, uid)
                return
        self._forget_name(name, uid)

    def _forget_name(self, name: str, uid: str | None) -> None:
        self.table.forget(name, uid)
        self._order.pop(name, None)
        self._unmarked.pop(name, None)
        self._failures.pop(name, None)
        if self.slots.release(name):
            self._wake.set()
        self._gauges()

    # ---- 4. timers ---------------------------------------------------------------------------------

    def resync(self) -> None:
        """Catch what a missed watch event would lose: ended Pods of running Jobs, unqueued Jobs."""
        for job in sorted(self.cluster.jobs(), key=arrival):
            name = job.name
            if job.phase == "Running":
                if not self.table.claim(name, job.uid or None):
                    continue  # listed before the watch saw it replaced or deleted
                self.slots.hold(name)
                pod = self.api.get_or_none(self.cluster.pods(pod_name(name)))
                if pod_phase(pod) is not None:
                    self._guarded(self.complete, name, pod)
                elif pod is not None:
                    self._guarded(self._check_started, name, pod)
            elif job.phase not in TERMINAL_PHASES:
                self._guarded(self.admit, job)
            elif comment_pending(job):
                self._guarded(self.comment_refusal, name)
        self._wake.set()  # for what it put in line
        self._gauges()

    def refresh_sessionkeys(self) -> None:
        timers.refresh_sessionkeys(self.s, self.cluster, busy=set(self.table.in_flight.values()))

    def sweep(self) -> None:
        timers.sweep(self.s, self.cluster)

    def _gauges(self) -> None:
        counts = self.table.phase_counts()
        for phase in ("Pending", "Refused", "Queued", "Running", "Succeeded", "Failed"):
            metrics.JOBS.labels(phase).set(counts.get(phase, 0))
        metrics.QUEUE_DEPTH.set(self.slots.queued)
        metrics.SLOTS_IN_USE.set(self.slots.running)

