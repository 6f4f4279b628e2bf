"""Step 8, retention: what goes once a Job has finished (issue 14 item 6).

* A finished Job's Pod and per-job token Secret go ``job_pod_retention_seconds`` after its
  ``completedAt``: an ended Pod still holds the staging claim (``kubernetes.io/pvc-protection``), so
  finished Pods kept forever keep ``helm uninstall`` from ever deleting it. A Pod that has not ended
  is never deleted here (nor is its Job), whatever its Job's status says.
* The Job itself goes ``job_ttl_seconds_after_finished`` after ``completedAt`` when that is set (as
  batch/v1 Jobs' ``ttlSecondsAfterFinished``); its Pod and Secret follow by ownerReference garbage
  collection. A refused Job whose issue comment is still owed waits for it. SessionKeys are not
  touched: they are the conversation, and outlive every Job that continued it.
* The chart's pre-delete hook (``pidispatch stop-jobs``) stops what retention would not: it lives in
  ``pidispatch/uninstall.py`` and finds the job Pods by :data:`JOB_SELECTOR`.

:func:`due` decides, from plain data and an injected clock; :class:`Retention` lists, decides and
deletes on its own thread. Every delete carries a precondition on the uid it was decided for (a Pod or
Job re-created under the name meanwhile is left alone), except the token Secret's: the operator may
create Secrets but never read one, so it deletes it by its name, which holds the Job's uid.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pidispatch.api.views import JobView
from pidispatch.contract import JOB_LABEL, MANAGED_BY
from pidispatch.events import emit
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.comment import comment_pending
from pidispatch.jobflow.podview import PodView
from pidispatch.jobflow.summarize import TERMINAL_PHASES
from pidispatch.kubeapi import Api, ApiError, name_segment
from pidispatch.manifests.pod import gateway_secret_name, token_secret_name, transfer_secret_name
from pidispatch.settings import OperatorSettings

log = logging.getLogger("pidispatch.operator")

#: Every job Pod (and token Secret) the operator creates carries both labels.
JOB_SELECTOR = ",".join([*(f"{k}={v}" for k, v in MANAGED_BY.items()), JOB_LABEL])
ENDED_POD_PHASES = frozenset({"Succeeded", "Failed"})


class Kind(StrEnum):
    POD = "Pod"
    SECRET = "Secret"
    JOB = "Job"


@dataclass(frozen=True)
class Delete:
    """One deletion :func:`due` decided. ``uid`` is the precondition (``None``: by name, the token Secret)."""

    kind: Kind
    name: str
    uid: str | None
    job: str
    age_seconds: float


def finished_at(job: JobView) -> float | None:
    """The Job's ``completedAt`` in seconds since the epoch, ``None`` when it has none (or not RFC 3339)."""
    stamp = job.status.completedAt
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() if stamp else None
    except ValueError:
        return None


def pod_ended(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ENDED_POD_PHASES


def due(job: JobView, pods: Sequence[dict[str, Any]], now: float, settings: OperatorSettings,
        secret_gone: bool = False) -> list[Delete]:
    """What retention deletes of ``job`` at ``now`` (epoch seconds), given the job Pods of the namespace.

    ``secret_gone``: this process already deleted (or found gone) the Job's token Secret.
    """
    if job.phase not in TERMINAL_PHASES or job.meta.deletion:
        return []
    finished = finished_at(job)
    if finished is None:
        return []
    age = now - finished
    uid, name = job.uid, job.name
    own = [p for p in pods if PodView.owner_uid_of(p) == uid]  # Jobs × Pods a pass: not a whole view each
    if not all(pod_ended(p) for p in own):
        return []  # its Pod is still running (or yet to start): stopping it is nobody's retention
    ttl = settings.job_ttl_seconds_after_finished
    if ttl is not None and age >= ttl and not comment_pending(job, now):
        return [Delete(Kind.JOB, name, uid, name, age)]
    if age < settings.job_pod_retention_seconds:
        return []
    actions = [Delete(Kind.POD, p["metadata"]["name"], p["metadata"].get("uid"), name, age) for p in own
               if not p["metadata"].get("deletionTimestamp")]
    if not secret_gone:
        actions.append(Delete(Kind.SECRET, token_secret_name(name, uid), None, name, age))
        if settings.staging.transfer is not None:  # its transfer token opens nothing once the Job ended
            actions.append(Delete(Kind.SECRET, transfer_secret_name(name, uid), None, name, age))
        if settings.gateway is not None:  # nor its capability (which also expires by itself)
            actions.append(Delete(Kind.SECRET, gateway_secret_name(name, uid), None, name, age))
    return actions


def check_interval(settings: OperatorSettings) -> float:
    """How often retention looks: a quarter of the shorter period, from 5 s to a minute."""
    periods = [settings.job_pod_retention_seconds]
    if settings.job_ttl_seconds_after_finished is not None:
        periods.append(settings.job_ttl_seconds_after_finished)
    return float(min(60, max(5, min(periods) // 4)))


def delete_with_uid(api: Api, path: str, uid: str | None) -> bool:
    """DELETE ``path`` if it is still ``uid``; False when it is gone or another object has the name now."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    if uid is not None:
        body["preconditions"] = {"uid": uid}
    try:
        api.request("DELETE", path, body)
    except ApiError as exc:
        if exc.status in (404, 409):  # gone, or the precondition failed: a new object under the name
            return False
        raise
    return True


class Retention:
    """The retention pass on its own thread, every :func:`check_interval` seconds (``wall``: the clock)."""

    def __init__(self, settings: OperatorSettings, cluster: Cluster, wall: Callable[[], float] = time.time) -> None:
        self.s = settings
        self.cluster = cluster
        self._wall = wall
        # Job uids whose token Secret this process has deleted or found gone: one DELETE per Job and process
        # (the operator cannot list Secrets to know). Pruned to the Jobs that still exist on every pass.
        self._secret_gone: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="pidispatch-retention", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(check_interval(self.s)):
            try:
                self.run_once()
            except Exception as exc:  # the next pass retries; one failure must not end the loop
                log.warning("retention failed: %s: %s", type(exc).__name__, exc)

    def run_once(self) -> list[Delete]:
        """One pass: list the Jobs and the job Pods, delete what is due; the deletions done."""
        jobs = self.cluster.jobs()
        pods = self.cluster.api.list(self.cluster.pods(), labelSelector=JOB_SELECTOR)
        self._secret_gone &= {job.uid for job in jobs}
        now = self._wall()
        done = []
        for job in jobs:
            for action in due(job, pods, now, self.s, job.uid in self._secret_gone):
                try:
                    if self._delete(job, action):
                        done.append(action)
                except ApiError as exc:
                    log.warning("retention: deleting %s %s failed: %s", action.kind, action.name, exc)
        return done

    def _delete(self, job: JobView, action: Delete) -> bool:
        c = self.cluster
        if action.kind is Kind.SECRET:
            path = f"{c.secrets()}/{name_segment(action.name)}"
        else:
            path = c.pods(action.name) if action.kind is Kind.POD else c.crd("jobs", action.name)
        deleted = delete_with_uid(c.api, path, action.uid)  # raises on anything but done, gone or replaced
        if action.kind is Kind.SECRET:
            self._secret_gone.add(job.uid)
        if not deleted:
            return False
        setting = "job.ttlSecondsAfterFinished" if action.kind is Kind.JOB else "job.podRetentionSeconds"
        emit("job_retention_deleted", job=action.job, kind=str(action.kind), name=action.name,
             finishedSecondsAgo=int(action.age_seconds))
        if action.kind is Kind.POD:
            c.event(job, "Normal", "PodDeleted", f"Pod {action.name} deleted {int(action.age_seconds)} s after the "
                                                 f"job finished ({setting}).")
        return True
