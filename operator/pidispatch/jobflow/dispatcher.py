"""The dispatcher: routes the operator's events to the steps, and runs the loops. It holds no decisions of its own.

For one delivery, top to bottom:

1. ``on_job`` → :meth:`admit` (``admit.py``: refusals before any spend; ``comment.py``: their comment) →
   in line for a slot (``queue.py``: the budget of ``slots.py``, marked ``Queued`` if it waits);
2. a free slot → :meth:`start_job` (in the Job's key: right in its event's turn when the slot is its own,
   else the pump hands the Job to its key) → ``start.start_job``: ``Started | Refusal | Gone``; a failure puts
   the Job back in line after a back-off, capped (``queue.py``);
3. ``on_pod`` hands an ended Pod to its Job's key → :meth:`complete` (``complete.py``: ``ending`` →
   ``finished`` or ``abandon`` → ``record_end``) → slot and staging freed; behind the gateway, a Pod that
   ended a moment ago brings its Job's key back once the ledger has settled (``usage.py``), no worker waits;
4. the timers (``timers.py``): resync, ``Resumable`` refresh, staging sweep; the cron Triggers' slots
   (``cron.py``).

What the operator knows of each Job is one record in the job table (``table.py``); the slot is the
budget's (``slots.py``), the waiting is the queue's (``queue.py``, its policy in ``queuepolicy.py``).
Every status write goes through ``Cluster.record`` (``summarize``). Every step on a Job runs in the worker of
the operator's one queue that holds that Job's key (``handlers/feed.py``: one key per object, never two
workers on a key; docs/architecture.md#event-path): the entry points (``on_*``, :meth:`job_turn`) are called
there, and the loops (the pump, the Queued marker, the resync) only decide and hand a Job's work to its key
(``handoff.py``), so no lock per Job is needed. An exception from an entry point goes back to that
queue, which retries its key after a back-off, capped; one from a loop stops at ``loops.guarded``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pidispatch.api.conditions import now_rfc3339
from pidispatch.api.views import JobView, SessionKeyView, TriggerView
from pidispatch.forge.github import Forge
from pidispatch.gateway.ledger import Figures
from pidispatch.jobflow import complete as completion
from pidispatch.jobflow import cron, lifecycle, retire, sessionkey, timers, usage
from pidispatch.jobflow import start as starting
from pidispatch.jobflow.admit import arrival, refusal
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.comment import comment_pending, comment_refusal
from pidispatch.jobflow.handoff import Body, Handed, Inbox, InPlace, Keys
from pidispatch.jobflow.loops import Loops, guarded
from pidispatch.jobflow.podview import PodView, pod_phase
from pidispatch.jobflow.queue import JobQueue
from pidispatch.jobflow.refused import record_refusal
from pidispatch.jobflow.slots import Slots
from pidispatch.jobflow.summarize import TERMINAL_PHASES, Refused
from pidispatch.jobflow.table import JobTable
from pidispatch.jobflow.trigger import Triggers
from pidispatch.kubeapi import Api
from pidispatch.manifests.pod import pod_name
from pidispatch.settings import OperatorSettings
from pidispatch.store.journal import release_interrupted
from pidispatch.store.staging import JobDir

RESYNC_SECONDS = 30


class Dispatcher:
    """All operator behaviour for one namespace. Thread-safe: the queue's workers call it, one per key at a time.

    ``clock`` stamps status times (RFC 3339); ``monotonic`` measures waits (the Queued grace, back-offs);
    ``wall`` ages Pods against the start timeout (their creation time is the apiserver's wall clock).
    ``forge`` ``None``: no GitHub credentials for the operator's own calls (PR heads then come from the
    Job's ``spec.resolved``, and refusals post no comment).
    """

    def __init__(self, settings: OperatorSettings, api: Api, namespace: str, forge: Forge | None = None, *,
                 clock: Callable[[], str] = now_rfc3339, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.s, self.store, self.api, self.ns, self.forge = settings, settings.store, api, namespace, forge
        self.cluster = Cluster(api, namespace, clock)
        self._wall = wall
        self.table = JobTable(self._current_uid)
        self.inbox = Inbox()  # what the loops and other keys hand to a Job's key
        self._keys: Keys = InPlace(self)
        self.queue = JobQueue(Slots(settings.max_concurrent_jobs, monotonic), self.table, self.cluster, monotonic)
        self.triggers = Triggers(self.cluster, self.store, settings.job_scheduling, settings.node_name, wall)
        self.cron = cron.Cron(self.cluster, wall, self.triggers.placement)
        self._loops = Loops()
        self._stop = self._loops.stopping

    def _current_uid(self, name: str) -> str | None:
        job = self.cluster.job(name)
        return (job.uid or None) if job is not None else None

    def attach(self, keys: Keys) -> None:
        """Hand work to the keys of ``keys`` (the operator's one queue) instead of doing it in the caller."""
        self._keys = keys

    @property
    def slots(self) -> Slots:
        return self.queue.slots

    @slots.setter
    def slots(self, slots: Slots) -> None:  # a test's budget with its own clock
        self.queue.slots = slots

    # ---- life cycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Free what a killed predecessor held, seed the queue from the Jobs that exist (oldest first), then
        start the loops. A standby that takes over has dropped the events before it led: the Triggers and
        the SessionKeys being deleted are read here, the Jobs and their Pods below and by the resync."""
        release_interrupted(self.store, self.s.staging_dir)
        # In this thread, before the queue's workers start: the Jobs below are judged against these Triggers.
        self._triggers_as_listed(self.on_trigger)
        for body in self.api.list(self.cluster.crd("sessionkeys")):
            if (body.get("metadata") or {}).get("deletionTimestamp") or lifecycle.asks(body):
                guarded(self.on_sessionkey, "MODIFIED", body)
        jobs = sorted(self.cluster.jobs(), key=arrival)
        self.table.note_preexisting({job.uid for job in jobs if job.phase not in TERMINAL_PHASES})
        for job in jobs:  # running Jobs hold their slots before any waiting Job is admitted
            self.table.claim(job.name, job.uid)
            self.table.track(job.name, job.phase)
            if job.phase == "Running":
                self.slots.hold(job.name)
        for job in jobs:
            if job.phase != "Running":
                guarded(self._take_in, job)
        self._loops.start("pump", self._pump_once, self._loops.woken(self.queue.wake, self.queue.next_ready_in))
        self._loops.start("queued", self._mark_due, self._loops.woken(
            self.queue.mark, lambda: self.queue.next_mark_in(self.inbox.marking())))
        self._loops.start("resync", self.resync, self._loops.every(RESYNC_SECONDS))
        self._loops.start("sessionkeys", self.refresh_sessionkeys, self._loops.every(self.s.resumable_refresh_seconds))
        self._loops.start("sweep", self.sweep, self._loops.every(self.s.sweep_interval_seconds))
        self._loops.start("cron", self.cron.turn, self._loops.woken(self.cron.wake, self.cron.next_turn_in))
        self.queue.wake.set()
        self.cron.wake.set()

    def stop(self) -> None:
        self._loops.stop(self.queue.wake, self.queue.mark, self.cron.wake)

    # ---- events, from the queue's workers (handlers/feed.py) -----------------------------------------

    def on_job(self, event_type: str | None, body: dict[str, Any]) -> None:
        """A Job's watch event: the Job enters the job flow here, as a view parsed once."""
        job = JobView.of(body)
        name, uid, phase = job.name, job.uid or None, job.phase
        if event_type == "DELETED":
            self._deleted(name, uid)
        elif not self.table.claim(name, uid):
            return  # a late event of a Job deleted or re-created since
        elif self.table.ended(name) and phase not in TERMINAL_PHASES:
            return  # a stale body from before our own terminal status write
        else:
            self.table.keep_body(job, phase)
            self.table.track(name, phase)
            if phase in TERMINAL_PHASES:
                self.queue.free(name)
            elif phase == "Running":
                self.slots.hold(name)
            elif self.admit(job) and self.slots.free:
                self._pump(name)  # its own start right here, in its key's worker: waking the pump adds a hand-off
            else:
                self.queue.wake.set()

    def on_pod(self, body: dict[str, Any]) -> None:
        """A Pod's watch event: the Pod enters the job flow here, read once into its view; one that ended, or
        never started in time, is handed to its Job's key, whose worker acts on it (:meth:`job_turn`)."""
        pod = PodView.of(body)
        if pod.job and (pod_phase(pod) is not None
                        or pod.never_started(self._wall(), self.s.job_start_timeout_seconds) is not None):
            self.inbox.pod(pod.job, pod)
            self._keys.job(pod.job)

    def job_turn(self, name: str) -> None:
        """Do what was handed to the Job ``name``'s key since its last turn (in that key's worker, after its
        event if one came): the resync's listing, a slot the pump gave it, its ``Queued`` mark, its Pod's end.
        What a failure leaves undone is given back, for the queue's retry of the key."""
        handed = self.inbox.take(name)
        if handed is None:
            return
        try:
            self._do(name, handed)
        except BaseException:
            self.inbox.give_back(name, handed)
            raise

    def _do(self, name: str, handed: Handed) -> None:
        if handed.listed is not None:
            self._resync_job(handed.listed)
            handed.listed = None
        if handed.granted:
            handed.granted = False
            self._start(name)
        if handed.marked:
            self.queue.mark_queued(name)
            handed.marked = False
        if handed.pod_seen:
            self._pod_seen(name, handed.pod)
            handed.pod_seen, handed.pod = False, None

    def _pod_seen(self, name: str, pod: PodView | None) -> None:
        """An ended Pod (or a vanished one, ``None``) completes its Job; one still not started after the start
        timeout ends it."""
        if pod_phase(pod) is not None:
            self.complete(name, pod)
        elif pod is not None:
            why = pod.never_started(self._wall(), self.s.job_start_timeout_seconds)
            if why is not None:
                self.give_up(name, pod, why)

    def on_sessionkey(self, event_type: str | None, body: dict[str, Any]) -> None:
        sk = SessionKeyView.of(body)
        if event_type != "DELETED" and sk.meta.deletion and sessionkey.FINALIZER in sk.meta.finalizers:
            sessionkey.finalize(self.s, self.cluster, sk)
        elif event_type != "DELETED" and lifecycle.asks(body):
            # A retire or release annotation (the receiver's, or a person's): acted on, the status written once.
            retire.requests(self.s, self.cluster, sk)

    def on_trigger(self, body: dict[str, Any]) -> None:
        trigger = TriggerView.of(body)
        self.triggers.on_trigger(trigger)
        if trigger.spec is not None and trigger.spec.on.event == "cron":
            self.cron.wake.set()  # a new or changed schedule: its next slot may be sooner than the loop's wait

    def on_trigger_deleted(self, name: str) -> None:
        self.triggers.forget(name)

    # ---- 1. admit: refused, or in line (and marked Queued if it waits) ------------------------------

    def _take_in(self, job: JobView) -> bool:
        """A listed Job (start-up, resync): put in line if it may still start, else post a comment still owed.
        True when it waits for a slot."""
        if job.phase not in TERMINAL_PHASES:
            return self.admit(job)
        if comment_pending(job):  # refused before a restart, its comment not yet recorded
            self.comment_refusal(job.name)
        return False

    def admit(self, job: JobView) -> bool:
        """Refuse ``job`` or put it in line: True when it waits for a slot (the caller starts it or wakes the pump)."""
        name = job.name
        if not self.table.claim(name, job.uid or None):
            return False  # a listed body of a Job the watch has since seen replaced or deleted
        refused = refusal(job, self.triggers.of(job), self.store, self.s.github)
        if refused is not None:
            self._refuse(job, refused)
            return False
        self.queue.line_up(job, arrival(job))
        return True

    def _refuse(self, job: JobView, refused: Refused) -> None:
        record_refusal(self.cluster, job, refused)
        self.table.track(job.name, refused.phase)  # a stale event must not admit it again
        self.comment_refusal(job.name)

    def comment_refusal(self, name: str) -> None:
        """Post a refused Job's issue comment if it is still owed (a refusal, a restart, the resync)."""
        job = self.cluster.job(name)
        commented = comment_refusal(self.forge, job) if job is not None else None
        if job is not None and commented is not None:
            self.cluster.record(job, commented)

    # ---- 2. start ----------------------------------------------------------------------------------

    def _pump_once(self) -> None:
        """The pump's turn (its thread, woken by a freed slot, an arrival or a back-off's end)."""
        self._pump(None)

    def _pump(self, mine: str | None) -> None:
        """Give the free slots to the oldest ready Jobs (``slots.py``). Each Job's start is handed to its key,
        but ``mine``'s: the caller is that key's worker, and starts it at once (no hand-off on the Job → Pod path)."""
        while not self._stop.is_set() and (name := self.slots.take_next()) is not None:
            if name == mine:
                self._start(name)
            else:
                self.inbox.grant(name)
                guarded(self._keys.job, name)
        self.queue.gauges()

    def _start(self, name: str) -> None:
        """Start ``name`` in the slot it was given, in its key's worker; a failure puts it back in line."""
        try:
            ended = self.start_job(name)
        except Exception as exc:  # an outage, or a bug: back in line after a back-off, capped (queue.py)
            if self.queue.retry_later(name, exc):
                guarded(self.queue.note_retrying, name, exc)
            self.queue.wake.set()  # the pump's wait now ends with this back-off
            return
        self.table.start_succeeded(name)
        if ended:
            self._keys.job(name)  # its Pod ended already: its end is the key's next turn

    def start_job(self, name: str) -> bool:
        """Start ``name`` in the slot it was given (``start.py``). Raises for a passing failure (the caller
        retries). True when the Pod it found had ended already (handed to the Job's key: :meth:`job_turn`)."""
        outcome = starting.start_job(self.s, self.cluster, self.forge, self.table, self.triggers.of, name)
        if isinstance(outcome, starting.Started):
            self.table.track(name, "Running")
            self.table.unlist(outcome.uid)
            self.table.take_unmarked(name)
            if pod_phase(outcome.launched.pod) is not None:  # it already ended while we were away
                self.inbox.pod(name, outcome.launched.pod)
                return True
            return False
        self.slots.release(name)
        if isinstance(outcome, starting.Refusal):
            self._refuse(outcome.job, outcome.refused)
        return False

    # ---- 3. complete -------------------------------------------------------------------------------

    def complete(self, name: str, pod: PodView | None) -> None:
        """``pod`` ended (``None``: it vanished): its Job's end is recorded (``complete.py``), its slot freed.
        Behind the gateway the ledger is read once it has settled: with a queue, the Job's key comes back then."""
        def ledger(end: completion.Ending) -> Callable[[], Figures | None] | None:
            if not self.s.gateway:
                return None
            if self._keys.deferring:
                return lambda: usage.read_ledger(self.cluster, end.job.uid)  # settled: _end waited by requeue
            return lambda: usage.settled_ledger(self.cluster, end.job.uid, pod)  # in place: waits in the caller

        self._end(name, pod, lambda end: completion.finished(self.s, end, pod, ledger(end), self.forge),
                  settle=True)

    def give_up(self, name: str, pod: PodView, why: str) -> None:
        """The Pod never started (``why``): delete it, then end the Job ``Failed`` (``PodNeverStarted``)."""
        self._end(name, pod, lambda end: completion.abandon(self.s, self.cluster, end, pod, self._wall()))

    def _end(self, name: str, pod: PodView | None,
             decide: Callable[[completion.Ending], completion.Finished | None], *, settle: bool = False) -> None:
        found = completion.ending(self.s, self.cluster, name, pod)
        if isinstance(found, completion.Ending):
            if settle and self._settling(name, pod):
                return
            done = decide(found)
            if done is None:
                return
            completion.record_end(self.s, self.cluster, found.job, done.host, done.done)
            self.table.track(name, done.done.ended.outcome)
        if found is not None:  # ended now, or already: its slot and staging go
            self._release(name, found.jd)

    def _settling(self, name: str, pod: PodView | None) -> bool:
        """Behind the gateway, with a queue: True when ``pod`` finished too recently for the gateway's ledger to
        hold the job's last figures, and the Job's key is queued again for when it will (at most
        ``usage.LEDGER_SETTLE_SECONDS`` after it first came here, however far ahead the node's clock is)."""
        ended = pod.finished_at if pod is not None else None
        if not self.s.gateway or not self._keys.deferring or ended is None:
            return False
        now = self._wall()
        until = self.inbox.settle_until(name, now + usage.settle_wait(ended, now))
        if now >= until:
            return False
        self.inbox.give_back(name, Handed(pod_seen=True, pod=pod))
        self._keys.job_after(name, until - now)
        return True

    def _release(self, name: str, jd: JobDir) -> None:
        self.inbox.settled(name)
        self.table.land(name)
        jd.remove()
        self.queue.free(name)

    def _deleted(self, name: str, uid: str | None) -> None:
        """A Job's DELETED: its staging and uid-keyed state always; its name-keyed state (slot, place in
        line) only if it is still that Job's (a Job re-created under the name may have taken it over)."""
        if uid:
            JobDir(self.s.staging_dir, uid).remove()
            self.table.unlist(uid)
            if not self.table.owns(name, uid):
                self.table.drop_uid(name, uid)
                return
        self.table.forget(name, uid, place_too=True)
        self.inbox.drop(name)
        self.queue.free(name)
        self.queue.gauges()

    # ---- 4. timers ---------------------------------------------------------------------------------

    def resync(self) -> None:
        """Catch what a missed watch event would lose: ended Pods of running Jobs, unqueued Jobs, Triggers. Each
        listed Job and Trigger is handed to its key (:meth:`_resync_job` runs in the Job's key's worker)."""
        self._triggers_as_listed(self._keys.trigger)
        for job in sorted(self.cluster.jobs(), key=arrival):
            self.inbox.listed(job)
            guarded(self._keys.job, job.name)  # one Job's failure must not keep the others from their turn
        self.queue.wake.set()  # for what it put in line
        self.queue.gauges()

    def _resync_job(self, job: JobView) -> None:
        name = job.name
        if job.phase != "Running":
            if self._take_in(job):
                self.queue.wake.set()
        elif self.table.claim(name, job.uid or None):  # else listed before the watch saw it replaced
            self.slots.hold(name)
            found = self.api.get_or_none(self.cluster.pods(pod_name(name)))
            self._pod_seen(name, PodView.of(found) if found is not None else None)

    def _triggers_as_listed(self, to: Callable[[Body], None]) -> None:
        """Every Trigger as the apiserver has it now, ``to`` its reconcile (a status write only where it changed),
        judged against the operator's Node as it is now (its labels and taints decide whether resumed jobs can
        be placed)."""
        guarded(self.triggers.read_node)
        for body in self.api.list(self.cluster.crd("triggers")):
            guarded(to, body)

    def _mark_due(self) -> None:
        """The Queued marker's turn: each Job due its mark is handed to its key (:meth:`JobQueue.mark_queued`)."""
        for name in self.queue.due_marks(self.inbox.marking()):
            self.inbox.mark(name)
            guarded(self._keys.job, name)

    def refresh_sessionkeys(self) -> None:
        timers.refresh_sessionkeys(self.s, self.cluster, busy=self.table.keys_in_flight())

    def sweep(self) -> None:
        timers.sweep(self.s, self.cluster)

