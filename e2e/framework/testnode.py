"""The test kubelet as a node backend: Pods run as local processes (``e2e/framework/kubelet/``), no container runtime.

The default of ``Cluster``: one ``python -m e2e.framework.kubelet`` process registers Node ``pidispatch-node``, binds
every Pod to it, runs them and provisions hostPath PVs under ``STATE/kubelet``. It does not heartbeat like a
kubelet would, so the controller-manager runs without the node lifecycle controllers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.framework.clusterkit import Host, node_ready, python_module_env

NODE_NAME = "pidispatch-node"


@dataclass
class TestKubeletNode:
    """The test kubelet (``e2e/framework/kubelet/``): Pods as local processes on Node ``pidispatch-node``."""

    __test__ = False  # not a pytest test class, whatever its name

    kind: str = "test"
    components: tuple[str, ...] = ("etcd", "kube-apiserver", "kube-controller-manager", "kubelet")
    authorization_mode: str = "RBAC"
    #: no node lifecycle/taint eviction (no kubelet heartbeat), no cloud, no IPAM, no CSR signing
    controllers: str = ("*,-nodelifecycle,-taint-eviction-controller,-nodeipam,-cloud-node-lifecycle,"
                        "-service-lb-controller,-node-route-controller,-csrsigning")
    start_timeout: float = 120
    _host: Host | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return NODE_NAME

    @property
    def ip(self) -> str:
        return "127.0.0.1"

    @property
    def host(self) -> Host:
        if self._host is None:
            raise RuntimeError("the node backend is not attached to a cluster")
        return self._host

    @property
    def data_dir(self) -> Path:
        """The test kubelet's data dir: ``pods/`` (per-Pod dirs, logs) and ``pv/`` (provisioned volumes)."""
        return self.host.state_dir / "kubelet"

    def attach(self, host: Host) -> None:
        self._host = host

    def prepare(self) -> None:
        pass

    def pki_extras(self) -> dict[str, Any]:
        return {}

    def apiserver_args(self) -> list[str]:
        return []

    def start_before(self, timeout: float) -> None:
        pass

    def start_after(self, timeout: float, *, kubelet: bool) -> None:
        if kubelet:
            self.start_kubelet(timeout=timeout)

    def start_kubelet(self, *, timeout: float = 60) -> None:
        host = self.host
        host.spawn("kubelet", [
            sys.executable, "-m", "e2e.framework.kubelet", f"--kubeconfig={host.kubeconfig}",
            f"--data-dir={self.data_dir}", f"--node-name={NODE_NAME}",
        ], env=python_module_env())
        k = host.kube()
        host.await_up("kubelet", f"Node {NODE_NAME} Ready", lambda: node_ready(k, NODE_NAME), timeout)

    def stop_pods(self) -> None:
        self.host.stop_component("kubelet")

    def clean(self) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {"node_name": NODE_NAME, "kubelet_dir": str(self.data_dir)}

    def restore(self, state: dict[str, Any]) -> None:
        pass
