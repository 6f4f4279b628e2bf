"""ReadWriteOnce volumes that attach to one node at a time, as cloud block volumes (EBS, PD, Azure Disk) do.

The test kubelet's hostPath volumes are one directory every node could share; on a cluster of several test
kubelets (``e2e/framework/multinode.py``) that would hide the failure a real cluster shows: a Pod on another node than
the one a ReadWriteOnce volume is attached to never gets it. So, before a Pod's claim is mounted, its node *attaches*
the PV: the PV's annotation ``ATTACHED_TO`` names the node holding it. Another node takes it over only once no Pod
on the holder that uses the claim is left (a terminated Pod's volumes are unmounted, so it does not count; a Pod
being deleted still does, until it is gone). Until then the Pod stays ``ContainerCreating`` and a Warning Event
``FailedAttachVolume`` "Multi-Attach error for volume ..." is recorded, worded as the attach/detach controller
words it, and the kubelet retries.

Every attach writes the PV with its ``resourceVersion`` as a precondition, even when this node already holds it:
two nodes deciding at once cannot both win (the loser re-reads and sees the winner's Pods).
ReadWriteMany and ReadOnlyMany volumes mount on every node and are never attached.
"""

from __future__ import annotations

from typing import Any

from e2e.framework.kube import ApiError, Kube
from e2e.framework.kubelet.base import Waiting, log, now

ATTACHED_TO = "pidispatch.dev/attached-to"
ATTACH_GENERATION = "pidispatch.dev/attach-generation"
SHARED_MODES = ("ReadWriteMany", "ReadOnlyMany")


class MultiAttach(Waiting):
    """The volume is attached to another node that still runs a Pod using it."""

    def __init__(self, pv: str, holder: str, users: list[str]) -> None:
        self.pv, self.holder, self.users = pv, holder, users
        super().__init__(f'Multi-Attach error for volume "{pv}" Volume is already used by pod(s) {", ".join(users)}')


def exclusive(pv: dict[str, Any]) -> bool:
    """Does this PV attach to one node at a time (no mode that lets several nodes mount it)?"""
    return not any(m in SHARED_MODES for m in pv["spec"].get("accessModes") or [])


def uses_claim(pod: dict[str, Any], claim: str) -> bool:
    return any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim
               for v in pod["spec"].get("volumes") or [])


def users_on(kube: Kube, node: str, namespace: str, claim: str) -> list[str]:
    """Pods on ``node`` that use ``namespace/claim`` and have not terminated (their volume stays attached)."""
    pods = kube.list(f"/api/v1/namespaces/{namespace}/pods", fieldSelector=f"spec.nodeName={node}")
    return sorted(p["metadata"]["name"] for p in pods
                  if uses_claim(p, claim) and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))


def attach(kube: Kube, pv_name: str, node: str, namespace: str, claim: str, attempts: int = 20) -> None:
    """Attach PV ``pv_name`` (bound to ``namespace/claim``) to ``node``; ``MultiAttach`` while another node holds
    it for a Pod that still uses it."""
    path = f"/api/v1/persistentvolumes/{pv_name}"
    for _ in range(attempts):
        pv = kube.get(path)
        if not exclusive(pv):
            return
        annotations = pv["metadata"].get("annotations") or {}
        holder = annotations.get(ATTACHED_TO)
        if holder and holder != node:
            users = users_on(kube, holder, namespace, claim)
            if users:
                raise MultiAttach(pv_name, holder, users)
        generation = int(annotations.get(ATTACH_GENERATION) or 0) + 1
        try:
            kube.patch(path, {"metadata": {"resourceVersion": pv["metadata"]["resourceVersion"], "annotations": {
                ATTACHED_TO: node, ATTACH_GENERATION: str(generation)}}})
        except ApiError as e:
            if e.status == 409:
                continue  # another node wrote it meanwhile: decide again on what it wrote
            raise
        if holder != node:
            log.info("attached %s to %s%s", pv_name, node, f" (detached from {holder})" if holder else "")
        return
    raise Waiting(f"volume {pv_name}: attach kept conflicting")


def record_failed_attach(kube: Kube, pod: dict[str, Any], message: str) -> None:
    """A Warning Event ``FailedAttachVolume`` on the Pod, as the attach/detach controller records it."""
    md = pod["metadata"]
    t = now()
    try:
        kube.create(f"/api/v1/namespaces/{md['namespace']}/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{md['name']}.", "namespace": md["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": md["namespace"], "name": md["name"],
                               "uid": md["uid"]},
            "reason": "FailedAttachVolume", "message": message, "type": "Warning",
            "source": {"component": "attachdetach-controller"},
            "firstTimestamp": t, "lastTimestamp": t, "count": 1,
        })
    except ApiError as e:
        log.warning("event for %s/%s not recorded: %s", md["namespace"], md["name"], e)
