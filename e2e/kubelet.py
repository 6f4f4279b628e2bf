"""Test kubelet: registers a Node, schedules pending Pods onto it and *runs* them as local processes.

There is no container runtime on these machines. This process plays scheduler + kubelet + a tiny
volume provisioner against the real kube-apiserver:

* registers Node ``--node-name`` (Ready, heartbeated) and binds every unscheduled Pod to it
  (``pods/binding``, as the scheduler does);
* runs each container's ``command`` + ``args`` (``$(VAR)`` expanded) with the Pod's ``env`` /
  ``envFrom`` and ``workingDir`` (created if missing) as a local process. The image is ignored; a
  container without ``command`` fails with reason ``NoCommand``. ``securityContext`` (runAsUser,
  capabilities, ...) is ignored: processes run as the kubelet's user;
* maps every volume to a local directory: PVC -> the bound PV's hostPath (this process provisions
  hostPath PVs for pending PVCs under ``DATA/pv``), emptyDir -> ``DATA/pods/<uid>/volumes/<name>``,
  hostPath as is, configMap/secret/downwardAPI/projected (incl. a real ServiceAccount token from the
  TokenRequest API) materialised as files. ``subPath``/``subPathExpr`` and ``readOnly`` are honoured;
* when running as root, the process gets a private mount namespace (``unshare --mount``) in which
  each volume is bind-mounted at its container path (e.g. ``/session``) and the termination message
  file at ``terminationMessagePath``. Mount points that do not exist are created on the host (empty
  directories/files; the host never sees the bind mounts). Without root, the process runs with no
  mounts applied and the env var ``PIDISPATCH_KUBELET_MOUNTS`` (JSON ``{containerPath: hostPath}``)
  describes the mapping it would have had;
* reports status through ``pods/status`` like a kubelet: Pending -> Running -> Succeeded/Failed with
  ``state.terminated.exitCode``/``reason``/``message`` (termination message file, max 4096 bytes,
  ``FallbackToLogsOnError`` honoured), conditions, restart counts (restartPolicy honoured);
* on graceful deletion it sends SIGTERM, SIGKILL after the grace period, and deletes the Pod with
  grace period 0;
* as a real kubelet does: ``activeDeadlineSeconds`` stops the Pod (SIGTERM, then SIGKILL) and fails it
  with ``reason: DeadlineExceeded``; a container whose env names a missing Secret or ConfigMap waits
  (``CreateContainerConfigError``, the Pod stays Pending) until it appears; an image from the registry
  ``unpullable.invalid`` (a reserved domain) cannot be pulled (``ErrImagePull``, then
  ``ImagePullBackOff``) and its Pod stays Pending, so a nonexistent image can be tried without a
  registry (every other image is ignored, as before). Container
  stdout+stderr go to ``DATA/pods/<ns>_<pod>_<uid>/logs/<container>.log``
  (``kubectl logs`` does not work: there is no kubelet API server).

Run standalone: ``python -m e2e.kubelet --kubeconfig K --data-dir D [--node-name N]``.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import logging
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests

from e2e.kube import ApiError, Kube

log = logging.getLogger("test-kubelet")

TERMINATION_MESSAGE_LIMIT = 4096
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
PROVISIONED_LABEL = "pidispatch.dev/provisioned-by"
PROVISIONER = "test-kubelet"
VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(s: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined vars replaced, ``$$`` -> ``$``, undefined kept."""
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return VAR_REF.sub(sub, s)


def pod_dir_name(pod: dict) -> str:
    md = pod["metadata"]
    return f"{md['namespace']}_{md['name']}_{md['uid']}"


class PodFailed(Exception):
    """The Pod cannot be started (bad spec for this kubelet): report Failed with this reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class _NotPulled(Exception):
    """The image cannot be pulled (its registry is ``unpullable.invalid``): ErrImagePull, then ImagePullBackOff."""

    def __init__(self, image: str, again: bool) -> None:
        self.reason = "ImagePullBackOff" if again else "ErrImagePull"
        super().__init__(f'Back-off pulling image "{image}"' if again else
                         f'failed to pull image "{image}": dial tcp: lookup {image.split("/", 1)[0]}: no such host')


UNPULLABLE_REGISTRY = "unpullable.invalid"


def _unpullable(image: str) -> bool:
    return image.split("/", 1)[0].split(":", 1)[0] == UNPULLABLE_REGISTRY


class Waiting(Exception):
    """A dependency (PVC, ConfigMap, Secret) is not ready yet; retry later."""


class TestKubelet:
    def __init__(self, kube_factory, data_dir: Path, node_name: str = "pidispatch-node",
                 use_mount_namespace: bool | None = None, server_port: int | None = None):
        self.new_kube = kube_factory
        self.kube: Kube = kube_factory()
        self.data_dir = Path(data_dir).resolve()
        self.node_name = node_name
        if use_mount_namespace is None:
            use_mount_namespace = os.geteuid() == 0 and shutil.which("unshare") is not None
        self.use_mount_namespace = use_mount_namespace
        self.server_port = server_port
        self.stop_event = threading.Event()
        self.runners: dict[str, PodRunner] = {}
        self.seen: set[str] = set()  # Pod UIDs this kubelet has started (never run a Pod twice)
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    # -- node -------------------------------------------------------------------------------
    def register_node(self) -> None:
        path = f"/api/v1/nodes/{self.node_name}"
        if self.kube.get_or_none(path) is None:
            self.kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": self.node_name,
                "labels": {"kubernetes.io/hostname": self.node_name, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(
                               platform.machine(), platform.machine()),
                           "pidispatch.dev/test-kubelet": "true"}}})
        self.heartbeat()

    def heartbeat(self, kube: Kube | None = None) -> None:
        kube = kube or self.kube
        t = now()

        def cond(type_: str, status: str, reason: str, msg: str) -> dict:
            return {"type": type_, "status": status, "reason": reason, "message": msg,
                    "lastHeartbeatTime": t, "lastTransitionTime": self._started}

        cpus = str(os.cpu_count() or 2)
        mem = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 1024}Ki"
        res = {"cpu": cpus, "memory": mem, "pods": "110", "ephemeral-storage": "100Gi"}
        kube.patch(f"/api/v1/nodes/{self.node_name}/status", {"status": {
            "capacity": res, "allocatable": res,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": self.node_name}],
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

    # -- main loops -------------------------------------------------------------------------
    def run(self, *, provision_only: bool = False) -> None:
        """Start the loops; ``provision_only`` runs only the PVC provisioner (beside a real kubelet)."""
        self._started = now()
        (self.data_dir / "pods").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "pv").mkdir(parents=True, exist_ok=True)
        loops = [(self._pvc_loop, "pvcs")]
        if not provision_only:
            self.register_node()
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
            self.heartbeat(kube)

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
            if etype != "DELETED" and not md.get("deletionTimestamp") and not spec.get("schedulingGates"):
                self._bind(kube, pod)
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
                self._final_delete(kube, pod)
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

    def _bind(self, kube: Kube, pod: dict) -> None:
        md = pod["metadata"]
        try:
            kube.create(f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}/binding", {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": md["name"], "uid": md["uid"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name}})
            log.info("bound pod %s/%s to %s", md["namespace"], md["name"], self.node_name)
        except ApiError as e:
            if e.status not in (404, 409):
                log.warning("binding %s/%s failed: %s", md["namespace"], md["name"], e)

    def _final_delete(self, kube: Kube, pod: dict) -> None:
        md = pod["metadata"]
        try:
            kube.delete(f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}",
                        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                         "preconditions": {"uid": md["uid"]}})
        except ApiError as e:
            if e.status not in (404, 409):
                log.warning("final delete of %s/%s failed: %s", md["namespace"], md["name"], e)

    def runner_done(self, uid: str) -> None:
        with self.lock:
            self.runners.pop(uid, None)

    # -- volumes: a minimal provisioner for PVCs ------------------------------------------------
    def _pvc_loop(self) -> None:
        kube = self.new_kube()
        self._list_watch(kube, "/api/v1/persistentvolumeclaims", lambda t, c: self._on_pvc(kube, t, c))

    def _on_pvc(self, kube: Kube, etype: str, pvc: dict) -> None:
        md, spec = pvc["metadata"], pvc["spec"]
        if etype == "DELETED":
            self._reclaim(kube, md)
            return
        if spec.get("volumeName") or md.get("deletionTimestamp") or pvc.get("status", {}).get("phase") == "Bound":
            return
        pv_name = f"pvc-{md['uid']}"
        host = self.data_dir / "pv" / md["namespace"] / f"{md['name']}-{md['uid'][:8]}"
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

    def _reclaim(self, kube: Kube, pvc_md: dict) -> None:
        """PVC deleted: delete the PV we provisioned for it and its directory (like reclaimPolicy Delete)."""
        pv = kube.get_or_none(f"/api/v1/persistentvolumes/pvc-{pvc_md['uid']}")
        if not pv or pv["metadata"].get("labels", {}).get(PROVISIONED_LABEL) != PROVISIONER:
            return
        kube.delete_ignore_missing(f"/api/v1/persistentvolumes/{pv['metadata']['name']}")
        path = Path(pv["spec"]["hostPath"]["path"])
        if self.data_dir in path.parents:
            shutil.rmtree(path, ignore_errors=True)

    def stop(self, timeout: float = 15) -> None:
        self.stop_event.set()
        with self.lock:
            runners = list(self.runners.values())
        for r in runners:
            r.shutdown(2)
        for r in runners:
            r.join(timeout)


class PodRunner(threading.Thread):
    """Runs one Pod: volumes, init containers, containers, status reporting."""

    def __init__(self, kubelet: TestKubelet, pod: dict):
        md = pod["metadata"]
        super().__init__(name=f"pod-{md['namespace']}/{md['name']}", daemon=True)
        self.kl = kubelet
        self.pod = pod
        self.ns, self.name, self.uid = md["namespace"], md["name"], md["uid"]
        self.kube = kubelet.new_kube()
        self.dir = kubelet.data_dir / "pods" / pod_dir_name(pod)
        self.procs: dict[str, subprocess.Popen] = {}
        self.deleting = threading.Event()  # halt: stop processes (API deletion or kubelet shutdown)
        self.delete_when_halted = False
        self.grace = 30.0
        self.start_time: str | None = None
        self.statuses: dict[str, dict] = {}
        self.init_statuses: dict[str, dict] = {}
        self.volumes: dict[str, Path] = {}
        self.volume_ro: dict[str, bool] = {}
        self.phase = "Pending"
        self.status_lock = threading.Lock()  # containers report concurrently; keep updates ordered
        self.finished = threading.Event()
        self.deadline_exceeded = False

    # -- lifecycle from the kubelet ------------------------------------------------------------
    def request_delete(self, grace: float) -> None:
        """The Pod is being deleted: stop its processes within ``grace`` seconds, then delete it."""
        self.grace = float(grace)
        self.delete_when_halted = True
        self.deleting.set()

    def kill(self, grace: float) -> None:
        self.request_delete(grace)

    def shutdown(self, grace: float) -> None:
        """The kubelet stops: stop the processes, leave the Pod object alone."""
        self.grace = float(grace)
        self.deleting.set()

    def _terminate_all(self) -> None:
        for p in list(self.procs.values()):
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for p in list(self.procs.values()):
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()

    # -- status ------------------------------------------------------------------------------------
    def _patch_status(self, extra: dict | None = None) -> None:
        with self.status_lock:
            self._patch_status_locked(extra)

    def _patch_status_locked(self, extra: dict | None) -> None:
        spec = self.pod["spec"]
        running = self.phase == "Running"
        all_ready = running and bool(self.statuses) and all(s.get("ready") for s in self.statuses.values())
        init_done = all("terminated" in s["state"] and s["state"]["terminated"]["exitCode"] == 0
                        for s in self.init_statuses.values()) and (
            len(self.init_statuses) == len(spec.get("initContainers") or []))
        t = now()
        terminal = self.phase in ("Succeeded", "Failed")

        def c(type_: str, ok: bool, reason: str | None = None) -> dict:
            d = {"type": type_, "status": "True" if ok else "False", "lastProbeTime": None,
                 "lastTransitionTime": t}
            if reason and not ok:
                d["reason"] = reason
            return d

        status: dict[str, Any] = {
            "phase": self.phase,
            "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "conditions": [
                c("PodReadyToStartContainers", bool(self.start_time) and not terminal),
                c("Initialized", init_done, "ContainersNotInitialized"),
                c("Ready", all_ready, "PodCompleted" if terminal else "ContainersNotReady"),
                c("ContainersReady", all_ready, "PodCompleted" if terminal else "ContainersNotReady"),
                c("PodScheduled", True),
            ],
            "containerStatuses": [self.statuses[c_["name"]] for c_ in spec["containers"]
                                  if c_["name"] in self.statuses],
        }
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [self.init_statuses[c_["name"]] for c_ in spec["initContainers"]
                                               if c_["name"] in self.init_statuses]
        if extra:
            status.update(extra)
        # A real kubelet keeps retrying its status sync; the apiserver may be restarting (reliability tests).
        deadline = time.monotonic() + 180
        while True:
            try:
                self.kube.patch(f"/api/v1/namespaces/{self.ns}/pods/{self.name}/status", {"status": status})
                return
            except ApiError as e:
                if e.status != 404 and e.status < 500:
                    log.warning("status update of %s/%s failed: %s", self.ns, self.name, e)
                if e.status < 500:
                    return
            except requests.RequestException as e:
                log.warning("status update of %s/%s: apiserver unreachable (%s); retrying", self.ns, self.name, e)
            if time.monotonic() > deadline or self.kl.stop_event.wait(1):
                return

    def _base_status(self, c: dict) -> dict:
        return {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False,
                "restartCount": 0, "started": False,
                "state": {"waiting": {"reason": "ContainerCreating"}}}

    # -- run -----------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # noqa: BLE001
            log.exception("pod %s/%s: runner crashed", self.ns, self.name)
            self.phase = "Failed"
            self._patch_status({"reason": "TestKubeletError", "message": str(e)[:1000]})
        finally:
            self.finished.set()
            if self.deleting.is_set():
                self._terminate_all()
                if self.delete_when_halted:
                    self.kl._final_delete(self.kube, self.pod)
            self.kl.runner_done(self.uid)

    def _enforce_deadline(self, seconds: float) -> None:
        """``activeDeadlineSeconds``: past it, stop the containers; ``_run`` then fails the Pod."""
        if self.finished.wait(seconds):
            return
        self.deadline_exceeded = True
        log.info("pod %s/%s: active deadline of %.0f s exceeded", self.ns, self.name, seconds)
        self._terminate_all()

    def _stopping(self) -> bool:
        return self.deleting.is_set() or self.deadline_exceeded

    def _run(self) -> None:
        spec = self.pod["spec"]
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        for c in spec.get("initContainers") or []:
            self.init_statuses[c["name"]] = self._base_status(c)
        for c in spec["containers"]:
            self.statuses[c["name"]] = self._base_status(c)
        self.start_time = now()
        self._patch_status()
        if spec.get("activeDeadlineSeconds"):
            threading.Thread(target=self._enforce_deadline, args=(float(spec["activeDeadlineSeconds"]),),
                             daemon=True).start()
        if not self._await_volumes():
            return
        restart = spec.get("restartPolicy", "Always")
        # init containers, one after another
        for c in spec.get("initContainers") or []:
            while True:
                code = self._run_container(c, self.init_statuses, init=True)
                if self.deleting.is_set():
                    return
                if code == 0:
                    break
                if restart == "Never":
                    self.phase = "Failed"
                    self._patch_status()
                    return
                self._backoff(self.init_statuses[c["name"]])
        # app containers, concurrently (the Pod is Running once one of them has started, as a kubelet says)
        threads = [threading.Thread(target=self._container_loop, args=(c, restart), daemon=True)
                   for c in spec["containers"]]
        for th in threads:
            th.start()
        for th in threads:
            while th.is_alive():
                th.join(0.5)
                if self.deleting.is_set():
                    self._terminate_all()
        if self.deleting.is_set():
            return
        if self.deadline_exceeded:
            self.phase = "Failed"
            self._patch_status({"reason": "DeadlineExceeded",
                                "message": "Pod was active on the node longer than the specified deadline"})
            return
        codes = [s["state"].get("terminated", {}).get("exitCode", 1) for s in self.statuses.values()]
        self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        self._patch_status()
        log.info("pod %s/%s %s (exit codes %s)", self.ns, self.name, self.phase, codes)

    def _container_loop(self, c: dict, restart: str) -> None:
        while True:
            code = self._run_container(c, self.statuses, init=False)
            if self._stopping():
                return
            if restart == "Never" or (restart == "OnFailure" and code == 0):
                return
            self._backoff(self.statuses[c["name"]])
            if self._stopping():
                return

    def _backoff(self, st: dict) -> None:
        st["lastState"] = {"terminated": st["state"].get("terminated", {})}
        st["restartCount"] += 1
        delay = min(10 * 2 ** (st["restartCount"] - 1), 300) / 10  # 1s, 2s, 4s ... (10x faster than kubelet)
        st["state"] = {"waiting": {"reason": "CrashLoopBackOff",
                                   "message": f"back-off {delay:.0f}s restarting failed container"}}
        self._patch_status()
        self.deleting.wait(delay)

    def _run_container(self, c: dict, statuses: dict[str, dict], init: bool) -> int:
        st = statuses[c["name"]]
        cdir = self.dir / "containers" / c["name"]
        cdir.mkdir(parents=True, exist_ok=True)
        term_file = cdir / f"termination-log.{st['restartCount']}"
        term_file.write_bytes(b"")
        logf = self.dir / "logs" / f"{c['name']}.log"
        started = now()
        waiting: dict | None = None
        while True:
            try:
                if _unpullable(c.get("image", "")):
                    raise _NotPulled(c["image"], waiting is not None)
                argv, env, mounts, wd = self._container_exec_spec(c, term_file)
                break
            except PodFailed as f:
                st["state"] = {"terminated": {"exitCode": 128, "reason": f.reason, "message": f.message,
                                              "startedAt": started, "finishedAt": now()}}
                self._patch_status()
                return 128
            except (Waiting, _NotPulled) as w:
                # As a real kubelet: the container waits (the Pod stays Pending) and the start is retried.
                now_waiting = {"reason": w.reason if isinstance(w, _NotPulled) else "CreateContainerConfigError",
                               "message": str(w)}
                if now_waiting != waiting:
                    waiting = now_waiting
                    st["state"] = {"waiting": waiting}
                    self._patch_status()
                if self.deleting.wait(1) or self.deadline_exceeded:
                    return 128
        with open(logf, "ab") as out:
            if self.kl.use_mount_namespace:
                spec_file = cdir / f"exec.{st['restartCount']}.json"
                spec_file.write_text(json.dumps({"argv": argv, "env": env, "workingDir": wd, "mounts": mounts}))
                cmd = ["unshare", "--mount", "--propagation", "private", "--",
                       sys.executable, "-m", "e2e.podexec", str(spec_file)]
                penv = {"PATH": os.environ.get("PATH", os.defpath),
                        "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
                p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=penv, start_new_session=True)
            else:
                env = dict(env, PIDISPATCH_KUBELET_MOUNTS=json.dumps({m["target"]: m["source"] for m in mounts}))
                os.makedirs(wd, exist_ok=True)
                try:
                    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=wd, start_new_session=True)
                except OSError as e:
                    st["state"] = {"terminated": {"exitCode": 128, "reason": "StartError", "message": str(e),
                                                  "startedAt": started, "finishedAt": now()}}
                    self._patch_status()
                    return 128
        self.procs[c["name"]] = p
        st.update(started=True, ready=not init, containerID=f"local://{p.pid}",
                  state={"running": {"startedAt": started}})
        if not init and self.phase != "Running":
            self.phase = "Running"
        self._patch_status()
        log.info("pod %s/%s container %s started (pid %d)", self.ns, self.name, c["name"], p.pid)
        code = p.wait()
        if code < 0:  # killed by a signal: report like a runtime does
            code = 128 - code
        self.procs.pop(c["name"], None)
        msg = term_file.read_bytes()[:TERMINATION_MESSAGE_LIMIT].decode(errors="replace")
        if not msg and code != 0 and c.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            tail = logf.read_bytes()[-2048:].decode(errors="replace").splitlines()[-80:]
            msg = "\n".join(tail)
        term: dict[str, Any] = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                "startedAt": started, "finishedAt": now(), "containerID": f"local://{p.pid}"}
        if msg:
            term["message"] = msg
        st.update(ready=False, started=False, state={"terminated": term})
        self._patch_status()
        return code

    # -- spec -> local process ---------------------------------------------------------------
    def _container_exec_spec(self, c: dict, term_file: Path) -> tuple[list[str], dict, list[dict], str]:
        env = self._env(c)
        if not c.get("command"):
            raise PodFailed("NoCommand", "the test kubelet cannot run image entrypoints: set command in the "
                                         f"container spec (image {c.get('image')!r} is ignored)")
        argv = [expand(a, env) for a in (c.get("command") or []) + (c.get("args") or [])]
        mounts = []
        for vm in c.get("volumeMounts") or []:
            src = self.volumes.get(vm["name"])
            if src is None:
                raise PodFailed("VolumeNotFound", f"volumeMount {vm['name']!r} has no volume")
            sub = vm.get("subPath") or (expand(vm["subPathExpr"], env) if vm.get("subPathExpr") else "")
            if sub:
                if Path(sub).is_absolute() or ".." in Path(sub).parts:
                    raise PodFailed("InvalidSubPath", f"subPath {sub!r} must be relative without '..'")
                src = src / sub
                if not src.exists():
                    src.mkdir(parents=True, exist_ok=True)
            mounts.append({"source": str(src), "target": vm["mountPath"],
                           "readOnly": bool(vm.get("readOnly") or self.volume_ro.get(vm["name"]))})
        mounts.append({"source": str(term_file),
                       "target": c.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH, "readOnly": False})
        wd = c.get("workingDir") or "/"
        return argv, env, mounts, wd

    def _env(self, c: dict) -> dict[str, str]:
        env: dict[str, str] = {
            # the kubelet's own interpreter dir first: `python -m pidispatch ...` finds the project's venv
            "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)]),
            "HOSTNAME": self.pod["spec"].get("hostname") or self.name,
        }
        if os.environ.get("HOME"):
            env["HOME"] = os.environ["HOME"]
        if self.kl.server_port:
            env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(self.kl.server_port),
                       KUBERNETES_SERVICE_PORT_HTTPS=str(self.kl.server_port))
        for ef in c.get("envFrom") or []:
            prefix = ef.get("prefix", "")
            if "configMapRef" in ef:
                data = self._configmap(ef["configMapRef"]["name"], ef["configMapRef"].get("optional"))
            else:
                data = {k: base64.b64decode(v).decode() for k, v in
                        self._secret(ef["secretRef"]["name"], ef["secretRef"].get("optional")).items()}
            env.update({prefix + k: v for k, v in data.items()})
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            elif "valueFrom" in e:
                v = self._value_from(e["valueFrom"], c)
                if v is not None:
                    env[e["name"]] = v
            else:
                env[e["name"]] = ""
        return env

    def _value_from(self, vf: dict, c: dict) -> str | None:
        if "fieldRef" in vf:
            return self._field(vf["fieldRef"]["fieldPath"])
        if "configMapKeyRef" in vf:
            r = vf["configMapKeyRef"]
            data = self._configmap(r["name"], r.get("optional"))
            if r["key"] not in data and not r.get("optional"):
                raise PodFailed("CreateContainerConfigError", f"key {r['key']} not found in ConfigMap {r['name']}")
            return data.get(r["key"])
        if "secretKeyRef" in vf:
            r = vf["secretKeyRef"]
            data = self._secret(r["name"], r.get("optional"))
            if r["key"] not in data and not r.get("optional"):
                raise PodFailed("CreateContainerConfigError", f"key {r['key']} not found in Secret {r['name']}")
            return base64.b64decode(data[r["key"]]).decode() if r["key"] in data else None
        if "resourceFieldRef" in vf:
            return "0"
        return None

    def _field(self, path: str) -> str:
        md = self.pod["metadata"]
        simple = {"metadata.name": md["name"], "metadata.namespace": md["namespace"], "metadata.uid": md["uid"],
                  "spec.nodeName": self.kl.node_name,
                  "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", "default"),
                  "status.hostIP": "127.0.0.1", "status.podIP": "127.0.0.1", "status.hostIPs": "127.0.0.1",
                  "status.podIPs": "127.0.0.1"}
        if path in simple:
            return simple[path]
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            return (md.get(m.group(1)) or {}).get(m.group(2), "")
        if path in ("metadata.labels", "metadata.annotations"):
            d = md.get(path.split(".")[1]) or {}
            return "\n".join(f'{k}="{v}"' for k, v in sorted(d.items()))
        raise PodFailed("CreateContainerConfigError", f"unsupported fieldRef {path}")

    def _await_volumes(self, retry_every: float = 1.0) -> bool:
        """Prepare the volumes, waiting for PVC binding, ConfigMaps and Secrets, and, as a real kubelet's
        volume manager does, for an apiserver that is restarting (the reliability tests stop it while Pods
        are being bound). False when the Pod was deleted or failed meanwhile."""
        while True:
            try:
                self._prepare_volumes()
                return True
            except PodFailed as f:
                self.phase = "Failed"
                self._patch_status({"reason": f.reason, "message": f.message})
                return False
            except (Waiting, requests.RequestException, ApiError) as e:
                if isinstance(e, ApiError) and e.status < 500:
                    raise
                why = str(e) if isinstance(e, Waiting) else f"apiserver unavailable: {e}"
                for s in list(self.statuses.values()) + list(self.init_statuses.values()):
                    s["state"] = {"waiting": {"reason": "ContainerCreating", "message": why}}
                if self.deleting.wait(retry_every):
                    return False

    def _configmap(self, name: str, optional: bool | None) -> dict[str, str]:
        cm = self.kube.get_or_none(f"/api/v1/namespaces/{self.ns}/configmaps/{name}")
        if cm is None:
            if optional:
                return {}
            raise Waiting(f"configmap {name!r} not found")
        return cm.get("data") or {}

    def _secret(self, name: str, optional: bool | None) -> dict[str, str]:
        s = self.kube.get_or_none(f"/api/v1/namespaces/{self.ns}/secrets/{name}")
        if s is None:
            if optional:
                return {}
            raise Waiting(f"secret {name!r} not found")
        return s.get("data") or {}

    def _prepare_volumes(self) -> None:
        for v in self.pod["spec"].get("volumes") or []:
            name = v["name"]
            if name in self.volumes:
                continue
            vdir = self.dir / "volumes" / name
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                pvc = self.kube.get_or_none(f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims/{claim}")
                if pvc is None:
                    raise Waiting(f"persistentvolumeclaim {claim!r} not found")
                if pvc.get("status", {}).get("phase") != "Bound":
                    raise Waiting(f"persistentvolumeclaim {claim!r} is not bound")
                pv = self.kube.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
                src = pv["spec"].get("hostPath") or pv["spec"].get("local")
                if not src:
                    raise PodFailed("UnsupportedVolume", f"PV {pv['metadata']['name']} is not hostPath/local")
                path = Path(src["path"])
                path.mkdir(parents=True, exist_ok=True)
                self.volumes[name] = path
                self.volume_ro[name] = bool(v["persistentVolumeClaim"].get("readOnly"))
            elif "emptyDir" in v:
                vdir.mkdir(parents=True, exist_ok=True)
                vdir.chmod(0o777)
                self.volumes[name] = vdir
            elif "hostPath" in v:
                path = Path(v["hostPath"]["path"])
                if v["hostPath"].get("type") in ("DirectoryOrCreate",):
                    path.mkdir(parents=True, exist_ok=True)
                self.volumes[name] = path
            elif "configMap" in v or "secret" in v or "downwardAPI" in v or "projected" in v:
                files = self._volume_files(v)
                vdir.mkdir(parents=True, exist_ok=True)
                for rel, (data, mode) in files.items():
                    f = vdir / rel
                    f.parent.mkdir(parents=True, exist_ok=True)
                    f.write_bytes(data)
                    f.chmod(mode)
                self.volumes[name] = vdir
                self.volume_ro[name] = True
            else:
                kind = next((k for k in v if k != "name"), "?")
                raise PodFailed("UnsupportedVolume", f"volume {name!r}: type {kind} is not supported by the "
                                                     "test kubelet")

    def _volume_files(self, v: dict) -> dict[str, tuple[bytes, int]]:
        out: dict[str, tuple[bytes, int]] = {}
        sources: list[dict] = []
        default_mode = 0o644
        if "projected" in v:
            sources = v["projected"].get("sources") or []
            default_mode = v["projected"].get("defaultMode", 0o644)
        else:
            key = next(k for k in ("configMap", "secret", "downwardAPI") if k in v)
            sources = [{key: v[key]}]
            default_mode = v[key].get("defaultMode", 0o644)

        def add(data: dict[str, bytes], items: list[dict] | None, optional: bool | None, what: str) -> None:
            if items:
                for it in items:
                    if it["key"] not in data:
                        if optional:
                            continue
                        raise Waiting(f"key {it['key']!r} not found in {what}")
                    out[it["path"]] = (data[it["key"]], it.get("mode", default_mode))
            else:
                for k, b in data.items():
                    out[k] = (b, default_mode)

        for s in sources:
            if "configMap" in s:
                r = s["configMap"]
                data = {k: x.encode() for k, x in self._configmap(r["name"], r.get("optional")).items()}
                add(data, r.get("items"), r.get("optional"), f"configmap {r['name']}")
            elif "secret" in s:
                r = s["secret"]
                name = r.get("secretName") or r.get("name")
                data = {k: base64.b64decode(x) for k, x in self._secret(name, r.get("optional")).items()}
                add(data, r.get("items"), r.get("optional"), f"secret {name}")
            elif "downwardAPI" in s:
                for it in s["downwardAPI"].get("items") or []:
                    if "fieldRef" in it:
                        out[it["path"]] = (self._field(it["fieldRef"]["fieldPath"]).encode(),
                                           it.get("mode", default_mode))
            elif "serviceAccountToken" in s:
                r = s["serviceAccountToken"]
                sa = self.pod["spec"].get("serviceAccountName") or "default"
                spec: dict[str, Any] = {"expirationSeconds": max(int(r.get("expirationSeconds", 3607)), 600),
                                        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.name,
                                                           "uid": self.uid}}
                if r.get("audience"):
                    spec["audiences"] = [r["audience"]]
                tr = self.kube.create(f"/api/v1/namespaces/{self.ns}/serviceaccounts/{sa}/token",
                                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                       "spec": spec})
                out[r["path"]] = (tr["status"]["token"].encode(), 0o600)
            else:
                raise PodFailed("UnsupportedVolume", f"projected source {list(s)} is not supported")
        return out


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.kubelet", description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--data-dir", required=True, type=Path)
    ap.add_argument("--node-name", default="pidispatch-node")
    ap.add_argument("--no-mount-namespace", action="store_true",
                    help="run processes without a private mount namespace (paths are not remapped)")
    ap.add_argument("--provision-only", action="store_true",
                    help="only provision hostPath PVs for pending PVCs (no Node, no Pods): beside a real kubelet")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s: %(message)s")
    factory = lambda: Kube.from_kubeconfig(a.kubeconfig)  # noqa: E731
    port = int(factory().server.rsplit(":", 1)[1])
    kl = TestKubelet(factory, a.data_dir, a.node_name,
                     use_mount_namespace=False if a.no_mount_namespace or os.environ.get(
                         "PIDISPATCH_KUBELET_NO_MOUNT_NAMESPACE") else None, server_port=port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    kl.run(provision_only=a.provision_only)
    stop.wait()
    log.info("stopping")
    kl.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
