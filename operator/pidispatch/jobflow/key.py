"""Step 2, key: which conversation does this Job continue? (docs/architecture.md#key)

An issue's key is its branch ``pi/issue-<n>``; a pull request's is its head, asked of the forge API
(never taken from the payload). A cron Trigger's job (no issue, no pull request) continues the Trigger's own
conversation: its key names the synthetic branch ``pi/cron-<namespace>-<trigger>`` of ``on.repository``
(:func:`cron_branch`; pi-dispatch refuses resume on cron, docs/store-divergences.md). A fork, a failed
lookup, a manual run or resume switched off give no key, and the job runs exactly as it would without the
feature.
"""

from __future__ import annotations

from dataclasses import dataclass

from pidispatch.api.models import JobSpec
from pidispatch.api.views import TriggerView
from pidispatch.contract.keys import CRON_BRANCH_PREFIX
from pidispatch.forge.head import Head, NoHead, no_key_reason
from pidispatch.store.keys import branch_key, issue_branch, issue_key, pull_request_key


@dataclass(frozen=True)
class KeyRef:
    """A resolved session key and what it names. Branch and repository stay out of Job status."""

    key: str
    forge: str
    repository: str
    branch: str


def cron_branch(namespace: str, trigger: str) -> str:
    """The branch a cron Trigger's conversation is keyed by (and its jobs work on): one per Trigger, so two
    Triggers never share a transcript, and a pull request opened from it continues the same conversation."""
    return f"{CRON_BRANCH_PREFIX}{namespace}-{trigger}"


def cron_of(namespace: str, trigger: TriggerView, job_spec: JobSpec) -> str | None:
    """The :func:`cron_branch` of a Job of a cron Trigger that names neither an issue nor a pull request (what
    the Trigger's slots create), else ``None``: a Job made by hand for an issue keeps the issue's key."""
    spec = trigger.spec
    if spec is None or spec.on.event != "cron" or job_spec.issue is not None or job_spec.pullRequest is not None:
        return None
    return cron_branch(namespace, trigger.name)


def needs_head_lookup(job_spec: JobSpec, resume: bool) -> bool:
    """Only a resume-armed (``resume``: the Trigger's ``TriggerView.armed``) pull-request job's key reads the
    forge's head (docs/store-contract.md#pull-request-heads); a payload fork's never does. (Every pull-request job's
    head is read for its token's scope: ``jobflow/forks.py``.)"""
    return resume and job_spec.pullRequest is not None and job_spec.fork is not True


def job_key(job_spec: JobSpec, resume: bool, head: Head | None = None, cron: str | None = None) -> KeyRef | None:
    """The session key of a Job (docs/store-contract.md#key-parts), or ``None``: resume off (``resume``), a fork, a
    missing head, a manual run.

    ``head`` is what the forge API said of a pull request's head (:func:`needs_head_lookup`); it is the
    only source of a PR's branch when the operator has a GitHub client. Without one (``head`` is
    ``None``) the head comes from the Job's ``spec.resolved``, which only a cluster user can write.
    ``cron``: the :func:`cron_branch` of the Job's Trigger when that is a cron Trigger (used only for a Job
    that names neither an issue nor a pull request).
    """
    return key_and_reason(job_spec, resume, head, cron)[0]


def key_and_reason(job_spec: JobSpec, resume: bool, head: Head | None = None, cron: str | None = None
                   ) -> tuple[KeyRef | None, NoHead | None]:
    """:func:`job_key`, with the closed reason a pull-request job has no key (for the log)."""
    if not resume or job_spec.replica is not None:  # replicas never resume (refused at load; one key, n attempts)
        return None, None
    forge, repo = job_spec.forge, job_spec.repository
    if job_spec.pullRequest is not None:
        if job_spec.fork is True:
            return None, NoHead.FORK_BY_PAYLOAD
        if head is None:
            resolved = job_spec.resolved
            head = Head(resolved.headRef, resolved.headRepository) if resolved is not None else Head.failed(
                NoHead.NO_CLIENT)
        why = no_key_reason(repo, head)
        key = None if why is not None else pull_request_key(forge, repo, head.ref, head.repository)
        if key is None or not isinstance(head.ref, str):
            return None, why
        return KeyRef(key, forge, repo, head.ref), None
    number = job_spec.issue
    if number is None and cron is not None:
        key = branch_key(forge, repo, cron)
        return (KeyRef(key, forge, repo, cron) if key is not None else None), None
    key = issue_key(forge, repo, number)
    if key is None or number is None:
        return None, None
    return KeyRef(key, forge, repo, issue_branch(number)), None
