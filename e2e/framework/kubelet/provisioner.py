"""A minimal volume provisioner: a hostPath PV under ``DATA/pv`` for every pending PVC, deleted with its
directory when the PVC is (as reclaimPolicy Delete would). It also runs alone beside a real kubelet
(``--provision-only``). A claim's StorageClass whose ``parameters.accessModes`` (comma-separated) lacks one of the
claim's access modes gets no PV, as a block-storage driver provisions no ReadWriteMany volume: the claim stays
Pending with a ``ProvisioningFailed`` Event."""

from __future__ import annotations

import shutil
from pathlib import Path

from e2e.framework.kube import ApiError, Kube
from e2e.framework.kubelet.base import log

PROVISIONED_LABEL = "pidispatch.dev/provisioned-by"
PROVISIONER = "test-kubelet"


def on_pvc(kube: Kube, etype: str, pvc: dict, data_dir: Path) -> None:
    """One watch event of a PVC: provision a PV for it when it is pending, reclaim ours when it is deleted."""
    md, spec = pvc["metadata"], pvc["spec"]
    if etype == "DELETED":
        reclaim(kube, md, data_dir)
        return
    if spec.get("volumeName") or md.get("deletionTimestamp") or pvc.get("status", {}).get("phase") == "Bound":
        return
    refused = refused_modes(kube, spec)
    if refused:
        refuse(kube, pvc, refused)
        return
    pv_name = f"pvc-{md['uid']}"
    host = data_dir / "pv" / md["namespace"] / f"{md['name']}-{md['uid'][:8]}"
    host.mkdir(parents=True, exist_ok=True)
    host.chmod(0o777)
    size = (spec.get("resources", {}).get("requests") or {}).get("storage", "1Gi")
    pv = {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "labels": {PROVISIONED_LABEL: PROVISIONER},
                     "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "storageClassName": spec.get("storageClassName") or "",
            "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": md["namespace"],
                         "name": md["name"], "uid": md["uid"]},
            "hostPath": {"path": str(host), "type": "DirectoryOrCreate"},
        },
    }
    try:
        kube.create("/api/v1/persistentvolumes", pv)
        log.info("provisioned %s for PVC %s/%s at %s", pv_name, md["namespace"], md["name"], host)
    except ApiError as e:
        if e.status != 409:
            raise


_refused: set[str] = set()  # claims whose refusal has an Event already


def refused_modes(kube: Kube, spec: dict) -> list[str]:
    """The claim's access modes its StorageClass does not provide (none when the class does not say)."""
    name = spec.get("storageClassName")
    sc = kube.get_or_none(f"/apis/storage.k8s.io/v1/storageclasses/{name}") if name else None
    allowed = ((sc or {}).get("parameters") or {}).get("accessModes")
    if not allowed:
        return []
    return [m for m in spec.get("accessModes") or [] if m not in allowed.split(",")]


def refuse(kube: Kube, pvc: dict, modes: list[str]) -> None:
    md = pvc["metadata"]
    if md["uid"] in _refused:
        return
    _refused.add(md["uid"])
    message = (f"failed to provision volume with StorageClass {pvc['spec']['storageClassName']!r}: "
               f"access mode(s) {', '.join(modes)} not supported")
    log.info("PVC %s/%s: %s", md["namespace"], md["name"], message)
    try:
        kube.create(f"/api/v1/namespaces/{md['namespace']}/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{md['name']}.", "namespace": md["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": md["namespace"],
                               "name": md["name"], "uid": md["uid"]},
            "reason": "ProvisioningFailed", "message": message, "type": "Warning",
            "source": {"component": PROVISIONER}, "count": 1})
    except ApiError as e:
        log.warning("event for PVC %s/%s not recorded: %s", md["namespace"], md["name"], e)


def reclaim(kube: Kube, pvc_md: dict, data_dir: Path) -> None:
    """PVC deleted: delete the PV we provisioned for it and its directory (like reclaimPolicy Delete)."""
    pv = kube.get_or_none(f"/api/v1/persistentvolumes/pvc-{pvc_md['uid']}")
    if not pv or pv["metadata"].get("labels", {}).get(PROVISIONED_LABEL) != PROVISIONER:
        return
    kube.delete_ignore_missing(f"/api/v1/persistentvolumes/{pv['metadata']['name']}")
    path = Path(pv["spec"]["hostPath"]["path"])
    if data_dir in path.parents:
        shutil.rmtree(path, ignore_errors=True)

