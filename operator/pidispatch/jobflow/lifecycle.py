"""A key's lifecycle between deliveries, as pure rules: retirement and the quarantine of a poisoned transcript.

Both live in the SessionKey's status, never in the store (whose format a pi-dispatch host shares):

* ``status.retired`` (``retire.py`` asks for it, ``summarize_sessionkey.py`` writes it): the key's pull
  request or issue closed, or a person asked (the ``pi-dispatch.dev/retire`` annotation). A pull request's
  close retires only a branch the job system owns (:func:`pull_request_refusal`). Its directory is gone
  (deleted or archived); the next delivery on the branch starts cold with the reason ``retired``, and a
  promotion of that new conversation ends the retirement.
* ``status.failedResumes`` (``quarantine.py`` counts, ``summarize_sessionkey.py`` writes it): the resumed
  jobs in a row that ended ``Failed``. At the chart's ``sessions.quarantineAfter`` of them the transcript is
  quarantined: every delivery starts cold with the reason ``quarantined`` until a person releases it (the
  ``pi-dispatch.dev/release-quarantine`` annotation) or a job on the key succeeds and its new
  conversation replaces the poisoned one. A resumed job that succeeds resets the count.

``Resumable`` says either, and why (:func:`overlay`); ``Retired`` is a condition of its own once a key
was ever retired.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pidispatch.api.conditions import get_condition, reason_to_camel, set_condition
from pidispatch.api.models import FailedResumes, JobSpec, Retired, SessionKeySpec, SessionKeyStatus
from pidispatch.api.views import ObjectMeta
from pidispatch.api.vocabulary import RELEASE_ANNOTATION, RETIRE_ANNOTATION, RETIRE_REASONS
from pidispatch.contract.keys import CRON_BRANCH_PREFIX, issue_of_branch
from pidispatch.record import SessionReason

# Why a key was retired: what the receiver writes into the retire annotation (RETIRE_REASONS). Anything else
# (a person's own value) reads as ``requested``.
REQUESTED = "requested"
# How many of the failed jobs' names the status keeps (the last ones).
JOBS_KEPT = 10
# A job that ended this way had pi read its staged transcript: its failure may be the transcript's doing. A
# checkout that failed, or a Pod that never started, never ran pi: they say nothing of the transcript.
TRANSCRIPT_FAILURES = frozenset({"PodFailed", "DeadlineExceeded", "OOMKilled"})


def asks(body: Mapping[str, Any]) -> bool:
    """Does a SessionKey's body (as a watch event hands it) carry a request for the operator (retire, release)?"""
    found = ObjectMeta.of(body).annotations
    return RETIRE_ANNOTATION in found or RELEASE_ANNOTATION in found


def retire_reason(value: str) -> str:
    """The reason a retire annotation's value names: one of :data:`RETIRE_REASONS`, else ``requested``."""
    return value if value in RETIRE_REASONS else REQUESTED


def pull_request_refusal(spec: SessionKeySpec | None, pull_request: str, last_job: JobSpec | None,
                         last_job_name: str | None) -> str | None:
    """Why closing pull request ``pull_request`` (the annotation's value) must not retire the key of ``spec``, or
    ``None`` when the job system owns the branch (docs/sessions.md#a-conversation-ends-with-its-branch).

    Anyone may open a pull request from any branch of a public repository, so a pull request's head branch
    alone says nothing of whose conversation the key holds. Owned are: ``pi/issue-<n>``, the branch issue jobs
    push (its conversation is the job system's whichever job ran last); and any other branch whose last job
    (``last_job``: its spec, ``None`` when it is gone) ran on this very pull request of the key's repository.
    Never a ``pi/cron-…`` branch: a cron Trigger's conversation, which no pull request's close ends.
    """
    if spec is None:
        return "the SessionKey's spec names no branch"
    if spec.branch.startswith(CRON_BRANCH_PREFIX):
        return f"{CRON_BRANCH_PREFIX}… is a cron Trigger's conversation: no pull request's close ends it"
    if issue_of_branch(spec.branch) is not None:
        return None
    number = int(pull_request) if pull_request.isascii() and pull_request.isdigit() and len(pull_request) < 20 \
        else None
    if number is None:
        return "the annotation names no pull request"
    if last_job is None:
        return (f"the job that last ran on the branch ({last_job_name or 'none recorded'}) is gone: which pull "
                f"request built the conversation cannot be shown")
    if last_job.pullRequest != number or last_job.repository != spec.repository:
        ran = f"pull request {last_job.pullRequest}" if last_job.pullRequest is not None else "no pull request"
        return f"the conversation's last job ({last_job_name}) ran on {ran}, not on pull request {number}"
    return None


def counts_against(resumed: bool, outcome: str, condition_reason: str) -> bool:
    """Does this job's end count towards quarantining the transcript it resumed?"""
    return resumed and outcome == "Failed" and condition_reason in TRANSCRIPT_FAILURES


def counted(state: FailedResumes | None, job: str, threshold: int, now: str) -> FailedResumes | None:
    """``state`` with ``job``'s failed resume counted: one more, and at ``threshold`` in a row the transcript is
    quarantined (stamped ``quarantinedAt``, the first time only). A job counted already (its end written again
    after a kill) is not counted twice; ``threshold`` 0 counts nothing."""
    if threshold <= 0:
        return None
    if state is not None and job in state.jobs:
        return state
    count = (state.count if state is not None else 0) + 1
    jobs = [*(state.jobs if state is not None else []), job][-JOBS_KEPT:]
    since = state.quarantinedAt if state is not None else None
    if since is None and count >= threshold:
        since = now
    return FailedResumes(count=count, jobs=jobs, quarantinedAt=since)


def is_quarantined(failed: FailedResumes | None) -> bool:
    return failed is not None and bool(failed.quarantinedAt)


def held(retired: Retired | None, failed: FailedResumes | None) -> str | None:
    """The cold start a key's ``retired`` and ``failedResumes`` impose on the next delivery, or ``None``."""
    if retired is not None:
        return SessionReason.RETIRED.value
    if is_quarantined(failed):
        return SessionReason.QUARANTINED.value
    return None


def held_reason(status: SessionKeyStatus | None) -> str | None:
    """The cold start the SessionKey's status imposes on the next delivery (before any gate), or ``None``."""
    return None if status is None else held(status.retired, status.failedResumes)


def quarantine_message(name: str, failed: FailedResumes) -> str:
    jobs = ", ".join(failed.jobs) or "none recorded"
    return (f"{failed.count} resumed jobs in a row ended Failed (the last: {jobs}); the transcript is "
            f"quarantined since {failed.quarantinedAt} and every delivery starts cold. If the failures were "
            f"not the transcript's doing, release it: kubectl annotate sessionkey {name} "
            f"{RELEASE_ANNOTATION}=true. To drop it: kubectl delete sessionkey {name}. A job that succeeds on the "
            "key replaces it with its new conversation and ends the quarantine.")


def retired_message(retired: Retired) -> str:
    kept = (f" Its directory was archived as {retired.archive} in the store's root."
            if retired.archive else " Its directory was deleted.")
    return (f"The key was retired ({retired.reason}) at {retired.at}.{kept} The next delivery on "
            "this branch starts a fresh conversation, and once that one is promoted the key is in use again.")


def overlay(conditions: list[dict[str, Any]], nxt: str, retired: Retired | None, failed: FailedResumes | None,
            name: str, generation: int | None = None) -> tuple[list[dict[str, Any]], str]:
    """The store's judgement (``conditions`` and ``next``, ``summarize_sessionkey.judge``) with the lifecycle on
    top: a retired or quarantined key's ``Resumable`` is False and says why, and a key ever retired has a
    ``Retired`` condition. ``retired`` and ``failed``: the key's lifecycle as the outcomes leave it."""
    if retired is not None or get_condition(conditions, "Retired") is not None:
        conditions = set_condition(
            conditions, "Retired", retired is not None,
            reason_to_camel(retired.reason or REQUESTED) if retired is not None else "InUse",
            retired_message(retired) if retired is not None else
            "A new conversation was promoted on this branch after the key was retired.", generation)
    reason = held(retired, failed)
    if reason is not None:
        message = retired_message(retired) if retired is not None else quarantine_message(name, failed or
                                                                                          FailedResumes(count=0))
        conditions = set_condition(conditions, "Resumable", False, reason_to_camel(reason), message, generation)
        nxt = reason
    return conditions, nxt
