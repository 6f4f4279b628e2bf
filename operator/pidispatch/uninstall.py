"""The chart's pre-delete hook (``pidispatch stop-jobs``): what an uninstall must stop (issue 14 item 6).

The operator scaled to zero, then every job Pod of its release deleted, so that none keeps the staging
claim (``kubernetes.io/pvc-protection``) and ``helm uninstall`` can delete it. Another release's job
Pods in the same namespace are not its to stop (issue 31). Retention (``jobflow/retention.py``) deletes
finished Pods on a timer; this is the one-shot counterpart, run from the command line, not the operator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from pidispatch.contract import RELEASE_LABEL
from pidispatch.jobflow.retention import JOB_SELECTOR, RetainedPod, delete_with_uid
from pidispatch.kubeapi import Api, name_segment


def split_for_uninstall(pods: Iterable[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Job Pods as (ended, not ended) names: the ended ones go quietly, the others are named as stopped."""
    ended: list[str] = []
    running: list[str] = []
    for pod in map(RetainedPod.of, pods):
        if pod.deleting and pod.ended:
            continue
        (ended if pod.ended else running).append(pod.name)
    return sorted(ended), sorted(running)


def release_pods(pods: Iterable[dict[str, Any]], release: str | None, staging_claim: str | None
                 ) -> list[dict[str, Any]]:
    """The job Pods that are this release's: labelled with it, or (made by an operator from before the
    release label) unlabelled and mounting this release's staging claim, the ones that would hold it.
    Without a release (a hook from before the label): every job Pod, as it always did."""
    if release is None:
        return list(pods)

    def mine(pod: dict[str, Any]) -> bool:
        labels = pod["metadata"].get("labels") or {}
        if RELEASE_LABEL in labels:
            return bool(labels[RELEASE_LABEL] == release)
        claims = {(v.get("persistentVolumeClaim") or {}).get("claimName") for v in pod["spec"].get("volumes") or ()}
        return staging_claim is not None and staging_claim in claims

    return [pod for pod in pods if mine(pod)]


def stop_job_pods(api: Api, namespace: str, deployment: str | None, timeout: float = 120,
                  say: Callable[[str], None] = print, release: str | None = None,
                  staging_claim: str | None = None) -> int:
    """Scale the operator Deployment to zero and wait for its Pods to go (so that nothing starts a new
    job Pod), then delete every job Pod of ``release`` (:func:`release_pods`) and wait for them to go.
    0 when none is left, 1 when some still were at ``timeout`` (each wait has its own)."""
    pods_path = f"/api/v1/namespaces/{namespace}/pods"

    def listed() -> list[dict[str, Any]]:
        return release_pods(api.list(pods_path, labelSelector=JOB_SELECTOR), release, staging_claim)

    if deployment:
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name_segment(deployment)}"
        found = api.get_or_none(path)
        if found is not None:
            api.patch(f"{path}/scale", {"spec": {"replicas": 0}})
            selector = ",".join(f"{k}={v}" for k, v in found["spec"]["selector"]["matchLabels"].items())
            if not _wait(lambda: not api.list(pods_path, labelSelector=selector), timeout):
                say(f"the operator's Pods were still there after {int(timeout)} s; job Pods deleted anyway")
            else:
                say(f"operator Deployment {deployment} scaled to 0: it starts no more job Pods")
    pods = {p["metadata"]["name"]: p for p in listed()}
    ended, running = split_for_uninstall(pods.values())
    for name in ended + running:
        delete_with_uid(api, f"{pods_path}/{name_segment(name)}", pods[name]["metadata"].get("uid"))
    for name in running:
        say(f"job Pod {name} was still running: stopped by the uninstall (its Job is recorded Failed when an "
            f"operator next runs in this namespace)")
    say(f"{len(ended)} finished job Pod(s) deleted, {len(running)} running one(s) stopped")
    if not _wait(lambda: not listed(), timeout):
        left = [p["metadata"]["name"] for p in listed()]
        say(f"job Pods still there after {int(timeout)} s, holding the staging claim: {', '.join(left)}")
        return 1
    return 0


def _wait(done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True
