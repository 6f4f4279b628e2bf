"""What the local cluster (``e2e/framework/cluster.py``) and its node backends share, and the contract between them.

A node backend is what runs Pods: the test kubelet (``e2e/framework/testnode.py``, Pods as local processes) or a real
node (``e2e/framework/realnode.py``, kubelet + containerd + runc). ``Cluster`` takes one as a parameter and calls it at
fixed points of its life (``NodeBackend``); the backend uses the cluster only through ``Host``. Neither module
imports the other: both import this one.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import yaml

from e2e.framework.kube import Kube

REPO_ROOT = Path(__file__).resolve().parents[2]


class ClusterError(RuntimeError):
    pass


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


def python_module_env() -> dict[str, str]:
    """The environment for ``python -m e2e...`` children: this checkout first on ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{REPO_ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    return env


# -- certificates --------------------------------------------------------------------------------
def write_pki(pki: Path, *, clients: tuple[tuple[str, str, str | None], ...] = (),
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


# -- processes and the Node ------------------------------------------------------------------------
def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def pid_is(pid: int, *markers: str) -> bool:
    """Is ``pid`` alive and one of ours (its command line contains every one of ``markers``)?"""
    if not alive(pid):
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


def start_scheduler(host: Host, timeout: float) -> None:
    """The real kube-scheduler (``system:kube-scheduler``, its client certificate ``pki/kube-scheduler.crt`` from
    the backend's ``pki_extras``), bound to loopback on a free port, until its ``/healthz`` answers."""
    import warnings

    import requests
    import urllib3

    kc = write_kubeconfig(host.state_dir / "kube-scheduler.kubeconfig", host.server, host.ca_file,
                          cert=host.pki / "kube-scheduler.crt", key=host.pki / "kube-scheduler.key",
                          user="system:kube-scheduler")
    port = free_port()
    host.spawn("kube-scheduler", [
        str(host.bin_dir / "kube-scheduler"), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}", "--leader-elect=false", "--bind-address=127.0.0.1",
        f"--secure-port={port}", "--profiling=false", "-v=1",
    ])

    def healthy() -> bool:
        # the scheduler serves a certificate it made itself: only whether it answers matters here
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            try:
                return requests.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2).text == "ok"
            except requests.RequestException:
                return False

    host.await_up("kube-scheduler", "/healthz", healthy, timeout)


#: the client certificate ``start_scheduler`` authenticates with: an entry of ``write_pki``'s ``clients``
SCHEDULER_CLIENT = ("kube-scheduler", "system:kube-scheduler", None)


# -- the contract between the cluster and a node backend ---------------------------------------------------
class Host(Protocol):
    """What a node backend may use of the cluster it runs in."""

    state_dir: Path
    pids: dict[str, int]

    @property
    def pki(self) -> Path: ...
    @property
    def logs(self) -> Path: ...
    @property
    def kubeconfig(self) -> Path: ...
    @property
    def ca_file(self) -> Path: ...
    @property
    def server(self) -> str: ...
    @property
    def apiserver_port(self) -> int: ...
    @property
    def bin_dir(self) -> Path: ...

    def kube(self) -> Kube: ...
    def kubectl(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess: ...
    def spawn(self, component: str, argv: list[str], env: dict[str, str] | None = None) -> None: ...
    def await_up(self, component: str, what: str, fn: Callable[[], Any], timeout: float) -> Any: ...
    def stop_component(self, component: str) -> None: ...
    def save(self) -> None: ...


class NodeBackend(Protocol):
    """What runs the cluster's Pods.

    ``Cluster`` calls ``attach`` once, at construction. ``Cluster.start`` then calls, in order: ``prepare``
    (before the certificates), ``start_before`` (before etcd), the control plane with ``authorization_mode``,
    ``controllers``, ``pki_extras`` and ``apiserver_args``, then ``start_after``. ``Cluster.stop`` calls
    ``stop_pods`` while the control plane still runs, stops every remaining component of ``components`` in
    reverse, then ``clean``. ``state``/``restore`` carry what the backend must remember across processes
    (``cluster.json``)."""

    #: "test" or "real": what ``make cluster-status`` and the demo read from ``cluster.json``
    kind: str
    #: every component in start order, the control plane's included (stopped in reverse)
    components: tuple[str, ...]
    #: ``--authorization-mode`` of the apiserver
    authorization_mode: str
    #: ``--controllers`` of the controller-manager
    controllers: str
    #: seconds each component may take to come up, unless ``Cluster.start`` is told otherwise
    start_timeout: float

    @property
    def name(self) -> str:
        """The Node's name."""
        ...

    @property
    def ip(self) -> str:
        """The node's address: where a Pod reaches a process on this machine."""
        ...

    def attach(self, host: Host) -> None: ...
    def prepare(self) -> None: ...
    def pki_extras(self) -> dict[str, Any]: ...
    def apiserver_args(self) -> list[str]: ...
    def start_before(self, timeout: float) -> None: ...
    def start_after(self, timeout: float, *, kubelet: bool) -> None: ...
    def stop_pods(self) -> None: ...
    def clean(self) -> None: ...
    def state(self) -> dict[str, Any]: ...
    def restore(self, state: dict[str, Any]) -> None: ...
