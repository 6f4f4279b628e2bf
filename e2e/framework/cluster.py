"""Local Kubernetes control plane for development and tests (no Docker).

Starts ``etcd``, ``kube-apiserver`` (RBAC on, x509 client certificates from a generated CA,
ServiceAccount tokens signed by a generated key), ``kube-controller-manager`` (garbage collector,
namespace deletion, PV binder, ServiceAccount controllers) on 127.0.0.1, from the binaries built by
``e2e/controlplane/build.sh``, and a node backend that runs Pods: the test kubelet (``e2e/framework/testnode.py``,
Pods as local processes, the default) or a real node (``e2e/framework/realnode.py``, kubelet + containerd + runc).
The backend is a parameter (``e2e/framework/clusterkit.py`` says what it must do); this module knows no backend's
internals.

Command line (used by ``make cluster-up`` / ``make cluster-down``)::

    python -m e2e.framework.cluster up [--dir DIR] [--node auto|real|test|multi] [--no-kubelet]
    python -m e2e.framework.cluster down [--dir DIR]
    python -m e2e.framework.cluster status [--dir DIR]

``DIR`` defaults to ``$PIDISPATCH_CLUSTER_DIR`` or ``~/.cache/pidispatch/cluster``; the admin
kubeconfig is ``DIR/kubeconfig``. From Python::

    c = Cluster(state_dir); c.start(); ...; c.stop()
    c = Cluster(state_dir, backend=RealNode()); c.start(); ...; c.stop()
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.framework.clusterkit import (
    REPO_ROOT,
    ClusterError,
    NodeBackend,
    alive,
    free_port,
    node_ready,
    pid_is,
    tail,
    write_kubeconfig,
    write_pki,
)
from e2e.framework.kube import ApiError, Kube, wait_for
from e2e.framework.multinode import MultiNode
from e2e.framework.realnode import RealNode, unavailable
from e2e.framework.testnode import NODE_NAME, TestKubeletNode
from testkit.pinned import bin_dir

__all__ = ["Cluster", "ClusterError", "DEFAULT_STATE_DIR", "NODE_NAME", "REPO_ROOT", "bin_dir", "free_port",
           "node_ready", "pvc_host_path", "write_kubeconfig"]

DEFAULT_STATE_DIR = Path(
    os.environ.get("PIDISPATCH_CLUSTER_DIR")
    or Path(os.environ.get("PIDISPATCH_CACHE") or Path.home() / ".cache" / "pidispatch") / "cluster"
)
# What a component's command line contains, when it is not the component's own name: a recorded pid is
# signalled only while it still runs one of ours (never a process found by name).
MARKERS = {"kubelet": "e2e.framework.kubelet", "pv-provisioner": "--provision-only", "node-kubelet": "/bin/kubelet ",
           "containerd": "containerd --config="}
SERVICE_CIDR = "10.0.0.0/24"
#: what ``start`` wipes: everything a previous run of either node backend left in the state directory
STATE_SUBDIRS = ("pki", "etcd", "logs", "kubelet", "node", "sa-kubeconfigs")


# -- the cluster ------------------------------------------------------------------------------------
@dataclass
class Cluster:
    """A local control plane rooted at ``state_dir`` (pki/, logs/, etcd/, kubelet/, kubeconfig)."""

    state_dir: Path = DEFAULT_STATE_DIR
    bin: Path | None = None
    etcd_port: int = 0
    etcd_peer_port: int = 0
    apiserver_port: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    #: set for a cluster we did not start (e.g. kind): everything goes through this kubeconfig
    external_kubeconfig: Path | None = None
    #: what runs Pods: the test kubelet (``e2e/framework/testnode.py``, Pods as local processes) or a real node
    #: (``e2e/framework/realnode.py``, containerd + runc)
    backend: NodeBackend = field(default_factory=TestKubeletNode)
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir).resolve()
        self.backend.attach(self)

    @property
    def node(self) -> str:
        """What runs Pods: "test" or "real" (``cluster.json``'s ``node``)."""
        return self.backend.kind

    # paths
    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (user ``admin``, group ``system:masters``)."""
        return self.external_kubeconfig or self.state_dir / "kubeconfig"

    @property
    def kubelet_dir(self) -> Path:
        """Test kubelet's data dir: ``pods/`` (per-Pod dirs, logs) and ``pv/`` (provisioned volumes)."""
        return self.state_dir / "kubelet"

    @property
    def ca_file(self) -> Path:
        if self.external_kubeconfig:
            return Path(self.kube().ca_file or "")
        return self.pki / "ca.crt"

    @property
    def server(self) -> str:
        if self.external_kubeconfig:
            return self.kube().server
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubectl_path(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def helm_path(self) -> Path:
        return self.bin_dir / "helm"

    @property
    def bin_dir(self) -> Path:
        if self.bin is None and self.external_kubeconfig and not os.environ.get("PIDISPATCH_BIN_DIR"):
            kubectl = shutil.which("kubectl")
            if not kubectl:
                raise ClusterError("kubectl not found on PATH (set PIDISPATCH_BIN_DIR)")
            self.bin = Path(kubectl).parent
        if self.bin is None:
            self.bin = bin_dir(build=True)
        return self.bin

    @property
    def state_file(self) -> Path:
        return self.state_dir / "cluster.json"

    # clients
    def kube(self) -> Kube:
        """Admin client (``e2e.framework.kube.Kube``)."""
        if self.external_kubeconfig:
            return Kube.from_kubeconfig(self.external_kubeconfig)
        return Kube(self.server, ca_file=str(self.ca_file), cert_file=str(self.pki / "admin.crt"),
                    key_file=str(self.pki / "admin.key"))

    def api_client(self, kubeconfig: Path | str | None = None):
        """An official ``kubernetes.client.ApiClient`` (admin unless another kubeconfig is given)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    def kubectl(self, *args: str, kubeconfig: Path | str | None = None, input: str | None = None,
                check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run the cluster's own kubectl; returns the CompletedProcess (text)."""
        cmd = [str(self.kubectl_path), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise ClusterError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        return r

    def env(self, kubeconfig: Path | str | None = None) -> dict[str, str]:
        """Environment for subprocesses: KUBECONFIG set, cluster bin dir first on PATH."""
        e = dict(os.environ)
        e["KUBECONFIG"] = str(kubeconfig or self.kubeconfig)
        e["PATH"] = f"{self.bin_dir}{os.pathsep}{e.get('PATH', '')}"
        return e

    # acting as a ServiceAccount
    def service_account_token(self, namespace: str, name: str, *, create: bool = True,
                              expiration_seconds: int = 3600, audiences: list[str] | None = None) -> str:
        """A real bound token for ``system:serviceaccount:<ns>:<name>`` via the TokenRequest API."""
        k = self.kube()
        sa_path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}"
        if create and k.get_or_none(sa_path) is None:
            try:
                k.create(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                         {"metadata": {"name": name, "namespace": namespace}})
            except ApiError as e:
                if e.status != 409:
                    raise
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = audiences
        tr = k.create(sa_path + "/token", {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                           "spec": spec})
        return tr["status"]["token"]

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path | str | None = None,
                                   **kw: Any) -> Path:
        """Write a kubeconfig that authenticates as the ServiceAccount (bearer token) and return its path."""
        token = self.service_account_token(namespace, name, **kw)
        path = Path(path or self.state_dir / "sa-kubeconfigs" / f"{namespace}.{name}.kubeconfig")
        return write_kubeconfig(path, self.server, self.ca_file, token=token,
                                user=f"system:serviceaccount:{namespace}:{name}",
                                context=f"{namespace}-{name}")

    def service_account_kube(self, namespace: str, name: str, **kw: Any) -> Kube:
        return Kube(self.server, ca_file=str(self.ca_file), token=self.service_account_token(namespace, name, **kw))

    # PVC -> host directory
    def pvc_host_path(self, namespace: str, name: str, timeout: float = 30) -> Path:
        """Local directory backing a bound PVC (the PV's hostPath/local path)."""
        return pvc_host_path(self.kube(), namespace, name, timeout=timeout)

    # lifecycle --------------------------------------------------------------------------------
    def spawn(self, component: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start ``component`` in a session of its own, its output in ``logs/<component>.log``; its pid is
        recorded in ``cluster.json`` at once."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log = open(self.logs / f"{component}.log", "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=env, cwd=str(REPO_ROOT))
        log.close()
        self._procs[component] = p
        self.pids[component] = p.pid
        self.save()

    def _fail(self, component: str, why: str) -> ClusterError:
        msg = [f"{component}: {why}"]
        for c in self.components:
            if (self.logs / f"{c}.log").exists() and (c == component or c in self._procs):
                msg.append(f"---- last lines of {self.logs / f'{c}.log'} ----\n{tail(self.logs / f'{c}.log')}")
        return ClusterError("\n".join(msg))

    def await_up(self, component: str, what: str, fn: Callable[[], Any], timeout: float) -> Any:
        """Wait for ``fn`` to be truthy; fail at once, with the component's last log lines, if it exits."""
        def probe():
            p = self._procs.get(component)
            if p is not None and p.poll() is not None:
                raise self._fail(component, f"exited with code {p.returncode} while waiting for {what}")
            return fn()

        try:
            return wait_for(f"{component}: {what}", probe, timeout=timeout, interval=0.25, fatal=(ClusterError,))
        except ClusterError:
            raise
        except TimeoutError as e:
            raise self._fail(component, str(e)) from None

    @property
    def components(self) -> tuple[str, ...]:
        """The components in start order (stopped in reverse): the node backend's choice."""
        return self.backend.components

    def start(self, *, kubelet: bool = True, timeout: float | None = None) -> Cluster:
        """Fresh cluster: wipes ``state_dir`` data, generates certs, starts and waits for each component.
        ``kubelet=False``: no test kubelet (a real node ignores it)."""
        if self.is_running():
            raise ClusterError(f"a cluster is already running from {self.state_dir}; stop it first")
        timeout = timeout or self.backend.start_timeout
        self.backend.prepare()
        bins = self.bin_dir
        for sub in STATE_SUBDIRS:
            shutil.rmtree(self.state_dir / sub, ignore_errors=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.pids = {}
        write_pki(self.pki, **self.backend.pki_extras())
        self.etcd_port, self.etcd_peer_port, self.apiserver_port = free_port(), free_port(), free_port()
        t0 = time.monotonic()
        try:
            self.backend.start_before(timeout)
            self._start_etcd(bins, timeout)
            self._start_apiserver(bins, timeout)
            self._start_controller_manager(bins, timeout)
            self.backend.start_after(timeout, kubelet=kubelet)
        except BaseException:
            self.stop()
            raise
        print(f"[cluster] up in {time.monotonic() - t0:.1f}s: {self.server}; kubeconfig {self.kubeconfig}",
              file=sys.stderr)
        return self

    def _start_etcd(self, bins: Path, timeout: float) -> None:
        import requests

        url = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self.spawn("etcd", [
            str(bins / "etcd"), "--name=default", f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--unsafe-no-fsync=true",
            "--quota-backend-bytes=4294967296", "--log-level=warn",
        ])
        self.await_up("etcd", f"{url}/health",
                    lambda: requests.get(f"{url}/health", timeout=2).json().get("health") == "true", timeout)

    def _start_apiserver(self, bins: Path, timeout: float) -> None:
        pki = self.pki
        self.spawn("kube-apiserver", [
            str(bins / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.state_dir / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--authorization-mode={self.backend.authorization_mode}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--allow-privileged=true",
            # loopback addresses are not valid Endpoints for the `kubernetes` Service
            "--endpoint-reconciler-type=none",
            "--profiling=false", "-v=1",
            *self.backend.apiserver_args(),
        ])
        k = self.kube()
        self.await_up("kube-apiserver", f"{self.server}/readyz", lambda: k.request("GET", "/readyz") == "ok", timeout)
        write_kubeconfig(self.kubeconfig, self.server, self.ca_file, cert=pki / "admin.crt", key=pki / "admin.key")
        self.await_up("kube-apiserver", "namespace default",
                    lambda: k.get_or_none("/api/v1/namespaces/default"), timeout)

    def _start_controller_manager(self, bins: Path, timeout: float) -> None:
        pki = self.pki
        kc = write_kubeconfig(self.state_dir / "kube-controller-manager.kubeconfig", self.server, self.ca_file,
                              cert=pki / "kube-controller-manager.crt", key=pki / "kube-controller-manager.key",
                              user="system:kube-controller-manager")
        self.spawn("kube-controller-manager", [
            str(bins / "kube-controller-manager"),
            f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
            # serviceaccount + root-ca-cert-publisher need these; tokens themselves come from TokenRequest
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--controllers={self.backend.controllers}",
            "--concurrent-gc-syncs=5", "-v=1",
        ])
        k = self.kube()
        self.await_up("kube-controller-manager", "ServiceAccount default/default (serviceaccount controller)",
                    lambda: k.get_or_none("/api/v1/namespaces/default/serviceaccounts/default"), timeout)

    def restart_apiserver(self, *, timeout: float = 120) -> float:
        """Stop kube-apiserver (SIGTERM) and start it again on the same port with the same flags.

        etcd, the controller-manager and the kubelet keep running, so every client sees its
        connections drop and its watches end, as in a control-plane upgrade. Returns the seconds
        from the stop until ``/readyz`` answers ``ok`` again.
        """
        if self.external_kubeconfig:
            raise ClusterError("restart_apiserver needs the local control plane, not an external cluster")
        started = time.monotonic()
        self.stop_component("kube-apiserver")
        self._start_apiserver(self.bin_dir, timeout)
        return time.monotonic() - started

    def stop_component(self, component: str, grace: float = 10) -> None:
        """Stop ``component`` by the pid it recorded (SIGTERM, SIGKILL after ``grace``), if it is still ours."""
        pid = self.pids.pop(component, None)
        p = self._procs.pop(component, None)
        if pid is None:
            return
        if p is None and not self._owns(pid, component):
            return  # a stale pid from a state file, now reused by something else: leave it alone
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if p is not None:
                if p.poll() is not None:
                    break
            elif not alive(pid):
                break
            time.sleep(0.1)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if p is not None:
                p.wait(10)

    def stop(self) -> None:
        """The node backend stops its Pods first, then every component stops in reverse start order, then the
        backend removes what it created (a real node's bridge, iptables chain, mounts, cgroups)."""
        self.backend.stop_pods()
        for c in reversed(self.components):
            self.stop_component(c)
        self.backend.clean()
        self.save()

    def is_running(self) -> bool:
        return any(self._owns(pid, c) for c, pid in self.pids.items())

    def _owns(self, pid: int, component: str) -> bool:
        """Is ``pid`` this cluster's ``component``? Its command line names the component and this cluster's
        state directory (every component is started with a path under it): the same binary serving another
        cluster, whose process took a stale pid of this one, is left alone."""
        return pid_is(pid, MARKERS.get(component, component), f"{self.state_dir}/")

    def save(self) -> None:
        """Write ``cluster.json``: what ``load`` (``make cluster-down``, the demo) needs to find it again."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps({
            "server": self.server, "kubeconfig": str(self.kubeconfig), "bin_dir": str(self.bin) if self.bin else None,
            "etcd_port": self.etcd_port, "etcd_peer_port": self.etcd_peer_port,
            "apiserver_port": self.apiserver_port, "pids": self.pids, "node": self.backend.kind,
            **self.backend.state(),
        }, indent=2))

    @classmethod
    def load(cls, state_dir: Path | str = DEFAULT_STATE_DIR) -> Cluster:
        """Attach to a cluster started by ``python -m e2e.framework.cluster up`` (reads ``cluster.json``)."""
        state_dir = Path(state_dir)
        st = json.loads((state_dir / "cluster.json").read_text())
        backend: NodeBackend = {"real": RealNode, "multi": MultiNode}.get(st.get("node"), TestKubeletNode)()
        backend.restore(st)
        return cls(state_dir=state_dir, bin=Path(st["bin_dir"]) if st.get("bin_dir") else None,
                   etcd_port=st["etcd_port"], etcd_peer_port=st["etcd_peer_port"],
                   apiserver_port=st["apiserver_port"], pids={k: int(v) for k, v in st["pids"].items()},
                   backend=backend)


def pvc_host_path(kube: Kube, namespace: str, name: str, timeout: float = 30) -> Path:
    """Host directory of a bound PVC: follows ``spec.volumeName`` to the PV's hostPath/local path."""
    def bound_pv():
        pvc = kube.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")
        if pvc.get("status", {}).get("phase") != "Bound":
            return None
        return kube.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")

    pv = wait_for(f"PVC {namespace}/{name} to be Bound", bound_pv, timeout=timeout)
    src = pv["spec"].get("hostPath") or pv["spec"].get("local")
    if not src:
        raise ClusterError(f"PV {pv['metadata']['name']} has neither hostPath nor local: {pv['spec']}")
    return Path(src["path"])


def node_backend(node: str) -> NodeBackend:
    """The node backend asked for on the command line; ``auto`` takes a real node when this machine can run
    one."""
    if node == "test":
        return TestKubeletNode()
    if node == "multi":
        return MultiNode()
    why = unavailable()
    if why is None:
        return RealNode()
    if node == "real":
        raise ClusterError(f"no real node here: {why}")
    print(f"[cluster] a real node cannot run here ({why}): starting the test kubelet", file=sys.stderr)
    return TestKubeletNode()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.framework.cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["up", "down", "status"])
    ap.add_argument("--dir", type=Path, default=DEFAULT_STATE_DIR, help="state dir (default %(default)s)")
    ap.add_argument("--no-kubelet", action="store_true", help="do not start the test kubelet")
    ap.add_argument("--node", choices=["auto", "real", "test", "multi"],
                    default=os.environ.get("PIDISPATCH_NODE", "test"),
                    help="what runs Pods: a real kubelet with containerd and runc (e2e/framework/realnode.py), "
                         "the test kubelet (Pods as local processes), multi: three test kubelets and the real "
                         "kube-scheduler (e2e/framework/multinode.py), or auto: real when this machine can "
                         "(default %(default)s)")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args(argv)
    state = a.dir.resolve()
    if a.command == "up":
        if (state / "cluster.json").exists() and Cluster.load(state).is_running():
            c = Cluster.load(state)
            print(f"already running: {c.server}", file=sys.stderr)
        else:
            try:
                c = Cluster(state_dir=state, backend=node_backend(a.node))
                c.start(kubelet=not a.no_kubelet, timeout=a.timeout)
            except ClusterError as e:
                print(f"cluster-up failed: {e}", file=sys.stderr)
                return 1
        b = c.backend
        if isinstance(b, MultiNode):
            node = f"test kubelets {', '.join(b.nodes)} and the kube-scheduler: Pods run as local processes"
        elif c.node == "real":
            node = f"real node {b.name} at {b.ip}: Pods run in containers (containerd + runc)"
        else:
            node = f"test kubelet {b.name}: Pods run as local processes"
        print(f"\nkube-apiserver: {c.server}\nnode:           {node}\nlogs:           {c.logs}/\n\n"
              f"  export KUBECONFIG={c.kubeconfig}\n  export PATH={c.bin_dir}:$PATH\n  kubectl get nodes\n")
        return 0
    if not (state / "cluster.json").exists():
        print(f"no cluster state in {state}", file=sys.stderr)
        return 0 if a.command == "down" else 1
    c = Cluster.load(state)
    if a.command == "down":
        c.stop()
        print(f"stopped cluster in {state}", file=sys.stderr)
        return 0
    print(f"node: {'real (containerd + runc)' if c.node == 'real' else 'test kubelet (local processes)'}")
    for comp in c.components:
        pid = c.pids.get(comp)
        print(f"{comp:25} {'running' if pid and c._owns(pid, comp) else 'stopped'} (pid {pid})")
    return 0 if c.is_running() else 1


if __name__ == "__main__":
    sys.exit(main())
