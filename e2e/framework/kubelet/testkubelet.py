"""The test kubelet's loops: Pods (bind each unscheduled one, run each bound here, stop each deleted), PVCs
(provision, reclaim) and the Node's heartbeat, each a list/watch in a thread of its own that survives API
errors."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from e2e.framework.kube import Kube
from e2e.framework.kubelet.base import log, now
from e2e.framework.kubelet.node import heartbeat, register_node
from e2e.framework.kubelet.pods import PodRunner
from e2e.framework.kubelet.provisioner import on_pvc
from e2e.framework.kubelet.scheduling import bind, final_delete


class TestKubelet:
    """The loops: a list/watch of Pods (bind, run, stop), one of PVCs (provision), a heartbeat."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, kube_factory, data_dir: Path, node_name: str = "pidispatch-node",
                 use_mount_namespace: bool | None = None, server_port: int | None = None, *,
                 bind_pods: bool = True, provision: bool = True, exclusive_attach: bool = False,
                 labels: dict[str, str] | None = None):
        """``bind_pods=False``: leave unscheduled Pods to a scheduler (several nodes, the real kube-scheduler);
        ``provision=False``: another process provisions PVs; ``exclusive_attach``: ReadWriteOnce volumes attach to
        one node at a time (``e2e/framework/kubelet/attach.py``); ``labels``: more labels on the Node."""
        self.new_kube = kube_factory
        self.kube: Kube = kube_factory()
        self.data_dir = Path(data_dir).resolve()
        self.node_name = node_name
        if use_mount_namespace is None:
            use_mount_namespace = os.geteuid() == 0 and shutil.which("unshare") is not None
        self.use_mount_namespace = use_mount_namespace
        self.server_port = server_port
        self.bind_pods, self.provision, self.exclusive_attach = bind_pods, provision, exclusive_attach
        self.labels = dict(labels or {})
        self.stop_event = threading.Event()
        self.runners: dict[str, PodRunner] = {}
        self.seen: set[str] = set()  # Pod UIDs this kubelet has started (never run a Pod twice)
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    # -- main loops -------------------------------------------------------------------------
    def run(self, *, provision_only: bool = False) -> None:
        """Start the loops; ``provision_only`` runs only the PVC provisioner (beside a real kubelet)."""
        self._started = now()
        (self.data_dir / "pods").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "pv").mkdir(parents=True, exist_ok=True)
        loops = [(self._pvc_loop, "pvcs")] if self.provision or provision_only else []
        if not provision_only:
            register_node(self.kube, self.node_name, self._started, self.labels)
            loops += [(self._pod_loop, "pods"), (self._heartbeat_loop, "hb")]
        for target, name in loops:
            th = threading.Thread(target=self._guard, args=(target,), name=name, daemon=True)
            th.start()
            self.threads.append(th)
        log.info("test kubelet running: node %s, data %s, mount namespaces %s",
                 self.node_name, self.data_dir, self.use_mount_namespace)

    def _guard(self, fn) -> None:
        while not self.stop_event.is_set():
            try:
                fn()
            except Exception:  # noqa: BLE001 - loops must survive API hiccups
                log.exception("%s loop failed; restarting", fn.__name__)
                self.stop_event.wait(1)

    def _heartbeat_loop(self) -> None:
        kube = self.new_kube()
        while not self.stop_event.wait(20):
            heartbeat(kube, self.node_name, self._started)

    def _list_watch(self, kube: Kube, path: str, handle) -> None:
        lst = kube.get(path)
        for item in lst.get("items") or []:
            handle("ADDED", item)
        rv = lst["metadata"]["resourceVersion"]
        while not self.stop_event.is_set():
            for ev in kube.watch(path, resource_version=rv, timeout_seconds=30):
                if self.stop_event.is_set():
                    return
                obj = ev["object"]
                if ev["type"] == "ERROR":
                    return  # e.g. 410 Gone: relist
                rv = obj["metadata"].get("resourceVersion", rv)
                if ev["type"] != "BOOKMARK":
                    handle(ev["type"], obj)

    def _pod_loop(self) -> None:
        kube = self.new_kube()
        self._list_watch(kube, "/api/v1/pods", lambda t, p: self._on_pod(kube, t, p))

    def _on_pod(self, kube: Kube, etype: str, pod: dict) -> None:
        md, spec = pod["metadata"], pod["spec"]
        uid = md["uid"]
        node = spec.get("nodeName")
        if not node:
            if self.bind_pods and etype != "DELETED" and not md.get("deletionTimestamp") and not spec.get(
                    "schedulingGates"):
                bind(kube, pod, self.node_name)
            return
        if node != self.node_name:
            return
        with self.lock:
            runner = self.runners.get(uid)
        if etype == "DELETED":
            if runner:
                runner.kill(0)
            return
        if md.get("deletionTimestamp"):
            if runner:
                runner.request_delete(spec.get("terminationGracePeriodSeconds", 30) if md.get(
                    "deletionGracePeriodSeconds") is None else md["deletionGracePeriodSeconds"])
            else:
                final_delete(kube, pod)
            return
        phase = pod.get("status", {}).get("phase")
        with self.lock:
            if runner is not None or uid in self.seen or phase in ("Succeeded", "Failed"):
                return
            self.seen.add(uid)
            if phase == "Running":
                # bound to this node and running, but not by this kubelet process (it restarted):
                # the local process is gone
                runner = None
            else:
                runner = PodRunner(self, pod)
                self.runners[uid] = runner
        if runner is None:
            kube.patch(f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}/status", {"status": {
                "phase": "Failed", "reason": "TestKubeletRestarted",
                "message": "the test kubelet restarted; local processes of this Pod are gone"}})
            return
        runner.start()

    def runner_done(self, uid: str) -> None:
        with self.lock:
            self.runners.pop(uid, None)

    def _pvc_loop(self) -> None:
        kube = self.new_kube()
        self._list_watch(kube, "/api/v1/persistentvolumeclaims", lambda t, c: on_pvc(kube, t, c, self.data_dir))

    def stop(self, timeout: float = 15) -> None:
        self.stop_event.set()
        with self.lock:
            runners = list(self.runners.values())
        for r in runners:
            r.shutdown(2)
        for r in runners:
            r.join(timeout)
