"""A fork's pull request: is this job one, and may it run with the token its Trigger gives (issue 31, item 2)?

A fork's pull request is code its author chose; the job checks it out and runs it (tests, a build, an
agent that reads it), with ``GH_TOKEN`` in its environment. So a fork's job never gets a token that can
write the base repository:

* ``app``: the operator mints it read-only on contents (``forge/credentials.fork_permissions``);
* ``pat`` / ``gh``: the operator cannot narrow the deployment's token, so a fork's job runs only on a
  Trigger that says so (``run.forks: true``), and is otherwise refused (``fork-not-allowed``) before any
  Pod exists and before the Secret is referenced.

Whether a job is a fork: the payload's word (``spec.fork: true``, the receiver's, or a Job's maker's) is
enough to say yes; a no is the forge API's (the pull request's head is a branch of the repository itself),
and a head that could not be read counts as a fork (the safe side). Without a GitHub client the operator
has only ``spec.fork`` and ``spec.resolved`` to go by, and no checkout puts the fork's code in the workspace.
Pure: the caller reads the head.
"""

from __future__ import annotations

from pidispatch.api.models import JobSpec, TriggerSpec
from pidispatch.forge.head import Head, no_key_reason
from pidispatch.jobflow.summarize import Refused
from pidispatch.record import JobReason

FORK_NOT_ALLOWED_MESSAGE = (
    "Pull request #{number} comes from a fork (or its head could not be confirmed as a branch of {repository} "
    "itself), and Trigger {trigger} gives its jobs the deployment's {source} token, which the operator cannot "
    "narrow: the fork's code would run with that token's write access to {repository}. Nothing ran and no token "
    "was handed out. Either switch the Trigger to the GitHub App (run.auth: app, or the Helm value "
    "github.authSource=app: a fork's job then gets a token that is read-only on contents), or, knowing that "
    "the fork's author then writes with that token, set run.forks: true on the Trigger."
)


def is_fork(job_spec: JobSpec, head: Head | None) -> bool:
    """Whether the job is on a fork's pull request; ``head`` is the forge API's (``None``: not asked)."""
    if job_spec.pullRequest is None:
        return False
    if job_spec.fork is True:
        return True
    if head is None:
        if job_spec.resolved is None:
            return False  # no GitHub client and nothing resolved: the payload's word is all there is
        head = Head(job_spec.resolved.headRef, job_spec.resolved.headRepository)
    return no_key_reason(job_spec.repository, head) is not None


def forks_allowed(trigger_spec: TriggerSpec) -> bool:
    """The Trigger runs forks' jobs under a token it cannot narrow: exactly boolean ``run.forks: true``."""
    return trigger_spec.run.forks is True


def fork_refusal(job_spec: JobSpec, trigger_spec: TriggerSpec, source: str, fork: bool,
                 gets_deployment_token: bool) -> Refused | None:
    """``fork-not-allowed`` for a fork's job whose Pod would get the deployment's pat/gh token
    (``gets_deployment_token``) on a Trigger without ``run.forks``; ``None`` otherwise.

    The ``app`` source is never refused here: its fork token is narrowed instead. A job that gets no
    token at all (nothing configured) cannot write either, and runs.
    """
    if not fork or source not in ("pat", "gh") or not gets_deployment_token or forks_allowed(trigger_spec):
        return None
    return Refused("Refused", JobReason.FORK_NOT_ALLOWED, "ForkNotAllowed", FORK_NOT_ALLOWED_MESSAGE.format(
        number=job_spec.pullRequest, repository=job_spec.repository, trigger=job_spec.trigger, source=source))
