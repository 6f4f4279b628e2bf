"""Step 1, admit: may this Job run at all? The refusals before any spend (docs/architecture.md#admit).

A refused Job gets no Pod, no slot and no store access; a Job that passes waits for a slot in FIFO
order (the dispatcher's queue). Pure: the dispatcher gathers the Job and its Trigger and acts on the
answer.

The refusals are a failure-named policy chain (cert-manager's): :data:`CHAIN` is an ordered tuple of small checks,
each named after the failure it finds and answering ``Refused`` (phase, reason and message together) or ``None``;
the first that refuses wins. The order is a contract (docs/store-contract.md#refusals: the store's two refusals
come last, and only after everything that is not about the store), pinned by name in the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pidispatch.api import serves
from pidispatch.api.models import JobSpec, TriggerSpec
from pidispatch.api.views import JobView, TriggerView
from pidispatch.forge.authsource import gets_gh_login, trigger_auth_source
from pidispatch.jobflow.forks import fork_refusal
from pidispatch.jobflow.summarize import Refused
from pidispatch.record import JobReason
from pidispatch.settings import GitHubSettings, Settings

SESSIONS_DIR_UNSET_MESSAGE = (
    "Trigger {trigger} asks to resume the previous conversation (run.resume: true), but this deployment has "
    "no session store, so the job did not run: without a store it would lose its conversation yet look "
    "successful. Either enable the store (Helm value sessions.enabled=true) or remove run.resume from the "
    "Trigger."
)
GH_SOURCE_MESSAGE = (
    "Trigger {trigger} arms run.resume while jobs get a long-lived full-scope gh token (auth source gh), so the "
    "job did not run: a transcript that ever echoed that token would be replayed into every later job on the "
    "branch. Switch the auth source to app or pat, or remove run.resume from the Trigger (or, knowingly, set "
    "PI_SESSIONS_ALLOW_GH_SOURCE=1). Run `pidispatch doctor` in the operator Pod for details."
)


AUTH_BEYOND_TRIGGER_MESSAGE = (
    "Job {job} asks for the {asked} token (spec.authSource), but its Trigger {trigger} gives its jobs the {given} "
    "token (the Trigger's run.auth, else the deployment's github.authSource), so nothing ran and no token was "
    "handed out: a Job cannot ask for more than its Trigger allows. Re-create the Job without spec.authSource, "
    "or change the Trigger's run.auth."
)
REPOSITORY_BEYOND_TRIGGER_MESSAGE = (
    "Job {job} is for the repository {asked}, but its Trigger {trigger} serves only {given} (on.repository, "
    "on.repositories), so nothing ran and no token was handed out: a Job cannot ask for more than its Trigger "
    "allows. Re-create the Job for a repository the Trigger serves, use a Trigger that serves {asked}, or add it "
    "to the Trigger's on.repositories."
)


FLOW_ON_FORK_MESSAGE = (
    "Job {job} is for pull request #{number}, which comes from a fork, and its Trigger {trigger} runs the flow "
    "{flow}: a fork's .pi/skills is anyone's text, and a flow is the job's instructions, so nothing ran. Answer "
    "forks' pull requests with a Trigger that names no run.flow, or push the branch to the repository itself."
)
REPLICA_BEYOND_TRIGGER_MESSAGE = (
    "Job {job} says it is {asked}, but its Trigger {trigger} has {given}, so nothing ran: a replica works on a "
    "branch of its own (pi/issue-<n>-r<i>) that only its Trigger's run.replicas gives. Re-create the Job without "
    "spec.replica and spec.replicas (one attempt), or with a replica its Trigger has."
)


def replica_beyond_trigger(job_spec: JobSpec, trigger_spec: TriggerSpec) -> str | None:
    """How the Job's ``replica``/``replicas`` go beyond its Trigger's ``run.replicas`` (for the message), else
    ``None``. A Job without them is one attempt, allowed on any Trigger (a Job made by hand)."""
    i, n = job_spec.replica, job_spec.replicas
    if i is None and n is None:
        return None
    asked = f"replica {i} of {n}"
    if i is None or n is None or i > n or n != trigger_spec.run.replicas:
        return asked
    return None


@dataclass(frozen=True)
class Asked:
    """What the chain reads: the Job, its Trigger (``None``: there is none), the deployment's settings, and its
    GitHub settings (``None``: assume its pat/gh Secret is configured)."""

    job: JobView
    trigger: TriggerView | None
    settings: Settings
    github: GitHubSettings | None


@dataclass(frozen=True)
class Loadable:
    """A Job and a Trigger that are both there and loadable (the first three checks passed): the typed specs the
    rest of the chain reads."""

    job: JobView
    job_spec: JobSpec
    trigger: TriggerView
    spec: TriggerSpec
    settings: Settings
    github: GitHubSettings | None


def invalid_spec(asked: Asked) -> Refused | None:
    """``InvalidSpec``: what the Job CRD's schema refuses, for a Job stored without it."""
    job = asked.job
    if job.spec is not None:
        return None
    return Refused("Failed", None, "InvalidSpec",
                   f"Job {job.name}'s spec is not valid ({job.invalid}); nothing ran. Fix it in a new Job.")


def trigger_not_found(asked: Asked) -> Refused | None:
    """``TriggerNotFound``: the Job names a Trigger this namespace does not have."""
    if asked.trigger is not None:
        return None
    return Refused("Failed", None, "TriggerNotFound",
                   f"Trigger {asked.job.trigger_name} does not exist in this namespace; create it, then re-create "
                   f"Job {asked.job.name}.")


def trigger_not_ready(asked: Asked) -> Refused | None:
    """``trigger-not-ready``: the Trigger is refused (``TriggerView.refusal``: at load, its schedule, its
    placement), and its message says why."""
    trigger = asked.trigger
    if trigger is None or (trigger.refusal is None and trigger.spec is not None):
        return None
    why = trigger.refusal.message if trigger.refusal is not None else None
    return Refused("Refused", JobReason.TRIGGER_NOT_READY, "TriggerNotReady",
                   f"Trigger {asked.job.trigger_name} is not ready, so nothing ran: {why}")


PRECONDITIONS: tuple[Callable[[Asked], Refused | None], ...] = (invalid_spec, trigger_not_found, trigger_not_ready)


# The checks below are ``beyond-trigger``: anyone who may create Jobs (the receiver's ServiceAccount, a namespace's
# users) could otherwise get a broader token than the Trigger's: ``pat`` where the Trigger says ``app``, or a token
# for another repository. The receiver writes ``spec.authSource`` as the Trigger's ``run.auth``, else the
# deployment's ``github.authSource`` (the chart gives the receiver and the operator the same value), and
# ``spec.repository`` only for an event from a repository the Trigger serves (``TriggerView.serves``, the same
# rules), so a Job it made is never refused.
def auth_beyond_trigger(it: Loadable) -> Refused | None:
    """``beyond-trigger``: the Job names an auth source its Trigger would not give."""
    given = trigger_auth_source(it.spec, it.settings)
    asked = it.job_spec.authSource
    if asked is None or asked == given:
        return None
    return Refused("Refused", JobReason.BEYOND_TRIGGER, "BeyondTrigger", AUTH_BEYOND_TRIGGER_MESSAGE.format(
        job=it.job.name, asked=asked, trigger=it.job_spec.trigger, given=given))


def replica_beyond(it: Loadable) -> Refused | None:
    """``beyond-trigger``: the Job says it is a replica its Trigger's ``run.replicas`` does not have."""
    replica = replica_beyond_trigger(it.job_spec, it.spec)
    if replica is None:
        return None
    given = f"run.replicas: {it.spec.run.replicas}" if it.spec.run.replicas else "no run.replicas"
    return Refused("Refused", JobReason.BEYOND_TRIGGER, "BeyondTrigger", REPLICA_BEYOND_TRIGGER_MESSAGE.format(
        job=it.job.name, asked=replica, trigger=it.job_spec.trigger, given=given))


def repository_beyond_trigger(it: Loadable) -> Refused | None:
    """``beyond-trigger``: the Job is for a repository its Trigger does not serve."""
    if it.trigger.serves(it.job_spec.repository):
        return None
    return Refused("Refused", JobReason.BEYOND_TRIGGER, "BeyondTrigger", REPOSITORY_BEYOND_TRIGGER_MESSAGE.format(
        job=it.job.name, asked=it.job_spec.repository, trigger=it.job_spec.trigger,
        given=serves.described(it.trigger.named)))


def fork_not_allowed(it: Loadable) -> Refused | None:
    """``fork-not-allowed`` (``jobflow/forks.py``): the payload's fork flag is enough to refuse here, before the
    queue; a fork the forge API reveals is refused by the start (``jobflow/start.py``), still before any Pod."""
    return fork_refusal(it.job_spec, it.spec, trigger_auth_source(it.spec, it.settings), it.job_spec.fork is True,
                        it.github is None or it.github.token_secret is not None)


def flow_on_fork(it: Loadable) -> Refused | None:
    """``flow-on-fork``: a fork's ``.pi/skills`` is anyone's text. The runner refuses it too (``runner/flow.py``),
    for a fork only the forge API reveals; this one needs no Pod."""
    if it.spec.run.flow is None or it.job_spec.fork is not True or it.job_spec.pullRequest is None:
        return None
    return Refused("Refused", JobReason.FLOW_ON_FORK, "FlowOnFork", FLOW_ON_FORK_MESSAGE.format(
        job=it.job.name, number=it.job_spec.pullRequest, trigger=it.job.trigger_name, flow=it.spec.run.flow))


def sessions_dir_unset(it: Loadable) -> Refused | None:
    """``sessions-dir-unset`` (docs/store-contract.md#refusals): resume armed and no store."""
    if not it.trigger.resumes or it.settings.sessions_dir is not None:
        return None
    return Refused("Refused", JobReason.SESSIONS_DIR_UNSET, "SessionsDirUnset",
                   SESSIONS_DIR_UNSET_MESSAGE.format(trigger=it.job.trigger_name))


def config_refused(it: Loadable) -> Refused | None:
    """``config-refused`` (docs/store-contract.md#refusals): resume armed under the deployment's full-scope gh login,
    without ``PI_SESSIONS_ALLOW_GH_SOURCE=1``."""
    if not it.trigger.resumes or not gets_gh_login(it.spec, it.settings) or it.settings.allow_gh_source:
        return None
    return Refused("Refused", JobReason.CONFIG_REFUSED, "ConfigRefused",
                   GH_SOURCE_MESSAGE.format(trigger=it.job.trigger_name))


POLICY: tuple[Callable[[Loadable], Refused | None], ...] = (
    auth_beyond_trigger, replica_beyond, repository_beyond_trigger, fork_not_allowed, flow_on_fork,
    sessions_dir_unset, config_refused)


def chain() -> tuple[str, ...]:
    """The checks' names, in the order they run (the contract the tests pin)."""
    return tuple(check.__name__ for check in (*PRECONDITIONS, *POLICY))


def refusal(job: JobView, trigger: TriggerView | None, settings: Settings,
            github: GitHubSettings | None = None) -> Refused | None:
    """The first refusal of the chain (:func:`chain`), or ``None``: a spec its CRD would refuse, a missing or refused
    Trigger, a Job asking for more than its Trigger gives, a fork the payload names under a token that cannot be
    narrowed (``github``: the deployment's, ``None``: assume its pat/gh Secret is configured), then the two
    refusals of docs/store-contract.md#refusals."""
    asked = Asked(job, trigger, settings, github)
    for check in PRECONDITIONS:
        refused = check(asked)
        if refused is not None:
            return refused
    assert job.spec is not None and trigger is not None and trigger.spec is not None  # what the preconditions say
    loadable = Loadable(job, job.spec, trigger, trigger.spec, settings, github)
    for policy in POLICY:
        refused = policy(loadable)
        if refused is not None:
            return refused
    return None


def arrival(job: JobView) -> tuple[str, str]:
    """A Job's place in the FIFO: creation time, then name."""
    return job.meta.created, job.name
