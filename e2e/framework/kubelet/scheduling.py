"""Scheduling as the test kubelet does it: every unscheduled Pod is bound to its one Node; a Pod it stopped is
deleted for good (grace period 0), as a kubelet does once its containers are gone."""

from __future__ import annotations

from e2e.framework.kube import ApiError, Kube
from e2e.framework.kubelet.base import log


def bind(kube: Kube, pod: dict, node_name: str) -> None:
    """``pods/binding`` to ``node_name``, as the scheduler does; a Pod gone or bound meanwhile is left alone."""
    md = pod["metadata"]
    try:
        kube.create(f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": md["name"], "uid": md["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}})
        log.info("bound pod %s/%s to %s", md["namespace"], md["name"], node_name)
    except ApiError as e:
        if e.status not in (404, 409):
            log.warning("binding %s/%s failed: %s", md["namespace"], md["name"], e)


def final_delete(kube: Kube, pod: dict) -> None:
    """Delete the Pod with grace period 0, only if it is still this one (uid precondition)."""
    md = pod["metadata"]
    try:
        kube.delete(f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}",
                    {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                     "preconditions": {"uid": md["uid"]}})
    except ApiError as e:
        if e.status not in (404, 409):
            log.warning("final delete of %s/%s failed: %s", md["namespace"], md["name"], e)
