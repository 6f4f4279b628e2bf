"""Steps 2–4 in a free slot: the checkout, the token, the key, the staged session, the Pod — in that order.

:func:`start_job` is the start protocol the dispatcher calls in a free slot. It answers a value,
``Started | Refusal | Gone``, and raises only for a passing failure (the dispatcher retries it after a
back-off). It goes through four steps, each answering a value too:

* :func:`check`: is there still a Job to start, and may it run? ``Ready | Refusal | Stale | Gone``;
* :func:`launch_ready`: :func:`launch`, with a refusal turned into ``Refusal`` (``Launched | Refusal | Stale``);
* :func:`open_sessionkey`: the new key's SessionKey, with the Pod (best effort);
* :func:`record_running`: the ``Running`` write, ``Started | Stale``.

``Stale`` comes only from the watch's body (kept in the job table to save a GET before the Pod): it may
be behind the Job, so anything off the straight path is decided again on a fresh read.

``launch`` is one Job's start, idempotent across restarts:

1. a Pod can exist only if an operator process got as far as its create: after the host record was
   written, or (a power cut losing a record not yet synced) for a Job listed at start-up. Only then is
   the Pod looked up; otherwise this is a first start and the create goes ahead without a lookup;
2. the checkout (``checkout.py``: the commit the workspace will hold, from the forge API) and the
   credentials: a repository, issue or pull request the forge says is not there, or a mint GitHub
   refuses (4xx), ends the Job before anything is staged; an outage raises, and the dispatcher puts
   the Job back in line;
3. the key (the PR head from the forge API) and the staged session (``stage.py``);
4. the Pod (``pod.py``), then the host record made durable: off the path to the Pod, before the Job
   reads ``Running``. What a power cut leaves at each point: before the create, no Pod, and staging
   again is safe; between the create and the sync, a Pod and maybe no (or a torn) record: the Job was
   listed at start-up, so the restarted operator looks the Pod up, finds it, and stages nothing; the
   Job then ends without a promotion (no verdict to promote by), the store untouched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pidispatch import failpoints
from pidispatch.api.models import JobSpec
from pidispatch.api.population import trigger_population
from pidispatch.api.views import JobView, TriggerView
from pidispatch.events import emit
from pidispatch.forge.authsource import trigger_auth_source
from pidispatch.forge.checkout import Checkout, Unresolvable
from pidispatch.forge.credentials import SecretRef, job_credential
from pidispatch.forge.github import Forge, GitHubError
from pidispatch.forge.head import Head, NoHead
from pidispatch.jobflow import checkout as checkout_step
from pidispatch.jobflow import lifecycle, sessionkey
from pidispatch.jobflow.admit import refusal
from pidispatch.jobflow.capability import mint_capability
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.forks import fork_refusal, is_fork
from pidispatch.jobflow.jobtoken import job_token
from pidispatch.jobflow.key import cron_of, key_and_reason, needs_head_lookup
from pidispatch.jobflow.pod import PodOfEarlierJob, create_pod, pod_create_refused_for_good
from pidispatch.jobflow.podview import PodView
from pidispatch.jobflow.stage import session_view, stage_session, start_message
from pidispatch.jobflow.summarize import TERMINAL_PHASES, Refused, Running
from pidispatch.jobflow.table import JobTable
from pidispatch.kubeapi import ApiError
from pidispatch.manifests.pod import pod_name
from pidispatch.settings import OperatorSettings
from pidispatch.store.staging import HOST, HostRecord, JobDir

log = logging.getLogger("pidispatch.operator")


@dataclass(frozen=True)
class Launched:
    """The Job's Pod exists (``pod``: as found or created, read). ``created``: by this call (its key is now in
    flight, its SessionKey due)."""

    pod: PodView
    host: HostRecord | None
    created: bool


@dataclass(frozen=True)
class NotLaunched:
    """The start was refused for good (``refused``); ``staging_used`` says the staging must be removed."""

    refused: Refused
    staging_used: bool


@dataclass(frozen=True)
class Ready:
    """The Job may start: ``job`` (its ``uid``) under ``trigger``, both as read."""

    job: JobView
    trigger: TriggerView

    @property
    def uid(self) -> str:
        return self.job.uid


@dataclass(frozen=True)
class Refusal:
    """Refused for good, on a fresh read of ``job``: the caller frees the slot, records ``refused`` and owes
    its comment."""

    job: JobView
    refused: Refused


@dataclass(frozen=True)
class Stale:
    """The watched body the start acted on is behind the Job: the start is done again from a fresh read."""


@dataclass(frozen=True)
class Gone:
    """Nothing to start: the Job was deleted or has ended. The caller frees the slot."""


@dataclass(frozen=True)
class Started:
    """The Job's Pod exists and the Job reads ``Running`` (``launched``: the Pod, its host record)."""

    launched: Launched
    uid: str


TriggerOf = Callable[[JobView], TriggerView | None]  # a Job's Trigger, ``None`` when it has none

# A head lookup that failed this way says nothing of the pull request (a 404 or a malformed answer does).
PASSING_LOOKUP_FAILURES = frozenset({NoHead.LOOKUP_TIMEOUT, NoHead.LOOKUP_UNREACHABLE, NoHead.NO_CREDENTIALS})


def pull_head(forge: Forge | None, checkout: Checkout | None, job_spec: JobSpec) -> Head | None:
    """A pull request's head from the forge API: the checkout's answer, else one lookup; ``None`` for an issue,
    a payload fork (no lookup is needed to say fork) or an operator without a GitHub client."""
    if job_spec.pullRequest is None or job_spec.fork is True:
        return None
    if checkout is not None and checkout.head is not None:
        return checkout.head
    if forge is None:
        return None
    return forge.pull_head(job_spec.repository, job_spec.pullRequest)


def launch(settings: OperatorSettings, cluster: Cluster, forge: Forge | None, job: JobView,
           trigger: TriggerView, jd: JobDir, *, listed_at_start: bool) -> Launched | NotLaunched:
    """Start ``job`` (its Trigger already admitted it). Raises for a passing failure (retried by the caller)."""
    name, uid, spec, trigger_spec = job.name, job.uid, job.spec, trigger.spec
    if spec is None or trigger_spec is None:  # the admission refuses both before a start
        raise ValueError(f"Job {name} or its Trigger is not valid")
    host = jd.read_host()
    pod = None
    if listed_at_start or host is not None:
        found = cluster.api.get_or_none(cluster.pods(pod_name(name)))
        pod = PodView.of(found) if found is not None else None
    if pod is not None and pod.owner_uid != uid:
        raise PodOfEarlierJob(pod_name(name))
    if pod is not None:
        if host is not None:
            jd.sync(HOST)  # a restart after a kill between the create and the sync: the page cache still has it
        return Launched(pod, host, created=False)
    cron = cron_of(cluster.ns, trigger, spec)
    checkout = None
    if forge is not None and checkout_step.wanted(settings, forge):
        try:
            # an outage raises: the Job is retried
            checkout = checkout_step.resolve(forge, spec, cron, flow=trigger_spec.run.flow is not None)
        except Unresolvable as exc:
            return NotLaunched(Refused("Failed", None, "CheckoutUnresolved",
                                       f"The forge has no commit for this job ({str(exc)[:300]}); nothing ran and "
                                       "it is not retried. Check that the repository, issue or pull request "
                                       "exists and the App can read it, then re-create the Job."),
                               staging_used=False)
    head = pull_head(forge, checkout, spec)
    fork = is_fork(spec, head)
    refused = fork_refusal(spec, trigger_spec, trigger_auth_source(trigger_spec, settings.store), fork,
                           isinstance(job_credential(trigger_auth_source(trigger_spec, settings.store), "",
                                                     settings.github), SecretRef))
    if refused is not None and head is not None and head.failure in PASSING_LOOKUP_FAILURES:
        # Not known to be a fork, only unread: a refusal for good would be wrong, so the start is retried.
        raise GitHubError("GET", "/repos/{owner}/{repo}/pulls/{n}", 0, f"the head was not read ({head.failure})")
    if refused is not None:  # a fork only the forge API revealed: still no Pod and no token
        return NotLaunched(refused, staging_used=False)
    try:
        token = job_token(settings, cluster, forge, job, trigger_spec, fork)
    except GitHubError as exc:
        if exc.status == 0 or exc.status >= 500:
            raise
        return NotLaunched(Refused("Failed", None, "GitHubTokenFailed",
                                   f"The GitHub App could not mint an installation token for this job ({exc}); "
                                   "nothing ran. Check the App's installation and permissions (pidispatch "
                                   "doctor), then re-create the Job."), staging_used=False)
    # The key reads the forge's head only for a resume-armed job (docs/store-contract.md#pull-request-heads).
    ref, no_head = key_and_reason(spec, trigger.armed, head if needs_head_lookup(spec, trigger.armed) else None,
                                  cron)
    if no_head is not None:
        # No refusal and no comment (spec rule 21): the job runs as it would without resume.
        emit("pr_head_unresolved", job=name, reason=no_head.value)
    if fork and spec.fork is not True:  # the runner's prompt says a fork's job cannot push; the gateway holds it
        job = job.with_spec(spec.model_copy(update={"fork": True}))  # read-only (the capability's claims)
    gateway, capability = (mint_capability(settings, cluster, job, trigger_spec, token, time.time())
                           if settings.gateway is not None else (None, None))
    # The job's own secrets the operator knows (docs/gateway.md#inside-the-job): a minted token, the capability.
    own = tuple(d for d in (token.digest if token is not None else None, capability) if d is not None)
    host = None
    if ref is not None:
        known = cluster.sessionkey(ref.key)  # a retired key, a quarantined transcript: cold before any gate
        host = stage_session(settings, jd, ref, trigger_spec.run, name, admits=trigger_population(trigger_spec.on),
                             secrets=own,
                             held=lifecycle.held_reason(known.status if known is not None else None))
        failpoints.at("staged", name)
    moved = None
    if checkout is not None and forge is not None:
        moved = checkout_step.previous_commit(cluster, forge, host, checkout)
    try:
        pod = create_pod(settings, cluster, job, trigger_spec, host, token, checkout, moved, gateway)
    except ApiError as exc:
        if not pod_create_refused_for_good(exc.status):
            raise  # an outage or a conflict: retried after a back-off
        return NotLaunched(Refused("Failed", None, "PodRefused",
                                   f"The apiserver refused the job Pod ({exc.status}: {exc.message[:400]}); "
                                   "nothing ran and it is not retried. Fix the cause (a ResourceQuota, an "
                                   "admission policy, RBAC), then re-create the Job."), staging_used=True)
    failpoints.at("pod-created", name)
    if host is not None:
        jd.sync(HOST)
    return Launched(pod, host, created=True)


def check(settings: OperatorSettings, job: JobView | None, trigger_of: TriggerOf, *, watched: bool,
          ended: bool) -> Ready | Refusal | Stale | Gone:
    """May ``job`` start now? ``watched``: it is the watch's body, not a fresh read; ``ended``: this process
    recorded its terminal phase (so a watched body that does not say so is behind). A refusal from a
    watched body is confirmed on a fresh read first (``Stale``)."""
    if job is None:
        return Gone()
    if watched and (job.phase in TERMINAL_PHASES or ended):
        return Stale()
    if job.phase in TERMINAL_PHASES:
        return Gone()
    trigger = trigger_of(job)
    refused = refusal(job, trigger, settings.store, settings.github)
    if refused is not None or trigger is None:
        if watched:
            return Stale()
        return Refusal(job, refused) if refused is not None else Gone()
    return Ready(job, trigger)


def launch_ready(settings: OperatorSettings, cluster: Cluster, forge: Forge | None, ready: Ready, *,
                 watched: bool, listed_at_start: bool) -> Launched | Refusal | Stale:
    """:func:`launch` for a Job :func:`check` found ready. Raises for a passing failure (retried by the caller).

    A refusal for good from a watched body is confirmed on a fresh read first; on a fresh read, the
    staging it used is removed before the caller records the refusal.
    """
    jd = JobDir(settings.staging_dir, ready.uid)
    launched = launch(settings, cluster, forge, ready.job, ready.trigger, jd, listed_at_start=listed_at_start)
    if isinstance(launched, Launched):
        return launched
    if watched:
        return Stale()
    if launched.staging_used:
        jd.remove()
    return Refusal(ready.job, launched.refused)


def open_sessionkey(cluster: Cluster, host: HostRecord) -> None:
    """Create the SessionKey of a key whose Pod this process just created. Best effort: the SessionKey is a
    view of the store, and the job's end (``complete.record_end``) creates it if it is still missing."""
    try:
        sessionkey.ensure(cluster, host)
    except Exception as exc:
        log.warning("ensure failed: %s: %s", type(exc).__name__, exc)


def record_running(cluster: Cluster, job: JobView, launched: Launched, *, watched: bool) -> Started | Stale:
    """Write ``Running``. From a watched body the write carries its resourceVersion: if the Job changed since
    (edited, or deleted and re-created under its name) the apiserver refuses it, and the start is redone
    from a fresh read, which finds the Pod (host record written) or, for a re-created Job, a Pod of the
    old uid (garbage-collected; the pump retries)."""
    running = Running(launched.pod.name, session_view(launched.host), start_message(launched.host),
                      checkout_step.checkout_of(launched.pod))
    try:
        cluster.record(job, running, resource_version=job.meta.resource_version if watched else None)
    except ApiError as exc:
        if watched and exc.status in (404, 409):
            return Stale()
        raise
    return Started(launched, job.uid)



def start_job(settings: OperatorSettings, cluster: Cluster, forge: Forge | None, table: JobTable,
              trigger_of: TriggerOf, name: str) -> Started | Refusal | Gone:
    """Start the Job ``name`` (the caller holds its lock and a slot for it).

    From the watch's body when the table keeps one (it saves a GET before the Pod): only on the straight
    path, and the ``Running`` write carries its resourceVersion. This operator is the only writer of Job
    status, yet the Job may have been edited, or deleted and re-created under its name: when the body
    is ``Stale`` the start is done again from a fresh read. Raises for a passing failure.
    """
    watched = table.body(name)
    if watched is not None:
        outcome = _start(settings, cluster, forge, table, trigger_of, name, watched, watched=True)
        if not isinstance(outcome, Stale):
            return outcome
        table.drop_body(name, only=watched)
    outcome = _start(settings, cluster, forge, table, trigger_of, name, cluster.job(name), watched=False)
    return Gone() if isinstance(outcome, Stale) else outcome  # a fresh read is never Stale


def _start(settings: OperatorSettings, cluster: Cluster, forge: Forge | None, table: JobTable,
           trigger_of: TriggerOf, name: str, job: JobView | None, *,
           watched: bool) -> Started | Refusal | Stale | Gone:
    checked = check(settings, job, trigger_of, watched=watched, ended=table.ended(name))
    if not isinstance(checked, Ready):
        return checked
    if not watched:
        table.adopt(name, checked.uid)  # the start in progress keeps the slot for the Job it read
    launched = launch_ready(settings, cluster, forge, checked, watched=watched,
                            listed_at_start=table.listed_at_start(checked.uid))
    if not isinstance(launched, Launched):
        return launched
    if launched.created and launched.host is not None:
        table.fly(name, launched.host.key)
        open_sessionkey(cluster, launched.host)
    return record_running(cluster, checked.job, launched, watched=watched)
