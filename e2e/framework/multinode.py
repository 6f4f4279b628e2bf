"""Several test kubelets and the real kube-scheduler as a node backend: a cluster of several nodes, as a platform
team's is.

Opt in with ``Cluster(state_dir, backend=MultiNode())`` (the ``multinode_cluster`` fixture, ``python -m
e2e.framework.cluster up --node multi``); the single node of ``e2e/framework/testnode.py`` stays the default. What
differs from it:

* Nodes ``node-a``, ``node-b``, ``node-c`` (``NODE_NAMES``), one test kubelet process each (Pods as local
  processes), labelled ``kubernetes.io/hostname`` and ``topology.kubernetes.io/zone`` (one zone each) beside
  the test kubelet's usual ``kubernetes.io/os``/``arch``;
* the real ``kube-scheduler`` binds Pods (affinity, spread constraints, node selectors, taints are its own), not
  the test kubelet;
* one provisioner process (``pv-provisioner``) makes hostPath PVs for every node, under ``STATE/kubelet/pv``, and
  two StorageClasses: ``BLOCK_CLASS`` (the default) whose volumes are ReadWriteOnce and attach to one node at a
  time as cloud block volumes do (a Pod on another node stays ``ContainerCreating`` with a ``FailedAttachVolume``
  Multi-Attach Event until the holder's Pods using it are gone: ``e2e/framework/kubelet/attach.py``), and
  ``SHARED_CLASS``, ReadWriteMany, whose volumes mount on every node. The block class provisions no
  ReadWriteMany claim, as EBS or PD do not;
* every kubelet shares one data dir (``STATE/kubelet``): a Pod's directory is named by its namespace, name and
  uid, so what reads a Pod's log on the single node reads it here too.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.framework.clusterkit import (
    SCHEDULER_CLIENT,
    ClusterError,
    Host,
    node_ready,
    python_module_env,
    start_scheduler,
)
from e2e.framework.kube import ApiError, Kube
from e2e.framework.testnode import TestKubeletNode

NODE_NAMES = ("node-a", "node-b", "node-c")
ZONE_LABEL = "topology.kubernetes.io/zone"
BLOCK_CLASS = "block"
SHARED_CLASS = "shared"
PROVISIONER = "pidispatch.dev/test-kubelet"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def storage_classes() -> list[dict[str, Any]]:
    """The block class (default, ReadWriteOnce only) and the shared class (ReadWriteMany)."""
    def sc(name: str, modes: str, default: bool) -> dict[str, Any]:
        md: dict[str, Any] = {"name": name}
        if default:
            md["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
        return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": md,
                "provisioner": PROVISIONER, "parameters": {"accessModes": modes},
                "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}

    return [sc(BLOCK_CLASS, "ReadWriteOnce,ReadWriteOncePod", True),
            sc(SHARED_CLASS, "ReadWriteOnce,ReadWriteOncePod,ReadOnlyMany,ReadWriteMany", False)]


def untaint_ready(kube: Kube, node: str, attempts: int = 20) -> None:
    """Take off the ``not-ready`` taint the apiserver puts on every new Node, as the node lifecycle controller
    does once the Node is Ready. That controller does not run here (the test kubelet keeps no Lease); without
    this the scheduler would place no Pod.

    The write is conditional on the Node's resourceVersion (the taints are a list: a blind merge patch could
    drop a taint added meanwhile), so a write that meets the kubelet's own status update in between gets 409
    and is made again from a fresh read (a fresh-clone CI lost the whole multi-node cluster to that race)."""
    for _ in range(attempts):
        n = kube.get(f"/api/v1/nodes/{node}")
        present = n["spec"].get("taints") or []
        taints = [t for t in present if t["key"] != NOT_READY_TAINT]
        if len(taints) == len(present):
            return
        try:
            kube.patch(f"/api/v1/nodes/{node}", {"metadata": {"resourceVersion": n["metadata"]["resourceVersion"]},
                                                 "spec": {"taints": taints or None}})
            return
        except ApiError as error:
            if error.status != 409:
                raise
    raise ClusterError(f"Node {node}: the not-ready taint could not be removed in {attempts} attempts "
                       "(every write met a newer version of the Node)")


@dataclass
class MultiNode(TestKubeletNode):
    """Test kubelets on Nodes ``nodes`` and the real kube-scheduler."""

    kind: str = "multi"
    nodes: tuple[str, ...] = NODE_NAMES
    components: tuple[str, ...] = ()
    _host: Host | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.components = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "pv-provisioner",
                           *self.nodes)

    @property
    def name(self) -> str:
        """The first Node (the protocol's one name; ``nodes`` has them all)."""
        return self.nodes[0]

    def pki_extras(self) -> dict[str, Any]:
        return {"clients": (SCHEDULER_CLIENT,)}

    def start_after(self, timeout: float, *, kubelet: bool) -> None:
        host = self.host
        for sc in storage_classes():
            host.kube().create("/apis/storage.k8s.io/v1/storageclasses", sc)
        start_scheduler(host, timeout)
        self._spawn_kubelet("pv-provisioner", ["--provision-only"])
        log = host.logs / "pv-provisioner.log"
        host.await_up("pv-provisioner", "start", lambda: log.exists() and log.stat().st_size > 0, timeout)
        if not kubelet:
            return
        # each kubelet's component name is its Node's: it is on its command line (``--node-name``), which is how
        # the cluster knows the pid is still ours
        for i, node in enumerate(self.nodes):
            self._spawn_kubelet(node, [f"--node-name={node}", "--no-bind", "--no-provision", "--exclusive-attach",
                                       f"--label={ZONE_LABEL}=zone-{chr(ord('a') + i)}"])
        k = host.kube()
        for node in self.nodes:
            host.await_up(node, f"Node {node} Ready", lambda n=node: node_ready(k, n), timeout)
            untaint_ready(k, node)

    def _spawn_kubelet(self, component: str, args: list[str]) -> None:
        self.host.spawn(component, [sys.executable, "-m", "e2e.framework.kubelet",
                                    f"--kubeconfig={self.host.kubeconfig}", f"--data-dir={self.data_dir}", *args],
                        env=python_module_env())

    def stop_pods(self) -> None:
        """The scheduler first (a Pod made again meanwhile stays unbound), then the kubelets (their Pods stop)."""
        self.host.stop_component("kube-scheduler")
        for node in self.nodes:
            self.host.stop_component(node)

    def state(self) -> dict[str, Any]:
        return {"node_name": self.name, "nodes": list(self.nodes), "kubelet_dir": str(self.data_dir)}

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("nodes"):
            self.nodes = tuple(state["nodes"])
            self.__post_init__()

    def pod_dir(self, pod: dict[str, Any]) -> Path:
        md = pod["metadata"]
        return self.data_dir / "pods" / f"{md['namespace']}_{md['name']}_{md['uid']}"
