"""Retiring a key on request: the ``pi-dispatch.dev/retire`` annotation on its SessionKey (``lifecycle.py``).

The receiver sets it when a pull request is closed or merged (for its head branch, when the head is the base
repository, with the pull request's number) or an issue is closed (for ``pi/issue-<n>``), by someone a Trigger
trusts; a person may set it by hand. A pull request's close retires only a branch the job system owns
(``lifecycle.pull_request_refusal``): otherwise the request is refused, logged (``sessionkey_retire_refused``)
and removed, and the conversation stays. The operator then
retires the key in the store (``store/retire.py``: the Jobs in flight on it are marked and promote nothing,
the directory is deleted or archived per ``sessions.retire``), writes ``status.retired`` (the SessionKey's one
writer, ``sessionkey.write``, from this step's ``Retirement``), and removes the annotation, in that order: a
kill anywhere in between is redone at the next event or resync, and retiring a retired key finds nothing to do.
"""

from __future__ import annotations

import logging

from pidispatch.api.views import SessionKeyView
from pidispatch.api.vocabulary import RETIRE_PULL_REQUEST_ANNOTATION
from pidispatch.events import emit
from pidispatch.jobflow import lifecycle, quarantine, sessionkey
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.quarantine import remove_annotation
from pidispatch.jobflow.summarize_sessionkey import KeyOutcome, Released, Retirement
from pidispatch.settings import OperatorSettings
from pidispatch.store.retire import RetireMode, retire_key

log = logging.getLogger("pidispatch.operator")


def requests(settings: OperatorSettings, cluster: Cluster, sk: SessionKeyView) -> bool:
    """Act on ``sk``'s requests (the retire and release annotations): the steps say what they did, the one writer
    writes the status (the store judged again), then the annotations go. ``True`` when there was one."""
    retired = retire(settings, cluster, sk)
    released = quarantine.release(sk)
    outcomes: list[KeyOutcome] = [found for found in (retired, released) if found is not None]
    if not outcomes:
        return False
    sessionkey.write(settings, cluster, sk.name, outcomes)
    if retired is not None:
        remove_annotation(cluster, sk.name, lifecycle.RETIRE_ANNOTATION, RETIRE_PULL_REQUEST_ANNOTATION)
        emit("sessionkey_retired", key=sk.name, reason=retired.reason, archived=retired.archive is not None)
    if isinstance(released, Released):
        remove_annotation(cluster, sk.name, lifecycle.RELEASE_ANNOTATION)
        was = sk.status.failedResumes
        if was is not None and was.quarantinedAt:
            log.warning("key %s: quarantine released by annotation after %s failed resumed jobs", sk.name,
                        was.count)
    return True


def retire(settings: OperatorSettings, cluster: Cluster, sk: SessionKeyView) -> Retirement | None:
    """Retire ``sk``'s key in the store if its annotation asks; what it did (``None``: not asked, or refused). The
    status is :func:`requests`' to write."""
    asked = sk.meta.annotations.get(lifecycle.RETIRE_ANNOTATION)
    if asked is None or sk.meta.deletion:
        return None
    reason = lifecycle.retire_reason(asked)
    pull_request = sk.meta.annotations.get(RETIRE_PULL_REQUEST_ANNOTATION)
    if pull_request is not None:
        last_name = sk.status.lastJob
        last = cluster.job(last_name) if last_name else None
        why = lifecycle.pull_request_refusal(sk.spec, pull_request, last.spec if last is not None else None,
                                             last_name)
        if why is not None:
            remove_annotation(cluster, sk.name, lifecycle.RETIRE_ANNOTATION, RETIRE_PULL_REQUEST_ANNOTATION)
            emit("sessionkey_retire_refused", key=sk.name, reason=reason, why=why)
            return None
    archive = retire_key(settings.store, settings.staging_dir, sk.name, RetireMode(settings.retire))
    return Retirement(reason, cluster.clock(), archive)
