"""One Pod's life on the test kubelet: its volumes, init containers one after another, then its containers as
local processes (restarted as ``restartPolicy`` says, with back-off), its status reported through
``pods/status`` as a kubelet reports it, and its end (deletion, ``activeDeadlineSeconds``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests

from e2e.framework.kube import ApiError
from e2e.framework.kubelet.base import (
    TERMINATION_MESSAGE_LIMIT,
    NotPulled,
    PodFailed,
    Waiting,
    expand,
    log,
    now,
    pod_dir_name,
    unpullable,
)
from e2e.framework.kubelet.config import PodConfig
from e2e.framework.kubelet.scheduling import final_delete
from e2e.framework.kubelet.volumes import PodVolumes

REPO_ROOT = Path(__file__).resolve().parents[3]


class PodRunner(threading.Thread):
    """Runs one Pod: volumes, init containers, containers, status reporting."""

    def __init__(self, kubelet: Any, pod: dict):
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
        self.config = PodConfig(self.kube, pod, kubelet)
        self.pod_volumes = PodVolumes(self.kube, pod, self.dir, self.config)
        self.volumes = self.pod_volumes.volumes  # name -> host path, as they are prepared
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
                    final_delete(self.kube, self.pod)
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
                if unpullable(c.get("image", "")):
                    raise NotPulled(c["image"], waiting is not None)
                argv, env, mounts, wd = self._container_exec_spec(c, term_file)
                break
            except PodFailed as f:
                st["state"] = {"terminated": {"exitCode": 128, "reason": f.reason, "message": f.message,
                                              "startedAt": started, "finishedAt": now()}}
                self._patch_status()
                return 128
            except (Waiting, NotPulled) as w:
                # As a real kubelet: the container waits (the Pod stays Pending) and the start is retried.
                now_waiting = {"reason": w.reason if isinstance(w, NotPulled) else "CreateContainerConfigError",
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
                       sys.executable, "-m", "e2e.framework.podexec", str(spec_file)]
                penv = {"PATH": os.environ.get("PATH", os.defpath),
                        "PYTHONPATH": str(REPO_ROOT)}
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
        """What to run for container ``c``: argv (``$(VAR)`` expanded), env, bind mounts, working dir."""
        env = self.config.env(c)
        if not c.get("command"):
            raise PodFailed("NoCommand", "the test kubelet cannot run image entrypoints: set command in the "
                                         f"container spec (image {c.get('image')!r} is ignored)")
        argv = [expand(a, env) for a in (c.get("command") or []) + (c.get("args") or [])]
        mounts = self.pod_volumes.mounts(c, env, term_file)
        wd = c.get("workingDir") or "/"
        return argv, env, mounts, wd

    def _await_volumes(self, retry_every: float = 1.0) -> bool:
        """Prepare the volumes, waiting for PVC binding, ConfigMaps and Secrets, and, as a real kubelet's
        volume manager does, for an apiserver that is restarting (the reliability tests stop it while Pods
        are being bound). False when the Pod was deleted or failed meanwhile."""
        while True:
            try:
                self.pod_volumes.prepare()
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

def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
