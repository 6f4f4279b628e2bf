"""Step 1, admit: may this Job run at all? The refusals before any spend (docs/architecture.md#admit).

A refused Job gets no Pod, no slot and no store access; a Job that passes waits for a slot in FIFO
order (the dispatcher's queue). Pure: the dispatcher gathers the Job and its Trigger and acts on the
answer.
"""

from __future__ import annotations

from pidispatch.api import serves
from pidispatch.api.models import JobSpec, TriggerSpec
from pidispatch.api.views import JobView, TriggerView, armed
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


def beyond_trigger(job: JobView, job_spec: JobSpec, trigger_spec: TriggerSpec, settings: Settings) -> Refused | None:
    """``beyond-trigger`` when the Job names an auth source or a repository its Trigger would not give.

    Anyone who may create Jobs (the receiver's ServiceAccount, a namespace's users) could otherwise get a
    broader token than the Trigger's: ``pat`` where the Trigger says ``app``, or a token for another
    repository. The receiver writes ``spec.authSource`` as the Trigger's ``run.auth``, else the deployment's
    ``github.authSource`` (the chart gives the receiver and the operator the same value), and
    ``spec.repository`` only for an event from a repository the Trigger serves (``api/serves.py``, the same
    rules), so a Job it made is never refused.
    """
    given = trigger_auth_source(trigger_spec, settings)
    asked = job_spec.authSource
    if asked is not None and asked != given:
        return Refused("Refused", JobReason.BEYOND_TRIGGER, "BeyondTrigger", AUTH_BEYOND_TRIGGER_MESSAGE.format(
            job=job.name, asked=asked, trigger=job_spec.trigger, given=given))
    replica = replica_beyond_trigger(job_spec, trigger_spec)
    if replica is not None:
        return Refused("Refused", JobReason.BEYOND_TRIGGER, "BeyondTrigger", REPLICA_BEYOND_TRIGGER_MESSAGE.format(
            job=job.name, asked=replica, trigger=job_spec.trigger,
            given=f"run.replicas: {trigger_spec.run.replicas}" if trigger_spec.run.replicas else "no run.replicas"))
    named = trigger_spec.on.served()
    if not serves.serves(named, job_spec.repository):
        return Refused("Refused", JobReason.BEYOND_TRIGGER, "BeyondTrigger", REPOSITORY_BEYOND_TRIGGER_MESSAGE.format(
            job=job.name, asked=job_spec.repository, trigger=job_spec.trigger, given=serves.described(named)))
    return None


def refusal(job: JobView, trigger: TriggerView | None, settings: Settings,
            github: GitHubSettings | None = None) -> Refused | None:
    """The first reason this Job may not run, or ``None``: a spec its CRD would refuse, a missing or refused
    Trigger, a Job asking for more than its Trigger gives, a fork the payload names under a token that
    cannot be narrowed (``github``: the deployment's, ``None``: assume its pat/gh Secret is configured),
    then the two refusals of docs/store-contract.md#refusals."""
    trigger_name = job.trigger_name
    if job.spec is None:  # what the Job CRD's schema refuses, for a Job stored without it
        return Refused("Failed", None, "InvalidSpec",
                       f"Job {job.name}'s spec is not valid ({job.invalid}); nothing ran. Fix it in a new Job.")
    if trigger is None:
        return Refused("Failed", None, "TriggerNotFound",
                       f"Trigger {trigger_name} does not exist in this namespace; create it, then re-create "
                       f"Job {job.name}.")
    if trigger.refusal is not None or trigger.spec is None:
        return Refused("Refused", JobReason.TRIGGER_NOT_READY, "TriggerNotReady",
                       f"Trigger {trigger_name} is not ready, so nothing ran: {trigger.refusal}")
    spec = trigger.spec
    beyond = beyond_trigger(job, job.spec, spec, settings)
    if beyond is not None:
        return beyond
    # The payload's fork flag is enough to refuse here, before the queue; a fork the forge API reveals is
    # refused by the start (jobflow/start.py), still before any Pod.
    forked = fork_refusal(job.spec, spec, trigger_auth_source(spec, settings), job.spec.fork is True,
                          github is None or github.token_secret is not None)
    if forked is not None:
        return forked
    if spec.run.flow is not None and job.spec.fork is True and job.spec.pullRequest is not None:
        # The runner refuses it too (runner/flow.py), for a fork only the forge API reveals; this one needs no Pod.
        return Refused("Refused", JobReason.FLOW_ON_FORK, "FlowOnFork", FLOW_ON_FORK_MESSAGE.format(
            job=job.name, number=job.spec.pullRequest, trigger=trigger_name, flow=spec.run.flow))
    if not armed(spec):
        return None
    if settings.sessions_dir is None:
        return Refused("Refused", JobReason.SESSIONS_DIR_UNSET, "SessionsDirUnset",
                       SESSIONS_DIR_UNSET_MESSAGE.format(trigger=trigger_name))
    if gets_gh_login(spec, settings) and not settings.allow_gh_source:
        return Refused("Refused", JobReason.CONFIG_REFUSED, "ConfigRefused",
                       GH_SOURCE_MESSAGE.format(trigger=trigger_name))
    return None


def arrival(job: JobView) -> tuple[str, str]:
    """A Job's place in the FIFO: creation time, then name."""
    return job.meta.created, job.name
