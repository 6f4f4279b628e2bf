"""The operator's shell: gather from the cluster and the store, ask ``flow``, act, write status.

Each step is idempotent and ordered so that a restart at any point converges (ARCHITECTURE §4):

1. admit    Trigger read, refusals before any spend (and their one issue comment), then the FIFO queue
            (``Queued`` once a Job has waited QUEUED_AFTER_SECONDS for a slot);
2. start    in a free slot: the job's GitHub token (per-job Secret), the PR head from the GitHub API,
            gates + staging, ``host.json`` journal, the Pod (deterministic name: a second create is a
            409, never a second Pod), the journal synced, SessionKey, status ``Running``;
3. complete on the Pod's end: promotion bracketed by the ``promotion.json`` journal (at most once per
            Job), verdict merge, status, SessionKey status, slot freed, staging removed.

The kopf registrations (``register.py``) only forward events here; timers (resync, Resumable
refresh, reaper, staging sweep) run as threads of this object.
"""

from __future__ import annotations

import calendar
import logging
import os
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pidispatch import failpoints, flow, metrics
from pidispatch.api.conditions import get_condition, now_rfc3339, set_condition
from pidispatch.api.crds import GROUP, VERSION
from pidispatch.events import emit
from pidispatch.forge.comments import posts_comment, refusal_comment
from pidispatch.forge.credentials import Mint, SecretRef, job_credential, token_secret_name
from pidispatch.forge.github import Forge, GitHubError
from pidispatch.forge.head import Head
from pidispatch.jobdir import HOST, PROMOTION, JobDir, file_digest, staged_uids
from pidispatch.kubeapi import Api, ApiError, name_segment
from pidispatch.manifests.pod import JOB_LABEL, TOKEN_SECRET_KEY, PodInputs, job_pod, job_token_secret, pod_name
from pidispatch.record import HostVerdict, JobReason, PromotionResult, merge_session
from pidispatch.report import RunnerReport, parse_report
from pidispatch.settings import OperatorSettings
from pidispatch.slots import Slots, backoff_seconds, waited_longer_than
from pidispatch.store import fsio, sidecars
from pidispatch.store.inspect import inspect_key
from pidispatch.store.keys import is_key
from pidispatch.store.promote import promote
from pidispatch.store.reap import reap
from pidispatch.store.resolve import resolve

log = logging.getLogger("pidispatch.operator")

FINALIZER = "pi-dispatch.dev/forget-transcript"
MANAGED_BY = {"app.kubernetes.io/managed-by": "pi-dispatch"}
RESYNC_SECONDS = 30
STAGING_GRACE_SECONDS = 600
COMMENTED = "Commented"  # the Job condition that records the refusal comment (posted once per delivery)
COMMENT_RETRY_SECONDS = 3600  # a comment GitHub refused is retried by the resync for this long
QUEUED_AFTER_SECONDS = 2.0  # a Job still waiting for a slot after this long is marked Queued (one write)
RETIRED_UIDS_KEPT = 4096  # uids of deleted or superseded Jobs remembered, so their late events are ignored


def job_pod_uid() -> int:
    """The uid job Pods run as: the operator's own, so they can read and rewrite the staged copy it
    creates 0600 in a 0700 directory (the chart's ``securityContext.runAsUser``). An operator running
    as root (a development machine) keeps the restricted profile's non-root default instead."""
    uid = os.getuid()
    return uid if uid != 0 else PodInputs.run_as_user


class _StaleBody(Exception):
    """The Job changed since the watch body ``start_job`` acted on (the apiserver refused its resourceVersion)."""


class Controller:
    """All operator behaviour for one namespace. Thread-safe: kopf calls it from its worker threads."""

    def __init__(self, settings: OperatorSettings, api: Api, namespace: str, forge: Forge | None = None) -> None:
        self.s = settings
        self.store = settings.store
        self.api = api
        self.ns = namespace
        # None: no GitHub credentials for the operator's own calls. PR heads then come from the Job's
        # spec.resolved (as before the GitHub client existed) and refusals post no comment.
        self.forge = forge
        self.slots = Slots(settings.max_concurrent_jobs)
        self._order: dict[str, tuple[str, str]] = {}
        self._phases: dict[str, str] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._triggers: dict[str, dict[str, Any]] = {}
        # The latest body the watch delivered for each Job that may still start, so ``start_job`` need
        # not read it again; trusted only as far as the Running write's resourceVersion confirms it.
        self._bodies: dict[str, dict[str, Any]] = {}
        # Uids of the Jobs listed at start-up: an earlier operator process may have created their Pods.
        self._preexisting: set[str] = set()
        # Waiting for a slot, not yet marked Queued: name → (monotonic time queued, wall-clock stamp).
        self._unmarked: dict[str, tuple[float, str]] = {}
        self._mark = threading.Event()
        # Jobs whose Pod this process created and whose end it has not yet recorded → their session key.
        self._in_flight: dict[str, str] = {}
        # The uid the per-name state above belongs to: a Job deleted and re-created under its name is
        # another Job, and kopf may deliver the old one's late events after the new one's.
        self._uids: dict[str, str] = {}
        self._retired: OrderedDict[str, None] = OrderedDict()
        # Failed starts in a row, for the back-off of a Job whose start keeps failing for a passing reason.
        self._failures: dict[str, int] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ---- paths -------------------------------------------------------------------------------------

    def _crd_path(self, plural: str, name: str | None = None, sub: str | None = None) -> str:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.ns}/{plural}"
        if name is not None:
            path += "/" + name_segment(name)
        return path + (f"/{sub}" if sub else "")

    def _pod_path(self, name: str | None = None) -> str:
        path = f"/api/v1/namespaces/{self.ns}/pods"
        return path if name is None else f"{path}/{name_segment(name)}"

    def _lock(self, job: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(job, threading.Lock())

    # ---- life cycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Seed the queue from the Jobs that exist (oldest first), then start the worker threads."""
        jobs = sorted(self.api.list(self._crd_path("jobs")), key=_arrival)
        self._preexisting = {job["metadata"]["uid"] for job in jobs
                             if (job.get("status") or {}).get("phase") not in flow.TERMINAL_PHASES}
        for job in jobs:  # running Jobs hold their slots before any waiting Job is admitted
            phase = (job.get("status") or {}).get("phase")
            self._claim(job["metadata"]["name"], job["metadata"]["uid"])
            self._track(job["metadata"]["name"], phase)
            if phase == "Running":
                self.slots.hold(job["metadata"]["name"])
        for job in jobs:
            if (job.get("status") or {}).get("phase") not in flow.TERMINAL_PHASES | {"Running"}:
                self._guarded(self.admit, job)
            elif _comment_pending(job):  # refused before a restart, its comment not yet recorded
                self._guarded(self.comment_refusal, job["metadata"]["name"])
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

    def on_job(self, event_type: str | None, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        if event_type == "DELETED":
            self._forget(name, job["metadata"].get("uid"))
            return
        if not self._claim(name, job["metadata"].get("uid")):
            return  # a late event of a Job deleted or re-created since
        phase = (job.get("status") or {}).get("phase")
        if self._phases.get(name) in flow.TERMINAL_PHASES and phase not in flow.TERMINAL_PHASES:
            return  # a stale body from before our own terminal status write
        self._keep_body(job, phase)
        self._track(name, phase)
        if phase in flow.TERMINAL_PHASES:
            if self.slots.release(name):
                self._wake.set()
        elif phase == "Running":
            self.slots.hold(name)
        else:
            self.admit(job)

    def _claim(self, name: str, uid: str | None) -> bool:
        """Tie the per-name state to ``uid``; False when the body is not of the Job that has the name now.

        kopf orders events per uid, not per name, and a listed body (resync) may be older than the
        watch's, so a body of another uid than the one tracked is checked against a fresh read (one GET,
        only when a name is re-used). If it is the current Job, the old one is gone (two Jobs never share
        a name at once): its name-keyed state is forgotten as its DELETED would, and its uid retired so
        that its late events, DELETED included, no longer touch the new Job's state.
        """
        if not uid:
            return True
        if uid in self._retired:
            return False
        held = self._uids.get(name)
        if held is None or held == uid:
            self._uids[name] = uid
            return True
        current = self.api.get_or_none(self._crd_path("jobs", name))
        if current is None or current["metadata"].get("uid") != uid:
            return False
        self._forget_name(name, held)
        self._uids[name] = uid
        return True

    def _adopt(self, name: str, uid: str) -> None:
        """A fresh read found ``uid`` under ``name`` (the current Job, newer than any event handled): tie the
        name to it. Unlike a superseding event this keeps the slot and the place in line, which the
        start in progress now holds for this very Job."""
        held = self._uids.get(name)
        if held == uid:
            return
        if held is not None:
            self._retire(held)
            self._phases.pop(name, None)
            self._in_flight.pop(name, None)
        with self._locks_guard:
            self._retired.pop(uid, None)
        self._uids[name] = uid

    def _retire(self, uid: str) -> None:
        with self._locks_guard:
            self._retired[uid] = None
            while len(self._retired) > RETIRED_UIDS_KEPT:
                self._retired.popitem(last=False)

    def _keep_body(self, job: dict[str, Any], phase: str | None) -> None:
        """Remember the watch's latest body of a Job that may still start; forget it once it cannot.

        kopf orders events per uid, not per name, so the events of a Job deleted and re-created under
        the same name may interleave. A body whose uid differs from the one kept is therefore not
        trusted either way: the entry is dropped and ``start_job`` reads the Job instead.
        """
        name, uid = job["metadata"]["name"], job["metadata"].get("uid")
        kept = self._bodies.get(name)
        if phase in flow.TERMINAL_PHASES or phase == "Running":
            self._bodies.pop(name, None)
        elif kept is None or kept["metadata"].get("uid") == uid:
            self._bodies[name] = job
        else:
            self._bodies.pop(name, None)

    def on_pod(self, pod: dict[str, Any]) -> None:
        # The Job's name from the owner reference: the label holds a short form when the name is long.
        job = _owner_name(pod) or (pod["metadata"].get("labels") or {}).get(JOB_LABEL)
        if job and flow.pod_phase(pod) is not None:
            self.complete(job, pod)

    def on_sessionkey(self, event_type: str | None, sk: dict[str, Any]) -> None:
        md = sk["metadata"]
        if event_type == "DELETED" or not md.get("deletionTimestamp") or FINALIZER not in (md.get("finalizers") or []):
            return
        self.forget_key(sk)

    def on_trigger(self, trigger: dict[str, Any]) -> None:
        md = trigger["metadata"]
        self._triggers[md["name"]] = trigger
        old = trigger.get("status") or {}
        status = flow.trigger_status(trigger.get("spec") or {}, self.store, md.get("generation"),
                                     old.get("conditions"))
        if {k: old.get(k) for k in status} != status:
            self.api.patch(self._crd_path("triggers", md["name"], "status"), {"status": status})

    def on_trigger_deleted(self, name: str) -> None:
        self._triggers.pop(name, None)

    def _trigger(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """The Job's Trigger as the watch last delivered it (one GET the first time a name is asked for)."""
        name = str(job["spec"].get("trigger", ""))
        cached = self._triggers.get(name)
        if cached is None:
            cached = self.api.get_or_none(self._crd_path("triggers", name))
            if cached is not None:
                self._triggers[name] = cached
        return cached

    # ---- 1. admit ----------------------------------------------------------------------------------

    def admit(self, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        with self._lock(name):
            if not self._claim(name, job["metadata"].get("uid")):
                return  # a listed body of a Job the watch has since seen replaced or deleted
            trigger = self._trigger(job)
            refused = flow.refusal(name, job["spec"], trigger, self.store)
            if refused is not None:
                self._refuse(job, refused)
                self._comment_refusal_locked(name)
                return
            self._order[name] = _arrival(job)
            self.slots.enqueue(name, self._order[name])
            place = self.slots.position(name)
            if place is not None and place > self.slots.free and (job.get("status") or {}).get("phase") != "Queued":
                # Marked Queued only if it is still waiting a moment later (``_mark_queued``): a Job that
                # gets a slot within QUEUED_AFTER_SECONDS goes straight to Running, one write fewer.
                self._unmarked.setdefault(name, (time.monotonic(), now_rfc3339()))
                self._mark.set()
        self._wake.set()

    def _next_mark_in(self) -> float:
        due = [since + QUEUED_AFTER_SECONDS for since, _ in list(self._unmarked.values())]
        return max(0.05, min(due) - time.monotonic()) if due else 5.0

    def _mark_queued(self) -> None:
        """Write ``Queued`` for each Job that has waited for a slot longer than QUEUED_AFTER_SECONDS."""
        since = {name: mark[0] for name, mark in list(self._unmarked.items())}
        for name in waited_longer_than(since, time.monotonic(), QUEUED_AFTER_SECONDS):
            with self._lock(name):
                marked = self._unmarked.pop(name, None)
                if marked is None or self.slots.position(name) is None:
                    continue  # it got its slot, or went away, in the meantime
                job = self._bodies.get(name) or self.api.get_or_none(self._crd_path("jobs", name))
                phase = None if job is None else (job.get("status") or {}).get("phase")
                if job is None or phase in flow.TERMINAL_PHASES | {"Queued", "Running"}:
                    continue
                updated = self._patch_job(job, {
                    "phase": "Queued", "queuedAt": marked[1],
                    "conditions": set_condition((job.get("status") or {}).get("conditions"), "Started", False,
                                                "WaitingForSlot", f"Waiting for one of {self.slots.capacity} "
                                                "job slots (maxConcurrentJobs).", None)})
                self._keep_body(updated, "Queued")

    def _fail_unstarted(self, job: dict[str, Any], watched: bool, reason: str, message: str,
                        staging: JobDir | None = None) -> None:
        """End a Job that was refused for good before its Pod ran: ``Failed``, slot and staging freed.

        From a watch body the refusal is confirmed on a fresh read first (``_StaleBody``): the Job may
        have changed since the event.
        """
        name = job["metadata"]["name"]
        if watched:
            raise _StaleBody(name)
        if staging is not None:
            staging.remove()
        self.slots.release(name)
        self._refuse(job, flow.Refusal("Failed", None, reason, message))

    def _refuse(self, job: dict[str, Any], refused: flow.Refusal) -> None:
        conditions = set_condition((job.get("status") or {}).get("conditions"), "Started", False,
                                   refused.condition_reason, refused.message, None)
        self._patch_job(job, {"phase": refused.phase, "reason": refused.reason, "conditions": conditions,
                              "completedAt": now_rfc3339()})
        self._track(job["metadata"]["name"], refused.phase)  # a stale event of the Job must not admit it again
        emit("job_refused", job=job["metadata"]["name"], reason=refused.reason or refused.condition_reason)
        # The spec's own refusal events (§9.3, §10), by the names pi-dispatch hosts log them under.
        kind = str((job.get("spec") or {}).get("forge") or "local")  # the job's forge kind (spec §1.2)
        if refused.reason == JobReason.SESSIONS_DIR_UNSET:
            emit("refused_sessions_dir_unset", kind=kind)
        elif refused.reason == JobReason.CONFIG_REFUSED:
            emit("refused_config", kind=kind, refunded=False)  # refused before any budget was reserved
        self._event(job, "Warning", refused.condition_reason, refused.message)

    def comment_refusal(self, name: str) -> None:
        """Post a refused Job's issue comment if it is still owed (restart, resync)."""
        with self._lock(name):
            self._comment_refusal_locked(name)

    def _comment_refusal_locked(self, name: str) -> None:
        """One comment per delivery: the ``Commented`` condition, then the marker among the issue's comments.

        A kill right after the POST leaves the condition unwritten; the next attempt finds the marker
        and records ``AlreadyPosted`` instead of posting again.
        """
        job = self.api.get_or_none(self._crd_path("jobs", name))
        if job is None or not _comment_pending(job):
            return
        spec, status = job["spec"], job.get("status") or {}
        number = spec.get("issue") or spec.get("pullRequest")
        body = refusal_comment(str(status.get("reason")), str(spec.get("trigger", "")), job["metadata"]["uid"])
        if body is None:
            return
        if self.forge is None or not isinstance(number, int):
            why = ("No GitHub client is configured for the operator (github.app or github.token values), so the "
                   "refusal was not commented on the issue.") if self.forge is None else \
                "The Job names no issue or pull request to comment on."
            self._set_commented(job, False, "NotCommented", why)
            return
        try:
            posted = self.forge.comment_once(str(spec.get("repository")), number, body, job["metadata"]["uid"])
        except GitHubError as exc:
            emit("refusal_comment_failed", job=name, status=exc.status)
            self._set_commented(job, False, "CommentFailed",
                                f"Posting the refusal comment failed ({exc}); retried for an hour.")
            return
        if posted:
            failpoints.at("commented", name)
        emit("refusal_commented", job=name, posted=posted)
        self._set_commented(job, True, "Posted" if posted else "AlreadyPosted",
                            "The refusal was explained in a comment on the issue." if posted else
                            "The refusal comment was already on the issue (posted before a restart).")

    def _set_commented(self, job: dict[str, Any], ok: bool, reason: str, message: str) -> None:
        conditions = set_condition((job.get("status") or {}).get("conditions"), COMMENTED, ok, reason, message, None)
        self._patch_job(job, {"conditions": conditions})

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
        """A start that failed for a passing reason (GitHub or apiserver outage, an old Pod of the name
        not yet collected): back in line at its old place, but not before its back-off ends.

        A burst is never dropped and FIFO order among ready Jobs survives errors, yet the failing Job
        does not hold the head of the queue: the Jobs behind it start meanwhile. The first failure in a
        row is written on the Job (``Started`` False, ``StartRetrying``); later retries only log, so a
        long outage costs one write, and a start that works costs none.
        """
        failures = self._failures.get(name, 0) + 1
        self._failures[name] = failures
        delay = backoff_seconds(failures)
        log.warning("starting job %s failed (attempt %d), retried in %.0f s: %s", name, failures, delay, exc)
        emit("job_start_retrying", job=name, attempt=failures, delaySeconds=delay, error=type(exc).__name__)
        self._bodies.pop(name, None)  # the retry reads the Job afresh
        self.slots.defer(name, self._order.get(name, ("", name)), delay)
        if failures == 1:
            self._guarded(self._note_retrying, name, exc)

    def _note_retrying(self, name: str, exc: Exception) -> None:
        with self._lock(name):
            job = self.api.get_or_none(self._crd_path("jobs", name))
            if job is None or self.slots.position(name) is None:
                return  # gone, or started by now
            status = job.get("status") or {}
            if status.get("phase") in flow.TERMINAL_PHASES | {"Running"}:
                return
            message = (f"Starting the job failed ({type(exc).__name__}: {str(exc)[:300]}); it is retried with a "
                       "back-off of up to a minute, and the Jobs queued behind it start meanwhile.")
            self._patch_job(job, {"conditions": set_condition(status.get("conditions"), "Started", False,
                                                              "StartRetrying", message, None)})

    def start_job(self, name: str) -> None:
        with self._lock(name):
            watched = self._bodies.get(name)
            if watched is not None:
                try:
                    self._start_locked(name, watched, watched=True)
                    return
                except _StaleBody:
                    if self._bodies.get(name) is watched:
                        self._bodies.pop(name, None)
            self._start_locked(name, self.api.get_or_none(self._crd_path("jobs", name)), watched=False)

    def _start_locked(self, name: str, job: dict[str, Any] | None, *, watched: bool) -> None:
        """Start ``job`` from the watch's body (``watched``) or from a fresh read.

        A watched body saves a GET before the Pod, but it may be behind the Job: this operator is the
        only writer of Job status, yet the Job may have been deleted and re-created under its name, or
        edited. So it is used only for the straight path, and the ``Running`` write carries its
        resourceVersion: if the Job changed since, the write is refused (409) and the start is redone
        from a fresh read, which finds the Pod (journal written) or, for a re-created Job, a Pod that
        belongs to the old uid (garbage-collected; the pump retries). Anything off the straight path
        (a refusal, a token GitHub refused) is decided on a fresh read too.
        """
        if job is None:
            self.slots.release(name)
            return
        status = job.get("status") or {}
        if watched and (status.get("phase") in flow.TERMINAL_PHASES or self._phases.get(name) in flow.TERMINAL_PHASES):
            raise _StaleBody(name)
        if status.get("phase") in flow.TERMINAL_PHASES:
            self.slots.release(name)
            return
        trigger = self._trigger(job)
        refused = flow.refusal(name, job["spec"], trigger, self.store)
        if refused is not None or trigger is None:
            if watched:
                raise _StaleBody(name)
            self.slots.release(name)
            if refused is not None:
                self._refuse(job, refused)
                self._comment_refusal_locked(name)
            return
        uid = job["metadata"]["uid"]
        if not watched:
            self._adopt(name, uid)
        jd = JobDir(self.s.staging_dir, uid)
        # A Pod can exist only if an operator process got as far as its create: after the host verdict
        # was journaled, or (a power cut losing a journal not yet synced) for a Job listed at start-up.
        # Otherwise this is a first start and the create goes ahead without a lookup.
        host = jd.read(HOST) if jd.exists() else None
        pod = None
        if uid in self._preexisting or host is not None:
            pod = self.api.get_or_none(self._pod_path(pod_name(name)))
        if pod is not None and _owner_uid(pod) != uid:
            raise RuntimeError(f"Pod {pod_name(name)} belongs to an earlier Job of that name; waiting for "
                               "the garbage collector to remove it")
        if pod is not None and host is not None:
            jd.sync(HOST)  # a restart after a kill between the create and the sync: the page cache still has it
        if pod is None:
            # Credentials first: a mint GitHub refuses (4xx: the App is not installed on the repository,
            # wrong id or key) ends the Job before anything is staged; an outage (no answer, 5xx) raises,
            # and the pump puts the Job back in line at its place.
            try:
                token = self._job_token(job, trigger)
            except GitHubError as exc:
                if exc.status == 0 or exc.status >= 500:
                    raise
                self._fail_unstarted(job, watched, "GitHubTokenFailed",
                                     f"The GitHub App could not mint an installation token for this job ({exc}); "
                                     "nothing ran. Check the App's installation and permissions (pidispatch "
                                     "doctor), then re-create the Job.")
                return
            # No Pod yet, so nobody reads the staging copy: judging and staging again is safe.
            host = self._stage(job, trigger, jd)
            try:
                pod = self._create_pod(job, trigger, host, token)
            except ApiError as exc:
                if not pod_create_refused_for_good(exc.status):
                    raise  # an outage or a conflict: the pump retries after a back-off
                self._fail_unstarted(job, watched, "PodRefused",
                                     f"The apiserver refused the job Pod ({exc.status}: {exc.message[:400]}); "
                                     "nothing ran and it is not retried. Fix the cause (a ResourceQuota, an "
                                     "admission policy, RBAC), then re-create the Job.", staging=jd)
                return
            failpoints.at("pod-created", name)
            if host is not None:
                # The journal went to the page cache only (``_stage``); made durable now, off the path
                # to the Pod and before the Job reads Running. What a power cut leaves at each point:
                # before the create, no Pod, and staging again is safe; between the create and this
                # sync, a Pod and maybe no (or a torn) host.json: the Job was listed at start-up, so
                # the restarted operator looks the Pod up, finds it, and stages nothing; the Job then
                # ends without a promotion (no verdict to promote by), the store untouched.
                jd.sync(HOST)
                self._in_flight[name] = str(host.get("key"))
                self._guarded(self._ensure_sessionkey, host)
        patch: dict[str, Any] = {
            "phase": "Running", "podName": pod["metadata"]["name"], "startedAt": now_rfc3339(),
            "session": _host_session(host),
            "conditions": set_condition(status.get("conditions"), "Started", True, "PodCreated",
                                        _start_message(host), None),
        }
        try:
            self._patch_job(job, patch, resource_version=job["metadata"].get("resourceVersion") if watched else None)
        except ApiError as exc:
            if watched and exc.status in (404, 409):
                raise _StaleBody(name) from exc
            raise
        self._track(name, "Running")
        self._preexisting.discard(uid)
        self._unmarked.pop(name, None)
        if flow.pod_phase(pod) is not None:  # it already ended while we were away
            threading.Thread(target=self._guarded, args=(self.complete, name, pod), daemon=True).start()

    def _head(self, job: dict[str, Any], trigger_spec: dict[str, Any]) -> Head | None:
        """A resume-armed PR job's head from the GitHub API; ``None`` (use ``spec.resolved``) without a client."""
        spec = job["spec"]
        if self.forge is None or not flow.needs_head_lookup(spec, trigger_spec):
            return None
        return self.forge.pull_head(str(spec.get("repository")), int(spec["pullRequest"]))

    def _stage(self, job: dict[str, Any], trigger: dict[str, Any], jd: JobDir) -> dict[str, Any] | None:
        trigger_spec = trigger.get("spec") or {}
        ref, no_head = flow.key_and_reason(job["spec"], trigger_spec, self._head(job, trigger_spec))
        if no_head is not None:
            # No refusal and no comment (spec rule 21): the job runs as it would without resume.
            emit("pr_head_unresolved", job=job["metadata"]["name"], reason=no_head.value)
        if ref is None:
            return None
        run = (trigger.get("spec") or {}).get("run") or {}
        jd.prepare()
        record: dict[str, Any] = {"key": ref.key, "piVersion": run.get("piVersion"), "model": run.get("model"),
                                  "venue": flow.VENUE, "mounted": False}
        if not self.s.staging_claim:
            log.error("PI_DISPATCH_STAGING_CLAIM is unset: job %s runs without its session", job["metadata"]["name"])
        else:
            began = time.perf_counter()
            resolution = resolve(self.store, ref.key, jd.session, venue=flow.VENUE, pi_version=run.get("piVersion"),
                                 model=run.get("model"))
            metrics.GATE_SECONDS.observe(time.perf_counter() - began)
            if resolution is not None:
                verdict = resolution.verdict
                metrics.RESOLUTIONS.labels(verdict.reason).inc()
                record.update(mounted=True, resume=verdict.resume, reason=verdict.reason, bytes=verdict.bytes)
        record.update(forge=ref.forge, repository=ref.repository, branch=ref.branch)
        jd.write(HOST, record, durable=False)  # synced right after the Pod's create (start_job says why)
        failpoints.at("staged", job["metadata"]["name"])
        return record

    def _job_token(self, job: dict[str, Any], trigger: dict[str, Any]) -> tuple[str, str] | None:
        """The Secret (name, key) the job Pod's ``GH_TOKEN`` comes from; mints and stores one for ``app``.

        The minted token goes only into the per-job Secret (owned by the Job). The operator may create
        Secrets but not read them, so when the Secret is already there (a restart after creating it) the
        token just minted is revoked and the Secret's own is used.
        """
        md, spec = job["metadata"], job["spec"]
        source = flow.auth_source(spec, trigger.get("spec") or {}, self.store)
        credential = job_credential(source, str(spec.get("repository", "")), self.s.github)
        if isinstance(credential, SecretRef):
            return credential.name, credential.key
        if not isinstance(credential, Mint):
            return None
        if self.forge is None:  # unreachable: a Mint needs the App, and the App makes a Forge
            raise GitHubError("POST", "/app/installations/{id}/access_tokens", 400, "no GitHub App client")
        token = self.forge.mint_job_token(credential.repository)
        name = token_secret_name(md["uid"])
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(token.expires_at))
        try:
            self.api.create(f"/api/v1/namespaces/{self.ns}/secrets",
                            job_token_secret(md["name"], md["uid"], self.ns, name, token.value, expires))
        except ApiError as exc:
            if exc.status != 409:
                self.forge.revoke(token)
                raise
            self.forge.revoke(token)
        emit("job_token_minted", job=md["name"], expiresAt=expires)
        return name, TOKEN_SECRET_KEY

    def _create_pod(self, job: dict[str, Any], trigger: dict[str, Any], host: dict[str, Any] | None,
                    token: tuple[str, str] | None = None) -> dict[str, Any]:
        md, spec = job["metadata"], job["spec"]
        run = (trigger.get("spec") or {}).get("run") or {}
        mounted = bool(host and host.get("mounted"))
        manifest = job_pod(PodInputs(
            job_name=md["name"], job_uid=md["uid"], namespace=self.ns,
            image=run.get("image") or self.s.job_image, command=list(self.s.job_command),
            env={**dict(self.s.job_env), **flow.pod_env(md["name"], spec, trigger.get("spec") or {})},
            staging_claim=self.s.staging_claim if mounted else None,
            session_subpath=f"{md['uid']}/session" if mounted else None,
            host_resume=bool(host and host.get("resume")),
            run_as_user=job_pod_uid(),
            github_token=token,
        ))
        try:
            return self.api.create(self._pod_path(), manifest)
        except ApiError as exc:
            if exc.status != 409:
                raise
            existing = self.api.get_or_none(self._pod_path(manifest["metadata"]["name"]))
            if existing is None:
                raise
            if _owner_uid(existing) != md["uid"]:
                raise RuntimeError(f"Pod {manifest['metadata']['name']} belongs to an earlier Job of that name; "
                                   "waiting for the garbage collector to remove it") from None
            return existing

    # ---- 3. complete -------------------------------------------------------------------------------

    def complete(self, name: str, pod: dict[str, Any] | None) -> None:
        with self._lock(name):
            job = self.api.get_or_none(self._crd_path("jobs", name))
            if job is None:
                return
            status = job.get("status") or {}
            uid = job["metadata"]["uid"]
            jd = JobDir(self.s.staging_dir, uid)
            if status.get("phase") in flow.TERMINAL_PHASES:
                self._release(name, jd)
                return
            if pod is not None and _owner_uid(pod) != uid:
                return  # a Pod of an earlier Job with the same name
            outcome = flow.pod_phase(pod)
            if outcome is None:
                return
            host = jd.read(HOST) if jd.exists() else None
            report = parse_report(flow.termination_message(pod)) or RunnerReport()
            verdict = _host_verdict(host)
            promotion = None
            if verdict is not None and outcome == "Succeeded":
                promotion = self._promote_once(name, jd, host or {}, report)
            session = merge_session(verdict, report.session, promotion)
            conditions = set_condition(status.get("conditions"), "Completed", outcome == "Succeeded",
                                       "PodSucceeded" if outcome == "Succeeded" else "PodFailed",
                                       _end_message(outcome, pod, promotion), None)
            if host and host.get("key"):
                # Before the Job's terminal status: a Job that reads terminal never comes back here, and
                # writing the same SessionKey facts twice after a kill is harmless.
                last = {"lastJob": name, "lastReason": (session or {}).get("reason"),
                        "judgedWith": {"piVersion": host.get("piVersion"), "model": host.get("model")}}
                if promotion is not None and promotion.promoted:
                    last["lastPromotedAt"] = now_rfc3339()
                self._guarded(self._ensure_sessionkey, host)  # gone if a kill came between Pod and create
                self._guarded(self._update_sessionkey, host["key"], last)
            self._patch_job(job, {"phase": outcome, "completedAt": now_rfc3339(), "session": session,
                                  "tokens": report.tokens or None, "conditions": conditions})
            failpoints.at("status-written", name)
            self._track(name, outcome)
            self._count_tokens(report, session)
            if promotion is not None:
                self._event(job, "Normal" if promotion.promoted else "Warning",
                            "Promoted" if promotion.promoted else "NotPromoted",
                            f"Transcript promoted ({promotion.bytes} bytes)." if promotion.promoted else
                            f"Transcript not promoted: {promotion.reason}.")
            self._release(name, jd)

    def _promote_once(self, job_name: str, jd: JobDir, host: dict[str, Any], report: RunnerReport
                      ) -> PromotionResult:
        """Promote at most once per Job, even across a kill anywhere in here (the journal decides)."""
        done = jd.read(PROMOTION)
        key = host["key"]
        if done and done.get("state") == "done":
            return PromotionResult(bool(done.get("promoted")), str(done.get("reason")), done.get("bytes"))
        staged = os.path.join(jd.session, sidecars.TRANSCRIPT)
        canonical = os.path.join(self.store.sessions_dir or "", key, sidecars.TRANSCRIPT)
        if done and done.get("state") == "started":
            landed = self._recover_promotion(key, canonical, done)
            if landed:
                result = PromotionResult(True, "promoted", done.get("size"))
                jd.write(PROMOTION, {"state": "done", "promoted": True, "reason": "promoted",
                                     "bytes": result.bytes})
                return result
            started = done
        else:
            # Capped: an oversized staged file is refused by ``promote`` without being read, so it is not hashed.
            digest = file_digest(staged, self.store.max_bytes)
            st = fsio.lstat_or_none(canonical)
            started = {"state": "started", "size": digest[0] if digest else None,
                       "sha256": digest[1] if digest else None,
                       "before": list(fsio.Identity.of(st)) if st is not None else None}
            jd.write(PROMOTION, started)
        failpoints.at("promotion-started", job_name)
        began = time.perf_counter()
        result = promote(self.store, key, jd.session, host_resume=bool(host.get("resume")), venue=host.get("venue"),
                         pi_version=host.get("piVersion"), model=host.get("model"), context=report.context,
                         seams=_JournalSeams(job_name, jd, started, os.path.join(self.store.sessions_dir or "", key)))
        metrics.PROMOTION_SECONDS.observe(time.perf_counter() - began)
        metrics.PROMOTIONS.labels(result.reason).inc()
        failpoints.at("promoted", job_name)
        jd.write(PROMOTION, {"state": "done", "promoted": result.promoted, "reason": result.reason,
                             "bytes": result.bytes})
        return result

    def _recover_promotion(self, key: str, canonical: str, started: dict[str, Any]) -> bool:
        """After a kill during promotion: did that attempt's swap land? Release its lock if it left one.

        Landed means the canonical file holds the staged bytes under an identity other than the one it had
        before that attempt. A swap that landed is not promoted again (no second chain increment); if the
        kill came before its stamps, the ``(pending)`` venue makes the next delivery start cold, as the spec
        says of an interrupted promotion. A lock is removed only when it is provably the one that attempt
        took (same ``dev:ino:size:mtime`` as journaled right after taking it); any other lock is left alone.
        """
        now = fsio.lstat_or_none(canonical)
        landed = (now is not None and list(fsio.Identity.of(now)) != started.get("before")
                  and list(file_digest(canonical) or ()) == [started.get("size"), started.get("sha256")])
        lock_path = os.path.join(os.path.dirname(canonical), sidecars.LOCK)
        lock = fsio.lstat_or_none(lock_path)
        ours = lock is not None and started.get("lock") == list(fsio.Identity.of(lock))
        if ours:
            os.unlink(lock_path)
        emit("session_promotion_recovered", key=key, landed=landed, lockReleased=ours)
        return landed

    def _release(self, name: str, jd: JobDir) -> None:
        self._in_flight.pop(name, None)
        jd.remove()
        if self.slots.release(name):
            self._wake.set()

    def _forget(self, name: str, uid: str | None) -> None:
        """A Job's DELETED: its staging and uid-keyed state always; its name-keyed state only if it is
        still that Job's (a Job re-created under the name may have taken it over, and runs on)."""
        if uid:
            JobDir(self.s.staging_dir, uid).remove()
            self._preexisting.discard(uid)
            held = self._uids.get(name)
            if held is not None and held != uid:  # the name is another Job's now: only this uid's traces go
                self._retire(uid)
                if (self._bodies.get(name) or {}).get("metadata", {}).get("uid") == uid:
                    self._bodies.pop(name, None)
                return
        self._forget_name(name, uid)

    def _forget_name(self, name: str, uid: str | None) -> None:
        """Drop what is kept under ``name`` for the Job ``uid`` (deleted, or superseded by a new Job)."""
        if uid:
            self._retire(uid)
        if (self._bodies.get(name) or {}).get("metadata", {}).get("uid") in (uid, None):
            self._bodies.pop(name, None)
        self._uids.pop(name, None)
        self._phases.pop(name, None)
        self._order.pop(name, None)
        self._unmarked.pop(name, None)
        self._in_flight.pop(name, None)
        self._failures.pop(name, None)
        if self.slots.release(name):
            self._wake.set()
        self._gauges()

    # ---- SessionKeys -------------------------------------------------------------------------------

    def _ensure_sessionkey(self, host: dict[str, Any]) -> None:
        """Create the key's SessionKey if it is new. Its status is written once, when the job ends."""
        key = str(host.get("key"))
        if not is_key(key) or self.api.get_or_none(self._crd_path("sessionkeys", key)) is not None:
            return
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SessionKey",
                "metadata": {"name": key, "labels": MANAGED_BY, "finalizers": [FINALIZER]},
                "spec": {"forge": host.get("forge"), "repository": host.get("repository"),
                         "branch": host.get("branch")}}
        try:
            self.api.create(self._crd_path("sessionkeys"), body)
        except ApiError as exc:
            if exc.status != 409:
                raise

    def _update_sessionkey(self, key: str, last: dict[str, Any] | None) -> None:
        if self.store.sessions_dir is None or not is_key(key):
            return
        current = self.api.get_or_none(self._crd_path("sessionkeys", key))
        if current is None or current["metadata"].get("deletionTimestamp"):
            return
        old = current.get("status") or {}
        kept = {k: old[k] for k in ("lastJob", "lastReason", "lastPromotedAt", "judgedWith") if k in old}
        facts = {**kept, **(last or {})}
        # Judge the next delivery as if it ran the last job's pi and model; unknown → the stamped pi version.
        judged = facts.get("judgedWith") or {}
        view = inspect_key(self.store, key, pi_version=judged.get("piVersion"), model=judged.get("model"))
        status = flow.sessionkey_status(view, old.get("conditions"), facts)
        if {k: old.get(k) for k in status} != status:
            self.api.patch(self._crd_path("sessionkeys", key, "status"), {"status": status})

    def refresh_sessionkeys(self) -> None:
        """Time passes, so ``Resumable`` goes stale (TTL, age): recompute it for every key.

        Keys with a job of this process in flight are left alone: that job's end writes their status
        with fresher facts anyway, and a refresh in between would be one more write that it overwrites
        (for a new key, the SessionKey is created with the Pod and its first status is the job's end).
        """
        if self.store.sessions_dir is None:
            return
        busy = set(self._in_flight.values())
        for sk in self.api.list(self._crd_path("sessionkeys")):
            if sk["metadata"]["name"] not in busy:
                self._guarded(self._update_sessionkey, sk["metadata"]["name"], None)

    def _delete_sessionkey(self, key: str) -> None:
        try:
            self.api.delete(self._crd_path("sessionkeys", key))
        except ApiError as exc:
            if exc.status != 404:
                raise

    def forget_key(self, sk: dict[str, Any]) -> None:
        """``kubectl delete sessionkey <key>``: remove that key's directory, then let the object go."""
        md = sk["metadata"]
        key = md["name"]
        if self.store.sessions_dir is not None and is_key(key):
            path = os.path.join(self.store.sessions_dir, key)
            st = fsio.lstat_or_none(path)
            if fsio.is_real_dir(st):
                shutil.rmtree(path)  # fd-based on Linux: never follows a link inside the directory
            elif st is not None:
                os.unlink(path)  # a planted link or file at the key's name: remove the entry, not its target
            emit("session_forgotten", key=key)
        finalizers = [f for f in md.get("finalizers") or [] if f != FINALIZER]
        self.api.patch(self._crd_path("sessionkeys", key),
                       {"metadata": {"finalizers": finalizers, "resourceVersion": md["resourceVersion"]}})

    # ---- timers ------------------------------------------------------------------------------------

    def resync(self) -> None:
        """Catch what a missed watch event would lose: ended Pods of running Jobs, unqueued Jobs."""
        for job in sorted(self.api.list(self._crd_path("jobs")), key=_arrival):
            name = job["metadata"]["name"]
            phase = (job.get("status") or {}).get("phase")
            if phase == "Running":
                if not self._claim(name, job["metadata"].get("uid")):
                    continue  # listed before the watch saw it replaced or deleted
                self.slots.hold(name)
                pod = self.api.get_or_none(self._pod_path(pod_name(name)))
                if flow.pod_phase(pod) is not None:
                    self._guarded(self.complete, name, pod)
            elif phase not in flow.TERMINAL_PHASES:
                self._guarded(self.admit, job)
            elif _comment_pending(job):
                self._guarded(self.comment_refusal, name)
        self._gauges()

    def sweep(self) -> None:
        """The reaper (store TTL), orphaned staging directories, and the store gauges."""
        if self.store.sessions_dir is not None:
            for event in reap(self.store):  # each event is logged by the reaper itself
                if event["event"] == "reaped_session" and is_key(event.get("key", "")):
                    # The conversation is gone; its SessionKey would only say so forever.
                    self._guarded(self._delete_sessionkey, event["key"])
            keys, size = _store_size(self.store.sessions_dir)
            metrics.STORE_KEYS.set(keys)
            metrics.STORE_BYTES.set(size)
        live = {job["metadata"]["uid"] for job in self.api.list(self._crd_path("jobs"))
                if (job.get("status") or {}).get("phase") not in flow.TERMINAL_PHASES}
        for uid in staged_uids(self.s.staging_dir):
            path = os.path.join(self.s.staging_dir, uid)
            st = fsio.lstat_or_none(path)
            if uid not in live and st is not None and time.time() - st.st_mtime > STAGING_GRACE_SECONDS:
                self._sweep_dir(uid, path)

    def _sweep_dir(self, uid: str, path: str) -> None:
        """Remove one orphaned staging directory and log what happened: swept, or why not (retried next sweep)."""
        failures: list[str] = []
        shutil.rmtree(path, onerror=lambda _fn, where, info: failures.append(f"{where}: {info[1]}"))
        if failures:
            emit("staging_sweep_failed", job=uid, errors=len(failures), first=failures[0])
        else:
            emit("staging_swept", job=uid)

    # ---- small helpers -----------------------------------------------------------------------------

    def _patch_job(self, job: dict[str, Any], status: dict[str, Any], resource_version: str | None = None
                   ) -> dict[str, Any]:
        """Merge ``status`` into the Job's status; with ``resource_version``, only if the Job is still that version."""
        md = job["metadata"]
        status.setdefault("observedGeneration", md.get("generation"))
        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        updated = self.api.patch(self._crd_path("jobs", md["name"], "status"), body)
        if "phase" in status:
            metrics.JOB_TRANSITIONS.labels(status["phase"]).inc()
        return updated

    def _event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        md = obj["metadata"]
        stamp = now_rfc3339()
        body = {
            "metadata": {"generateName": f"{md['name'][:200]}.", "namespace": self.ns},
            "involvedObject": {"apiVersion": obj.get("apiVersion", f"{GROUP}/{VERSION}"),
                               "kind": obj.get("kind", "Job"), "name": md["name"], "namespace": self.ns,
                               "uid": md.get("uid")},
            "type": type_, "reason": reason, "message": message[:1024],
            "source": {"component": "pi-dispatch-operator"}, "reportingComponent": "pi-dispatch-operator",
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        self._guarded(self.api.create, f"/api/v1/namespaces/{self.ns}/events", body)

    def _track(self, name: str, phase: str | None) -> None:
        self._phases[name] = phase or "Pending"

    def _gauges(self) -> None:
        counts: dict[str, int] = {}
        for phase in list(self._phases.values()):
            counts[phase] = counts.get(phase, 0) + 1
        for phase in ("Pending", "Refused", "Queued", "Running", "Succeeded", "Failed"):
            metrics.JOBS.labels(phase).set(counts.get(phase, 0))
        metrics.QUEUE_DEPTH.set(self.slots.queued)
        metrics.SLOTS_IN_USE.set(self.slots.running)

    def _count_tokens(self, report: RunnerReport, session: dict[str, Any] | None) -> None:
        total = report.tokens.get("total")
        if total is not None:
            metrics.TOKENS.labels("resumed" if session and session.get("resumed") else "cold").inc(total)


class _JournalSeams:
    """Store seams for one promotion: journal the lock this attempt took, then the failpoint."""

    def __init__(self, job: str, jd: JobDir, started: dict[str, Any], key_dir: str) -> None:
        self.failpoints = failpoints.FailpointSeams(job)
        self.jd, self.started, self.key_dir = jd, started, key_dir

    def at(self, step: str) -> None:
        if step == "locked":
            lock = fsio.lstat_or_none(os.path.join(self.key_dir, sidecars.LOCK))
            if lock is not None:
                self.jd.write(PROMOTION, {**self.started, "lock": list(fsio.Identity.of(lock))})
        self.failpoints.at(step)


def _comment_pending(job: dict[str, Any]) -> bool:
    """A refused Job whose comment is neither recorded nor given up (``CommentFailed`` is retried a while)."""
    status = job.get("status") or {}
    if status.get("phase") != "Refused" or not posts_comment(status.get("reason")):
        return False
    done = get_condition(status.get("conditions"), COMMENTED)
    if done is None:
        return True
    if done.get("reason") != "CommentFailed":
        return False
    return _age_seconds(status.get("completedAt")) < COMMENT_RETRY_SECONDS


def _age_seconds(stamp: Any) -> float:
    try:
        return time.time() - calendar.timegm(time.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return float("inf")


def _arrival(job: dict[str, Any]) -> tuple[str, str]:
    md = job["metadata"]
    return md.get("creationTimestamp") or "", md["name"]


def _owner_uid(pod: dict[str, Any]) -> str | None:
    return next((ref.get("uid") for ref in pod["metadata"].get("ownerReferences") or [] if ref.get("controller")),
                None)


def _owner_name(pod: dict[str, Any]) -> str | None:
    return next((ref.get("name") for ref in pod["metadata"].get("ownerReferences") or []
                 if ref.get("controller") and ref.get("kind") == "Job"), None)


def pod_create_refused_for_good(status: int) -> bool:
    """A Pod create the apiserver answered with a 4xx other than 409 (conflict) or 429 (throttled) is final.

    422 (invalid), 403 (forbidden: RBAC, a ResourceQuota, an admission policy), 400 and the like come
    back the same however often the create is repeated; retrying them would only hold a slot forever.
    """
    return 400 <= status < 500 and status not in (409, 429)


def _host_verdict(host: dict[str, Any] | None) -> HostVerdict | None:
    if not host or not host.get("mounted"):
        return None
    return HostVerdict(bool(host.get("resume")), str(host.get("reason")), host.get("bytes"))


def _host_session(host: dict[str, Any] | None) -> dict[str, Any] | None:
    verdict = _host_verdict(host)
    return None if verdict is None else {"resumed": verdict.resume, "reason": verdict.reason, "bytes": verdict.bytes}


def _start_message(host: dict[str, Any] | None) -> str:
    if host is None:
        return "Pod created; this job has no session key and runs as a fresh conversation."
    if not host.get("mounted"):
        return "Pod created without a session: the store could not be read (see the operator log)."
    if host.get("resume"):
        return f"Pod created; it continues the previous conversation ({host.get('bytes')} bytes staged)."
    return f"Pod created; it starts a fresh conversation: {host.get('reason')}."


def _end_message(outcome: str, pod: dict[str, Any] | None, promotion: PromotionResult | None) -> str:
    if pod is None:
        return "The job Pod disappeared before it finished; nothing was promoted."
    if outcome == "Failed":
        return "The job Pod failed; the stored conversation is unchanged."
    if promotion is None:
        return "The job Pod succeeded."
    if promotion.promoted:
        return "The job Pod succeeded and its transcript was promoted."
    return f"The job Pod succeeded; its transcript was not promoted: {promotion.reason}."


def _store_size(root: str) -> tuple[int, int]:
    keys = size = 0
    try:
        entries = os.scandir(root)
    except OSError:
        return 0, 0
    with entries:
        for entry in entries:
            if not is_key(entry.name) or not entry.is_dir(follow_symlinks=False):
                continue
            keys += 1
            st = fsio.lstat_or_none(os.path.join(entry.path, sidecars.TRANSCRIPT))
            if fsio.is_regular(st):
                size += st.st_size  # type: ignore[union-attr]
    return keys, size
