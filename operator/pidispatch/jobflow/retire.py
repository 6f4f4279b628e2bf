"""Retiring a key on request: the ``pi-dispatch.dev/retire`` annotation on its SessionKey (``lifecycle.py``).

The receiver sets it when a pull request is closed or merged (for its head branch, when the head is the base
repository, with the pull request's number) or an issue is closed (for ``pi/issue-<n>``), by someone a Trigger
trusts; a person may set it by hand. A pull request's close retires only a branch the job system owns
(``lifecycle.pull_request_refusal``): otherwise the request is refused, logged (``sessionkey_retire_refused``)
and removed, and the conversation stays. The operator then
retires the key in the store (``store/retire.py``: the Jobs in flight on it are marked and promote nothing,
the directory is deleted or archived per ``sessions.retire``), writes ``status.retired``, and removes the
annotation, in that order: a kill anywhere in between is redone at the next event or resync, and retiring a
retired key finds nothing to do.
"""

from __future__ import annotations

from typing import Any

from pidispatch.api.views import SessionKeyView
from pidispatch.api.vocabulary import RETIRE_PULL_REQUEST_ANNOTATION
from pidispatch.events import emit
from pidispatch.jobflow import lifecycle
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.quarantine import remove_annotation, write_status
from pidispatch.settings import OperatorSettings
from pidispatch.store.retire import RetireMode, retire_key


def retire(settings: OperatorSettings, cluster: Cluster, sk: SessionKeyView) -> bool:
    """Retire ``sk``'s key if its annotation asks; ``True`` when it did (the caller refreshes its status)."""
    asked = lifecycle.annotations_of(sk.body).get(lifecycle.RETIRE_ANNOTATION)
    if asked is None or sk.meta.deletion:
        return False
    reason = lifecycle.retire_reason(asked)
    pull_request = lifecycle.annotations_of(sk.body).get(RETIRE_PULL_REQUEST_ANNOTATION)
    if pull_request is not None:
        last_name = sk.stored_status.get("lastJob")
        last = cluster.job(last_name) if isinstance(last_name, str) and last_name else None
        why = lifecycle.pull_request_refusal(sk.spec, pull_request, last.spec if last is not None else None,
                                             last_name if isinstance(last_name, str) else None)
        if why is not None:
            remove_annotation(cluster, sk.name, lifecycle.RETIRE_ANNOTATION, RETIRE_PULL_REQUEST_ANNOTATION)
            emit("sessionkey_retire_refused", key=sk.name, reason=reason, why=why)
            return False
    archive = retire_key(settings.store, settings.staging_dir, sk.name, RetireMode(settings.retire))
    at = cluster.clock()

    def change(stored: dict[str, Any]) -> dict[str, Any]:
        if stored.get("retired") and archive is None:
            # Retired already, and nothing was left to retire: the same request seen again (the watch shows the
            # annotation until it is removed). The first retirement's facts stand.
            return {}
        # A failure count belongs to the conversation that is gone: the next one starts with none.
        return {"retired": {"reason": reason, "at": at, "archive": archive}, "failedResumes": None}

    write_status(cluster, sk.name, change)
    remove_annotation(cluster, sk.name, lifecycle.RETIRE_ANNOTATION, RETIRE_PULL_REQUEST_ANNOTATION)
    emit("sessionkey_retired", key=sk.name, reason=reason, archived=archive is not None)
    return True
