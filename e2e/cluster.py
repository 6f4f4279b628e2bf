"""Local Kubernetes control plane for development and tests (no Docker).

Starts ``etcd``, ``kube-apiserver`` (RBAC on, x509 client certificates from a generated CA,
ServiceAccount tokens signed by a generated key), ``kube-controller-manager`` (garbage collector,
namespace deletion, PV binder, ServiceAccount controllers) and optionally the test kubelet
(``e2e/kubelet.py``) on 127.0.0.1, from the binaries built by ``e2e/controlplane/build.sh``.

Command line (used by ``make cluster-up`` / ``make cluster-down``)::

    python -m e2e.cluster up [--dir DIR] [--no-kubelet]
    python -m e2e.cluster down [--dir DIR]
    python -m e2e.cluster status [--dir DIR]

``DIR`` defaults to ``$PIDISPATCH_CLUSTER_DIR`` or ``~/.cache/pidispatch/cluster``; the admin
kubeconfig is ``DIR/kubeconfig``. From Python::

    c = Cluster(state_dir); c.start(); ...; c.stop()
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.kube import ApiError, Kube, wait_for

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "e2e" / "controlplane" / "build.sh"
DEFAULT_STATE_DIR = Path(
    os.environ.get("PIDISPATCH_CLUSTER_DIR")
    or Path(os.environ.get("PIDISPATCH_CACHE") or Path.home() / ".cache" / "pidispatch") / "cluster"
)
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kubelet")
# What a component's command line contains, when it is not the component's own name: a recorded pid is
# signalled only while it still runs one of ours (never a process found by name).
MARKERS = {"kubelet": "e2e.kubelet", "pv-provisioner": "--provision-only", "node-kubelet": "/bin/kubelet ",
           "containerd": "containerd --config="}
SERVICE_CIDR = "10.0.0.0/24"
NODE_NAME = "pidispatch-node"


class ClusterError(RuntimeError):
    pass


def bin_dir(build: bool = True) -> Path:
    """Directory holding the pinned binaries; builds them (cached) when ``build`` is true."""
    if os.environ.get("PIDISPATCH_BIN_DIR"):
        return Path(os.environ["PIDISPATCH_BIN_DIR"])
    args = [str(BUILD_SCRIPT)] + ([] if build else ["--print-bin-dir"])
    out = subprocess.run(args, check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, n: int = 40) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"(no log file {path})"
    return "\n".join(lines[-n:])


# -- certificates --------------------------------------------------------------------------------
def _write_pki(pki: Path, *, clients: tuple[tuple[str, str, str | None], ...] = (),
               server_ips: tuple[str, ...] = ()) -> None:
    """CA, apiserver serving cert, admin and controller-manager client certs, SA signing key.

    ``clients``: more client certificates as ``(file name, common name, organization)``;
    ``server_ips``: more addresses in the apiserver's serving certificate.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    pki.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=365)

    def key() -> rsa.RSAPrivateKey:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def save_key(k: rsa.RSAPrivateKey, name: str) -> None:
        p = pki / name
        p.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                      serialization.NoEncryption()))
        p.chmod(0o600)

    def name(cn: str, org: str | None = None) -> x509.Name:
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        return x509.Name(attrs)

    ca_key = key()
    ca_cert = (
        x509.CertificateBuilder().subject_name(name("pidispatch-local-ca")).issuer_name(name("pidispatch-local-ca"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    save_key(ca_key, "ca.key")
    (pki / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    def leaf(fname: str, subject: x509.Name, server: bool) -> None:
        k = key()
        b = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(k.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(later)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        )
        if server:
            b = b.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default"),
                x509.DNSName("kubernetes.default.svc"), x509.DNSName("kubernetes.default.svc.cluster.local"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips),
            ]), critical=False)
        save_key(k, f"{fname}.key")
        (pki / f"{fname}.crt").write_bytes(b.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))

    leaf("apiserver", name("kube-apiserver"), server=True)
    leaf("admin", name("admin", "system:masters"), server=False)
    leaf("kube-controller-manager", name("system:kube-controller-manager"), server=False)
    for fname, cn, org in clients:
        leaf(fname, name(cn, org), server=False)

    sa = key()
    save_key(sa, "sa.key")
    (pki / "sa.pub").write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                               serialization.PublicFormat.SubjectPublicKeyInfo))


def write_kubeconfig(path: Path, server: str, ca_file: Path, *, cert: Path | None = None, key: Path | None = None,
                     token: str | None = None, user: str = "admin", context: str = "pidispatch-local") -> Path:
    u: dict[str, Any] = {}
    if cert and key:
        u = {"client-certificate": str(cert), "client-key": str(key)}
    if token:
        u["token"] = token
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "pidispatch-local",
                      "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": u}],
        "contexts": [{"name": context, "context": {"cluster": "pidispatch-local", "user": user,
                                                    "namespace": "default"}}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    path.chmod(0o600)
    return path


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
    #: what runs Pods: "test" (e2e/kubelet.py, Pods as local processes) or "real" (e2e/realnode.py)
    node: str = "test"
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir).resolve()

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
        """Admin client (``e2e.kube.Kube``)."""
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
    def _spawn(self, component: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = open(self.logs / f"{component}.log", "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=env, cwd=str(REPO_ROOT))
        log.close()
        self._procs[component] = p
        self.pids[component] = p.pid
        self._save()

    def _fail(self, component: str, why: str) -> ClusterError:
        msg = [f"{component}: {why}"]
        for c in self.components:
            if (self.logs / f"{c}.log").exists() and (c == component or c in self._procs):
                msg.append(f"---- last lines of {self.logs / f'{c}.log'} ----\n{tail(self.logs / f'{c}.log')}")
        return ClusterError("\n".join(msg))

    def _await(self, component: str, what: str, fn, timeout: float) -> Any:
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

    #: a list flag: a real node's kubelet needs Node first
    authorization_mode = "RBAC"
    #: the test kubelet does not heartbeat like a kubelet would: no node lifecycle/taint eviction; no cloud,
    #: no IPAM, no CSR signing (a real node's kubelet needs the node lifecycle: it lifts the not-ready taint)
    controllers = ("*,-nodelifecycle,-taint-eviction-controller,-nodeipam,-cloud-node-lifecycle,"
                   "-service-lb-controller,-node-route-controller,-csrsigning")

    @property
    def components(self) -> tuple[str, ...]:
        """The components in start order (stopped in reverse)."""
        return COMPONENTS

    def _pki_extras(self) -> dict[str, Any]:
        """More certificates for ``_write_pki`` (a real node adds its own)."""
        return {}

    def _apiserver_extra_args(self) -> list[str]:
        return []

    def start(self, *, kubelet: bool = True, timeout: float = 120) -> Cluster:
        """Fresh cluster: wipes ``state_dir`` data, generates certs, starts and waits for each component."""
        if self.is_running():
            raise ClusterError(f"a cluster is already running from {self.state_dir}; stop it first")
        bins = self.bin_dir
        for sub in ("pki", "etcd", "logs", "kubelet", "sa-kubeconfigs"):
            shutil.rmtree(self.state_dir / sub, ignore_errors=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.pids = {}
        _write_pki(self.pki, **self._pki_extras())
        self.etcd_port, self.etcd_peer_port, self.apiserver_port = free_port(), free_port(), free_port()
        t0 = time.monotonic()
        try:
            self._start_etcd(bins, timeout)
            self._start_apiserver(bins, timeout)
            self._start_controller_manager(bins, timeout)
            if kubelet:
                self.start_kubelet(timeout=timeout)
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
        self._spawn("etcd", [
            str(bins / "etcd"), "--name=default", f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--unsafe-no-fsync=true",
            "--quota-backend-bytes=4294967296", "--log-level=warn",
        ])
        self._await("etcd", f"{url}/health",
                    lambda: requests.get(f"{url}/health", timeout=2).json().get("health") == "true", timeout)

    def _start_apiserver(self, bins: Path, timeout: float) -> None:
        pki = self.pki
        self._spawn("kube-apiserver", [
            str(bins / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.state_dir / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--authorization-mode={self.authorization_mode}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--allow-privileged=true",
            # loopback addresses are not valid Endpoints for the `kubernetes` Service
            "--endpoint-reconciler-type=none",
            "--profiling=false", "-v=1",
            *self._apiserver_extra_args(),
        ])
        k = self.kube()
        self._await("kube-apiserver", f"{self.server}/readyz", lambda: k.request("GET", "/readyz") == "ok", timeout)
        write_kubeconfig(self.kubeconfig, self.server, self.ca_file, cert=pki / "admin.crt", key=pki / "admin.key")
        self._await("kube-apiserver", "namespace default",
                    lambda: k.get_or_none("/api/v1/namespaces/default"), timeout)

    def _start_controller_manager(self, bins: Path, timeout: float) -> None:
        pki = self.pki
        kc = write_kubeconfig(self.state_dir / "kube-controller-manager.kubeconfig", self.server, self.ca_file,
                              cert=pki / "kube-controller-manager.crt", key=pki / "kube-controller-manager.key",
                              user="system:kube-controller-manager")
        self._spawn("kube-controller-manager", [
            str(bins / "kube-controller-manager"),
            f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
            # serviceaccount + root-ca-cert-publisher need these; tokens themselves come from TokenRequest
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--controllers={self.controllers}",
            "--concurrent-gc-syncs=5", "-v=1",
        ])
        k = self.kube()
        self._await("kube-controller-manager", "ServiceAccount default/default (serviceaccount controller)",
                    lambda: k.get_or_none("/api/v1/namespaces/default/serviceaccounts/default"), timeout)

    def start_kubelet(self, *, timeout: float = 60) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = f"{REPO_ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep)
        self._spawn("kubelet", [
            sys.executable, "-m", "e2e.kubelet", f"--kubeconfig={self.kubeconfig}",
            f"--data-dir={self.kubelet_dir}", f"--node-name={NODE_NAME}",
        ], env=env)
        k = self.kube()
        self._await("kubelet", f"Node {NODE_NAME} Ready", lambda: node_ready(k, NODE_NAME), timeout)

    def stop_kubelet(self) -> None:
        self._stop_component("kubelet")

    def restart_apiserver(self, *, timeout: float = 120) -> float:
        """Stop kube-apiserver (SIGTERM) and start it again on the same port with the same flags.

        etcd, the controller-manager and the kubelet keep running, so every client sees its
        connections drop and its watches end, as in a control-plane upgrade. Returns the seconds
        from the stop until ``/readyz`` answers ``ok`` again.
        """
        if self.external_kubeconfig:
            raise ClusterError("restart_apiserver needs the local control plane, not an external cluster")
        started = time.monotonic()
        self._stop_component("kube-apiserver")
        self._start_apiserver(self.bin_dir, timeout)
        return time.monotonic() - started

    def _stop_component(self, component: str, grace: float = 10) -> None:
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
            elif not _alive(pid):
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
        for c in reversed(self.components):
            self._stop_component(c)
        self._save()

    def is_running(self) -> bool:
        return any(self._owns(pid, c) for c, pid in self.pids.items())

    def _owns(self, pid: int, component: str) -> bool:
        """Is ``pid`` this cluster's ``component``? Its command line names the component and this cluster's
        state directory (every component is started with a path under it): the same binary serving another
        cluster, whose process took a stale pid of this one, is left alone."""
        return _pid_is(pid, MARKERS.get(component, component), f"{self.state_dir}/")

    def _save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps({
            "server": self.server, "kubeconfig": str(self.kubeconfig), "bin_dir": str(self.bin) if self.bin else None,
            "etcd_port": self.etcd_port, "etcd_peer_port": self.etcd_peer_port,
            "apiserver_port": self.apiserver_port, "pids": self.pids, "node_name": NODE_NAME,
            "kubelet_dir": str(self.kubelet_dir), "node": self.node, **self._state_extras(),
        }, indent=2))

    def _state_extras(self) -> dict[str, Any]:
        return {}

    @classmethod
    def load(cls, state_dir: Path | str = DEFAULT_STATE_DIR) -> Cluster:
        """Attach to a cluster started by ``python -m e2e.cluster up`` (reads ``cluster.json``)."""
        state_dir = Path(state_dir)
        st = json.loads((state_dir / "cluster.json").read_text())
        if st.get("node") == "real" and cls is Cluster:
            from e2e.realnode import RealNodeCluster

            return RealNodeCluster.load(state_dir)
        return cls(state_dir=state_dir, bin=Path(st["bin_dir"]) if st.get("bin_dir") else None,
                   etcd_port=st["etcd_port"], etcd_peer_port=st["etcd_peer_port"],
                   apiserver_port=st["apiserver_port"], pids={k: int(v) for k, v in st["pids"].items()})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def _pid_is(pid: int, *markers: str) -> bool:
    """Is ``pid`` alive and one of ours (its command line contains every one of ``markers``)?"""
    if not _alive(pid):
        return False
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return all(marker in cmd for marker in markers)


def node_ready(kube: Kube, name: str) -> bool:
    """Does Node ``name`` exist with condition Ready=True?"""
    n = kube.get_or_none(f"/api/v1/nodes/{name}")
    conds = (n or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


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


def _new(state: Path, node: str) -> Cluster:
    """A cluster of the kind asked for; ``auto`` takes a real node when this machine can run one."""
    if node == "test":
        return Cluster(state_dir=state)
    from e2e.realnode import RealNodeCluster, unavailable

    why = unavailable()
    if why is None:
        return RealNodeCluster(state_dir=state)
    if node == "real":
        raise ClusterError(f"no real node here: {why}")
    print(f"[cluster] a real node cannot run here ({why}): starting the test kubelet", file=sys.stderr)
    return Cluster(state_dir=state)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["up", "down", "status"])
    ap.add_argument("--dir", type=Path, default=DEFAULT_STATE_DIR, help="state dir (default %(default)s)")
    ap.add_argument("--no-kubelet", action="store_true", help="do not start the test kubelet")
    ap.add_argument("--node", choices=["auto", "real", "test"], default=os.environ.get("PIDISPATCH_NODE", "test"),
                    help="what runs Pods: a real kubelet with containerd and runc (e2e/realnode.py), the test "
                         "kubelet (Pods as local processes), or auto: real when this machine can (default %(default)s)")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args(argv)
    state = a.dir.resolve()
    if a.command == "up":
        if (state / "cluster.json").exists() and Cluster.load(state).is_running():
            c = Cluster.load(state)
            print(f"already running: {c.server}", file=sys.stderr)
        else:
            try:
                c = _new(state, a.node).start(kubelet=not a.no_kubelet, timeout=a.timeout)
            except ClusterError as e:
                print(f"cluster-up failed: {e}", file=sys.stderr)
                return 1
        node = (f"real node {c.node_name} at {c.node_ip}: Pods run in containers (containerd + runc)"  # type: ignore[attr-defined]
                if c.node == "real" else f"test kubelet {NODE_NAME}: Pods run as local processes")
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
