"""A job's end on a key, for the key's lifecycle: count a failed resume, quarantine, release (``lifecycle.py``).

The count lives in the SessionKey's status (``failedResumes``), never in the store: a pi-dispatch host
sharing the store reads the same files. Written with the object's ``resourceVersion``, so two jobs that end
on one key at once never lose a count: the loser reads again and counts on top.
"""

from __future__ import annotations

import logging
from typing import Any

from pidispatch.api.views import SessionKeyView
from pidispatch.jobflow import lifecycle
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.summarize import Ended
from pidispatch.kubeapi import ApiError
from pidispatch.settings import OperatorSettings

log = logging.getLogger("pidispatch.operator")
ATTEMPTS = 5  # conflicting writers on one key are the jobs ending on it at once: a few at most


def count(settings: OperatorSettings, cluster: Cluster, key: str, job: str, *, resumed: bool, ended: Ended) -> None:
    """Count ``job``'s end on ``key`` if it is a resumed job that failed (one GET and one write, for such a job
    only). The reset a promotion brings rides on the SessionKey's own write (:func:`lifecycle.promoted_facts`)."""
    if settings.quarantine_after <= 0 or not lifecycle.counts_against(resumed, ended.outcome, ended.condition_reason):
        return

    def change(stored: dict[str, Any]) -> dict[str, Any]:
        failed = lifecycle.after_job(stored.get("failedResumes"), job, resumed=resumed, outcome=ended.outcome,
                                     condition_reason=ended.condition_reason, promoted=False,
                                     threshold=settings.quarantine_after, now=cluster.clock())
        if failed == (stored.get("failedResumes") or None):
            return {}
        if failed is not None and failed.get("quarantinedAt") and not lifecycle.is_quarantined(stored):
            log.warning("key %s quarantined after %s failed resumed jobs in a row", key, failed["count"])
        return {"failedResumes": failed}

    write_status(cluster, key, change)


def release(cluster: Cluster, sk: SessionKeyView) -> bool:
    """``kubectl annotate sessionkey <key> pi-dispatch.dev/release-quarantine=...``: the count starts again at
    zero and the next delivery resumes; then the annotation goes. ``True`` when it was there."""
    if lifecycle.RELEASE_ANNOTATION not in lifecycle.annotations_of(sk.body):
        return False
    was = sk.stored_status.get("failedResumes") or {}
    write_status(cluster, sk.name, lambda stored: {"failedResumes": None} if stored.get("failedResumes") else {})
    remove_annotation(cluster, sk.name, lifecycle.RELEASE_ANNOTATION)
    if was.get("quarantinedAt"):
        log.warning("key %s: quarantine released by annotation after %s failed resumed jobs", sk.name,
                    was.get("count"))
    return True


def write_status(cluster: Cluster, key: str, change: Any) -> None:
    """Patch the SessionKey's status with ``change(stored status)`` (nothing when it is empty), against the
    ``resourceVersion`` it was computed from; a conflict reads again and computes again."""
    for _ in range(ATTEMPTS):
        current = cluster.sessionkey(key)
        if current is None or current.meta.deletion:
            return
        patch = change(current.stored_status)
        if not patch:
            return
        try:
            cluster.api.patch(cluster.crd("sessionkeys", key, "status"),
                              {"metadata": {"resourceVersion": current.meta.resource_version}, "status": patch})
            return
        except ApiError as exc:
            if exc.status != 409:
                raise
    raise RuntimeError(f"SessionKey {key}: {ATTEMPTS} conflicting writes in a row")


def remove_annotation(cluster: Cluster, key: str, *names: str) -> None:
    """Remove the annotations ``names`` of SessionKey ``key`` (one merge patch; a SessionKey gone is no error)."""
    try:
        cluster.api.patch(cluster.crd("sessionkeys", key),
                          {"metadata": {"annotations": dict.fromkeys(names)}})
    except ApiError as exc:
        if exc.status != 404:
            raise
