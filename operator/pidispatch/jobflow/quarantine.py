"""A job's end on a key, for the key's lifecycle: count a failed resume, quarantine, release (``lifecycle.py``).

The count lives in the SessionKey's status (``failedResumes``), never in the store: a pi-dispatch host
sharing the store reads the same files. This step writes nothing: it says what it found
(``summarize_sessionkey.FailedResume``, ``Released``) and the SessionKey's one writer (``sessionkey.write``)
folds it into the status, with the object's ``resourceVersion``, so two jobs that end on one key at once never
lose a count: the loser reads again and counts on top.
"""

from __future__ import annotations

from pidispatch.api.views import SessionKeyView
from pidispatch.jobflow import lifecycle
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.summarize import Ended
from pidispatch.jobflow.summarize_sessionkey import FailedResume, Released
from pidispatch.kubeapi import ApiError
from pidispatch.settings import OperatorSettings


def count(settings: OperatorSettings, job: str, *, resumed: bool, ended: Ended,
          now: str) -> FailedResume | Released | None:
    """``job``'s end on its key, if it counts towards quarantining the transcript it resumed (a resumed job that
    failed in a way that may be the transcript's doing); ``None`` otherwise. With quarantine off
    (``quarantine_after`` 0) every end releases a count left from before. The reset a promotion brings is
    ``summarize_sessionkey.Promoted``."""
    if settings.quarantine_after <= 0:
        return Released()
    if not lifecycle.counts_against(resumed, ended.outcome, ended.condition_reason):
        return None
    return FailedResume(job, settings.quarantine_after, now)


def release(sk: SessionKeyView) -> Released | None:
    """``kubectl annotate sessionkey <key> pi-dispatch.dev/release-quarantine=...``: the count starts again at
    zero and the next delivery resumes (``retire.requests`` writes it, then removes the annotation)."""
    if lifecycle.RELEASE_ANNOTATION not in sk.meta.annotations:
        return None
    return Released()


def remove_annotation(cluster: Cluster, key: str, *names: str) -> None:
    """Remove the annotations ``names`` of SessionKey ``key`` (one merge patch; a SessionKey gone is no error)."""
    try:
        cluster.api.patch(cluster.crd("sessionkeys", key),
                          {"metadata": {"annotations": dict.fromkeys(names)}})
    except ApiError as exc:
        if exc.status != 404:
            raise
