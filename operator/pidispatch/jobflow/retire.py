"""Retiring a key on request: the ``pi-dispatch.dev/retire`` annotation on its SessionKey (``lifecycle.py``).

The receiver sets it when a pull request is closed or merged (for its head branch, when the head is the base
repository) or an issue is closed (for ``pi/issue-<n>``); a person may set it by hand. The operator then
retires the key in the store (``store/retire.py``: the Jobs in flight on it are marked and promote nothing,
the directory is deleted or archived per ``sessions.retire``), writes ``status.retired``, and removes the
annotation, in that order: a kill anywhere in between is redone at the next event or resync, and retiring a
retired key finds nothing to do.
"""

from __future__ import annotations

from typing import Any

from pidispatch.api.views import SessionKeyView
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
    remove_annotation(cluster, sk.name, lifecycle.RETIRE_ANNOTATION)
    emit("sessionkey_retired", key=sk.name, reason=reason, archived=archive is not None)
    return True
