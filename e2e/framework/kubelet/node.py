"""The Node: registered once, then heartbeated Ready with this machine's capacity."""

from __future__ import annotations

import os
import platform

from e2e.framework.kube import Kube
from e2e.framework.kubelet.base import now


def register_node(kube: Kube, node_name: str, started: str, labels: dict[str, str] | None = None) -> None:
    """Create Node ``node_name`` (with the usual labels and ``labels``) when it does not exist, then report it
    Ready."""
    path = f"/api/v1/nodes/{node_name}"
    if kube.get_or_none(path) is None:
        kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": node_name,
            "labels": {"kubernetes.io/hostname": node_name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(
                           platform.machine(), platform.machine()),
                       "pidispatch.dev/test-kubelet": "true", **(labels or {})}}})
    heartbeat(kube, node_name, started)


def heartbeat(kube: Kube, node_name: str, started: str) -> None:
    """Patch the Node's status: Ready, no pressure, this machine's CPUs and memory; ``started`` is when the
    conditions last changed."""
    t = now()

    def cond(type_: str, status: str, reason: str, msg: str) -> dict:
        return {"type": type_, "status": status, "reason": reason, "message": msg,
                "lastHeartbeatTime": t, "lastTransitionTime": started}

    cpus = str(os.cpu_count() or 2)
    mem = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 1024}Ki"
    res = {"cpu": cpus, "memory": mem, "pods": "110", "ephemeral-storage": "100Gi"}
    kube.patch(f"/api/v1/nodes/{node_name}/status", {"status": {
        "capacity": res, "allocatable": res,
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                      {"type": "Hostname", "address": node_name}],
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "test kubelet"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "test kubelet"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "test kubelet"),
            cond("Ready", "True", "KubeletReady", "test kubelet runs Pods as local processes"),
        ],
        "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": platform.release(),
                     "osImage": "local processes (pidispatch test kubelet)",
                     "containerRuntimeVersion": "local://0", "kubeletVersion": "v0.0.0-pidispatch-test",
                     "kubeProxyVersion": "", "operatingSystem": "linux",
                     "architecture": "amd64" if platform.machine() == "x86_64" else platform.machine()},
    }})
