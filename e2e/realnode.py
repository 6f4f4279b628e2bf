"""A real node for the local control plane: Pods run in containers, as on a user's cluster.

``RealNodeCluster`` is ``e2e.cluster.Cluster`` with the test kubelet replaced by:

* **containerd** and **runc** from Debian, with a private root, state, socket and config (never
  ``/etc/containerd`` or ``/var/lib/containerd``): runc by path, cgroupfs, ``restrict_oom_score_adj``
  (root here lacks ``CAP_SYS_RESOURCE``, so a negative OOM score would fail every Pod), the CNI plugins
  of Debian's ``containernetworking-plugins``, and a pause image built from Kubernetes' own
  ``build/pause/linux/pause.c`` (``gcc -static``), so nothing is pulled;
* a **bridge** of its own (``pidisp0``, ``10.244.37.0/24``): the node's address is the bridge's, Pods
  reach processes on this machine at that address (a scripted model, a fake forge), and one DNAT rule in
  a chain of its own sends the ``kubernetes`` Service address (``10.0.0.1:443``) to the apiserver: the
  only Service a Pod here needs, with no kube-proxy;
* the **kubelet** and **kube-scheduler** built from the same pinned ``k8s.io/kubernetes`` module as the
  apiserver (``e2e/controlplane/build.sh``): the kubelet with x509 client auth (the apiserver's own
  client certificate, anonymous off), ``failCgroupV1: false`` (these machines are cgroup v1),
  ``cgroupDriver: cgroupfs``, low eviction thresholds; the apiserver with ``Node,RBAC`` authorization
  and ``NodeRestriction``, so ``kubectl logs``/``exec`` work;
* the images of ``make images`` imported into containerd (``ctr images import``): a Pod names them with
  ``imagePullPolicy: Never``; any other image cannot be pulled (there is no registry), which is how a
  nonexistent image fails here, as it does anywhere;
* PVCs provisioned as hostPath PVs by the test kubelet's provisioner alone (``--provision-only``).

Everything it starts is stopped by the pid it recorded; the bridge, the iptables chain, the mounts under
its state directory and the cgroups the kubelet made are removed at stop. Needs root and the Debian
packages ``containerd runc containernetworking-plugins iptables gcc`` (``unavailable()`` says what is
missing).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster import (
    REPO_ROOT,
    Cluster,
    ClusterError,
    free_port,
    node_ready,
    write_kubeconfig,
)
from e2e.kube import wait_for

NODE_NAME = "pidispatch-real-node"
BRIDGE = "pidisp0"
SUBNET = "10.244.37.0/24"
NODE_IP = "10.244.37.1"  # the bridge's address: the node's InternalIP, reachable from every Pod
API_SERVICE_IP = "10.0.0.1"  # the `kubernetes` Service (first address of SERVICE_CIDR)
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
RUNC = "/usr/sbin/runc"
CNI_BIN = Path("/usr/lib/cni")
PACKAGES = ("containerd", "runc", "containernetworking-plugins", "iptables", "gcc")
IMAGES_SCRIPT = REPO_ROOT / "e2e" / "images" / "build.sh"
CACHE = Path(os.environ.get("PIDISPATCH_CACHE") or Path.home() / ".cache" / "pidispatch")
NODE_COMPONENTS = ("containerd", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                   "node-kubelet", "pv-provisioner")


def unavailable() -> str | None:
    """Why a real node cannot run on this machine, or None when it can."""
    if os.geteuid() != 0:
        return "a real node needs root (containerd, runc, cgroups, a bridge, iptables)"
    missing = [name for name, path in (("containerd", shutil.which("containerd")), ("ctr", shutil.which("ctr")),
                                       ("runc", RUNC if os.access(RUNC, os.X_OK) else None),
                                       ("iptables", shutil.which("iptables")), ("ip", shutil.which("ip")),
                                       ("CNI bridge plugin", (CNI_BIN / "bridge").exists() or None))
               if not path]
    if missing:
        return (f"missing {', '.join(missing)}: apt-get install {' '.join(PACKAGES)} "
                f"(or `make node`)")
    if not Path("/sys/fs/cgroup").is_dir():
        return "no /sys/fs/cgroup"
    return None


def images_env() -> dict[str, str]:
    """The image names and archives of ``make images`` (``e2e/images/build.sh --print-env``)."""
    out = subprocess.run(["bash", str(IMAGES_SCRIPT), "--print-env"], check=True, capture_output=True,
                         text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def say(msg: str) -> None:
    print(f"[realnode] {msg}", file=sys.stderr, flush=True)


def run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r


# -- the pause image ------------------------------------------------------------------------------------
def pause_image(k8s_version: str) -> tuple[str, Path]:
    """``(name, docker-archive)`` of the sandbox image, built once from the pinned module's pause.c."""
    name = f"localhost/pidispatch/pause:k8s-{k8s_version}"
    archive = CACHE / "images" / f"pause-k8s-{k8s_version}.tar"
    if archive.exists():
        return name, archive
    gomodcache = run("go", "env", "GOMODCACHE").stdout.strip()
    source = Path(gomodcache) / f"k8s.io/kubernetes@v{k8s_version}" / "build" / "pause" / "linux" / "pause.c"
    if not source.exists():  # the module is in the cache once build.sh has built the control plane
        run("go", "mod", "download", f"k8s.io/kubernetes@v{k8s_version}", timeout=600)
    if not shutil.which("gcc"):
        raise ClusterError("the pause image is compiled from Kubernetes' pause.c: apt-get install gcc libc6-dev")
    archive.parent.mkdir(parents=True, exist_ok=True)
    binary = archive.with_suffix(".bin")
    run("gcc", "-Os", "-static", f"-DVERSION=v{k8s_version}-pidispatch", "-o", str(binary), str(source))
    write_docker_archive(archive, name, {"pause": (binary.read_bytes(), 0o755)}, entrypoint=["/pause"],
                         user="65535:65535")
    binary.unlink()
    return name, archive


def write_docker_archive(path: Path, name: str, files: dict[str, tuple[bytes, int]], *,
                         entrypoint: list[str], user: str) -> None:
    """A one-layer image in the ``docker save`` format (what ``ctr images import`` reads)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        for fname, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(fname)
            info.size, info.mode, info.mtime = len(data), mode, 0
            t.addfile(info, io.BytesIO(data))
    layer_bytes = layer.getvalue()
    diff_id = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Entrypoint": entrypoint, "User": user},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
    }, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name], "Layers": [f"{diff_id}/layer.tar"]}]).encode()
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w") as t:
        for fname, data in ((f"{diff_id}/layer.tar", layer_bytes), (config_name, config),
                            ("manifest.json", manifest)):
            info = tarfile.TarInfo(fname)
            info.size, info.mtime = len(data), 0
            t.addfile(info, io.BytesIO(data))
    tmp.rename(path)


# -- the cluster ------------------------------------------------------------------------------------------
@dataclass
class RealNodeCluster(Cluster):
    """The local control plane with a real kubelet, containerd and runc (see the module docstring)."""

    node: str = "real"
    authorization_mode = "Node,RBAC"
    controllers = "*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller,-csrsigning"
    #: docker-archive tars imported into containerd at start (default: the two of `make images`)
    images: tuple[Path, ...] | None = None
    #: what this run created and must remove: {"bridge": name, "chain": iptables chain}
    created: dict[str, str] | None = None

    @property
    def components(self) -> tuple[str, ...]:
        return NODE_COMPONENTS

    @property
    def node_name(self) -> str:
        return NODE_NAME

    @property
    def node_ip(self) -> str:
        """The node's (and the bridge's) address: where a Pod reaches a process on this machine."""
        return NODE_IP

    @property
    def node_dir(self) -> Path:
        return self.state_dir / "node"

    @property
    def containerd_socket(self) -> Path:
        return self.node_dir / "containerd" / "containerd.sock"

    @property
    def chain(self) -> str:
        return "PIDISP-" + hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:8].upper()

    def ctr(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        """``ctr`` against this node's containerd, in the CRI namespace ``k8s.io``."""
        return run("ctr", f"--address={self.containerd_socket}", "--namespace=k8s.io", *args, check=check,
                   timeout=timeout)

    def pod_log(self, namespace: str, pod: str, container: str | None = None, *, previous: bool = False) -> str:
        """``kubectl logs`` (the kubelet serves it)."""
        args = ["logs", "-n", namespace, pod] + (["-c", container] if container else [])
        r = self.kubectl(*args + (["--previous"] if previous else []), check=False, timeout=30)
        return r.stdout + (r.stderr if r.returncode else "")

    # certificates and flags -------------------------------------------------------------------------------
    def _pki_extras(self) -> dict[str, Any]:
        return {"clients": (("kubelet-client", "kube-apiserver-kubelet-client", "system:masters"),
                            ("node", f"system:node:{NODE_NAME}", "system:nodes"),
                            ("kube-scheduler", "system:kube-scheduler", None)),
                "server_ips": (NODE_IP,)}

    def _apiserver_extra_args(self) -> list[str]:
        pki = self.pki
        return [
            # Pods reach the apiserver through the bridge (the DNAT rule), the admin through loopback
            "--bind-address=0.0.0.0",
            "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
        ]

    # lifecycle ------------------------------------------------------------------------------------------
    def start(self, *, kubelet: bool = True, timeout: float = 180) -> RealNodeCluster:
        why = unavailable()
        if why:
            raise ClusterError(why)
        if self.is_running():
            raise ClusterError(f"a cluster is already running from {self.state_dir}; stop it first")
        if run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
            raise ClusterError(f"the bridge {BRIDGE} already exists: is another real node running? "
                               f"(`make cluster-down`, or `ip link delete {BRIDGE}` if it is left from a crash)")
        bins = self.bin_dir
        for sub in ("pki", "etcd", "logs", "node", "sa-kubeconfigs"):
            shutil.rmtree(self.state_dir / sub, ignore_errors=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.pids, self.created = {}, {}
        from e2e.cluster import _write_pki

        _write_pki(self.pki, **self._pki_extras())
        self.etcd_port, self.etcd_peer_port, self.apiserver_port = free_port(), free_port(), free_port()
        t0 = time.monotonic()
        try:
            self._network()
            self._start_containerd(timeout)
            self._import_images()
            self._start_etcd(bins, timeout)
            self._start_apiserver(bins, timeout)
            self._start_controller_manager(bins, timeout)
            self._start_scheduler(bins, timeout)
            if not any((base / "kubepods").exists() for base in Path("/sys/fs/cgroup").iterdir()):
                self.created["cgroups"] = "kubepods"  # another kubelet's hierarchy is never touched
                self._save()
            self._start_node_kubelet(bins, timeout)
            self._start_provisioner(timeout)
        except BaseException:
            self.stop()
            raise
        say(f"up in {time.monotonic() - t0:.0f}s: node {NODE_NAME} ({NODE_IP}, containerd + runc), "
            f"apiserver {self.server}")
        return self

    def _network(self) -> None:
        """The bridge (the node's address) and the DNAT of the ``kubernetes`` Service to the apiserver."""
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        self.created["bridge"] = BRIDGE
        self._save()
        run("ip", "addr", "add", f"{NODE_IP}/{SUBNET.split('/')[1]}", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
        chain = self.chain
        run("iptables", "-w", "-t", "nat", "-N", chain)
        self.created["chain"] = chain
        self._save()
        run("iptables", "-w", "-t", "nat", "-A", chain, "-d", f"{API_SERVICE_IP}/32", "-p", "tcp", "--dport", "443",
            "-j", "DNAT", "--to-destination", f"{NODE_IP}:{self.apiserver_port}")
        run("iptables", "-w", "-t", "nat", "-I", "PREROUTING", "-i", BRIDGE, "-j", chain)

    def _start_containerd(self, timeout: float) -> None:
        d = self.node_dir / "containerd"
        (d / "netns").mkdir(parents=True, exist_ok=True)
        cni_conf = self.node_dir / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        pause, _ = pause_image(self._k8s_version())
        (cni_conf / "10-pidispatch.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": f"pidispatch-{self.chain[-8:].lower()}",
            "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
                         "hairpinMode": True,
                         "ipam": {"type": "host-local", "ranges": [[{"subnet": SUBNET, "gateway": NODE_IP}]],
                                  "routes": [{"dst": "0.0.0.0/0"}],
                                  "dataDir": str(self.node_dir / "cni" / "ipam")}}],
        }, indent=2))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        (d / "config.toml").write_text(f"""version = 2
root = "{d / 'root'}"
state = "{d / 'state'}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{d / 'containerd.sock.ttrpc'}"
[debug]
  address = ""
[metrics]
  address = ""
[{cri}]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  netns_mounts_under = "{d / 'netns'}"
  enable_selinux = false
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{RUNC}"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
""")
        self._spawn("containerd", ["containerd", f"--config={d / 'config.toml'}", "--log-level=warn"])

        def ready():
            return self.containerd_socket.exists() and self.ctr("version", check=False, timeout=10).returncode == 0

        self._await("containerd", f"{self.containerd_socket}", ready, timeout)

    def _k8s_version(self) -> str:
        env = (REPO_ROOT / "e2e" / "controlplane" / "versions.env").read_text()
        return next(line.split("=", 1)[1].strip() for line in env.splitlines() if line.startswith("K8S_VERSION="))

    def _import_images(self) -> None:
        _, pause = pause_image(self._k8s_version())
        archives = [pause]
        if self.images is None:
            env = images_env()
            archives += [Path(env["OPERATOR_ARCHIVE"]), Path(env["JOB_ARCHIVE"])]
        else:
            archives += list(self.images)
        for a in archives:
            if not a.exists():
                raise ClusterError(f"image archive {a} not found: `make images` builds it")
            t = time.monotonic()
            self.ctr("images", "import", str(a), timeout=600)
            say(f"imported {a.name} ({a.stat().st_size >> 20} MB) in {time.monotonic() - t:.0f}s")

    def _start_scheduler(self, bins: Path, timeout: float) -> None:
        import requests
        import urllib3

        kc = write_kubeconfig(self.state_dir / "kube-scheduler.kubeconfig", self.server, self.ca_file,
                              cert=self.pki / "kube-scheduler.crt", key=self.pki / "kube-scheduler.key",
                              user="system:kube-scheduler")
        port = free_port()
        self._spawn("kube-scheduler", [
            str(bins / "kube-scheduler"), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={port}", "--profiling=false", "-v=1",
        ])

        def healthy():
            # the scheduler serves a certificate it made itself: only whether it answers matters here
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
                try:
                    return requests.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2).text == "ok"
                except requests.RequestException:
                    return False

        self._await("kube-scheduler", "/healthz", healthy, timeout)

    def _start_node_kubelet(self, bins: Path, timeout: float) -> None:
        import requests

        d = self.node_dir / "kubelet"
        d.mkdir(parents=True, exist_ok=True)
        kc = write_kubeconfig(d / "kubeconfig", self.server, self.ca_file, cert=self.pki / "node.crt",
                              key=self.pki / "node.key", user=f"system:node:{NODE_NAME}")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # these machines are cgroup v1 (hybrid) with no systemd; 1.36 refuses v1 unless told
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupsPerQOS": True,
            "enforceNodeAllocatable": ["pods"], "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": NODE_IP, "port": KUBELET_PORT, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": KUBELET_HEALTHZ_PORT,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.ca_file)}},
            # only holders of a certificate from this cluster's CA get past authentication
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": str(self.node_dir / "pod-logs"),
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            # the imported images are all there is: never collect them
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False, "registerNode": True, "resolvConf": "/etc/resolv.conf",
            "clusterDomain": "cluster.local", "maxPods": 60, "staticPodPath": "",
        }
        (d / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        self._spawn("node-kubelet", [
            str(bins / "kubelet"), f"--config={d / 'config.yaml'}", f"--kubeconfig={kc}",
            f"--root-dir={d / 'root'}", f"--cert-dir={d / 'pki'}", f"--node-ip={NODE_IP}",
            f"--hostname-override={NODE_NAME}", "-v=1",
        ])

        def healthy():
            try:
                return requests.get(f"http://127.0.0.1:{KUBELET_HEALTHZ_PORT}/healthz", timeout=2).text == "ok"
            except requests.RequestException:
                return False

        self._await("node-kubelet", "/healthz", healthy, timeout)
        k = self.kube()
        self._await("node-kubelet", f"Node {NODE_NAME} Ready", lambda: node_ready(k, NODE_NAME), timeout)

    def _start_provisioner(self, timeout: float) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = f"{REPO_ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep)
        self._spawn("pv-provisioner", [
            sys.executable, "-m", "e2e.kubelet", f"--kubeconfig={self.kubeconfig}",
            f"--data-dir={self.node_dir / 'volumes'}", "--provision-only",
        ], env=env)
        self._await("pv-provisioner", "start", lambda: (self.logs / "pv-provisioner.log").stat().st_size > 0
                    if (self.logs / "pv-provisioner.log").exists() else False, timeout)

    # stopping -------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Pods first (the kubelet tears their sandboxes down), then every daemon by its pid, then what the
        run created: containers left in its containerd, mounts under its state directory, the bridge, the
        iptables chain, the kubelet's cgroups."""
        if self.pids.get("node-kubelet") and self.pids.get("kube-apiserver"):
            self._drain()
        for c in ("pv-provisioner", "node-kubelet", "kube-scheduler"):
            self._stop_component(c)
        if self.pids.get("containerd"):
            self._remove_containers()
        for c in ("kube-controller-manager", "kube-apiserver", "etcd", "containerd"):
            self._stop_component(c)
        self._unmount_all()
        self._remove_network()
        self._remove_cgroups()
        self._save()

    def _drain(self, timeout: float = 30) -> None:
        """Delete every Pod at once and wait (a while) for the kubelet to stop their containers."""
        k = self.kube()
        try:
            pods = k.get("/api/v1/pods").get("items", [])
            for p in pods:
                md = p["metadata"]
                k.delete_ignore_missing(f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}?gracePeriodSeconds=0")
            wait_for("the node's containers to stop", lambda: not self._running_tasks(), timeout=timeout)
        except Exception as e:  # noqa: BLE001 - stop goes on; what is left is removed by force below
            say(f"drain: {e}")

    def _running_tasks(self) -> list[str]:
        r = self.ctr("tasks", "ls", check=False, timeout=20)
        rows = [line.split() for line in r.stdout.splitlines()[1:] if line.strip()]
        return [row[0] for row in rows if len(row) >= 3 and row[2] == "RUNNING"]

    def _remove_containers(self) -> None:
        for task in self._running_tasks():
            self.ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False, timeout=20)
        for task in self.ctr("tasks", "ls", "-q", check=False, timeout=20).stdout.split():
            self.ctr("tasks", "delete", "--force", task, check=False, timeout=30)
        for c in self.ctr("containers", "ls", "-q", check=False, timeout=20).stdout.split():
            self.ctr("containers", "delete", c, check=False, timeout=30)

    def _unmount_all(self) -> None:
        """Every mount under the state directory (netns, shm, rootfs, Secret tmpfs), deepest first."""
        root = str(self.state_dir)
        mounts = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")
            if point == root or point.startswith(root + "/"):
                mounts.append(point)
        for point in sorted(set(mounts), key=len, reverse=True):
            run("umount", "-l", point, check=False)
        netns = self.node_dir / "containerd" / "netns"
        if netns.is_dir():
            for f in netns.iterdir():
                f.unlink(missing_ok=True)
        # the kubelet links every container's log into /var/log/containers (a fixed path)
        logs = Path("/var/log/containers")
        if logs.is_dir():
            for f in logs.iterdir():
                if f.is_symlink() and os.readlink(f).startswith(str(self.node_dir) + "/"):
                    f.unlink()
        # libcni's result cache keeps one file per attachment, named after the network
        results = Path("/var/lib/cni/results")
        if results.is_dir():
            for f in results.glob(f"pidispatch-{self.chain[-8:].lower()}-*"):
                f.unlink(missing_ok=True)

    def _remove_network(self) -> None:
        created = self.created or {}
        chain = created.get("chain")
        if chain:
            while run("iptables", "-w", "-t", "nat", "-D", "PREROUTING", "-i", BRIDGE, "-j", chain,
                      check=False).returncode == 0:
                pass
            run("iptables", "-w", "-t", "nat", "-F", chain, check=False)
            run("iptables", "-w", "-t", "nat", "-X", chain, check=False)
            created.pop("chain")
        if created.get("bridge"):
            run("ip", "link", "delete", created["bridge"], check=False)
            created.pop("bridge")

    def _remove_cgroups(self) -> None:
        """The kubelet's ``kubepods`` hierarchy in each controller, when it is empty (rmdir, deepest first);
        only when this run's kubelet made it."""
        if not (self.created or {}).pop("cgroups", None):
            return
        for base in Path("/sys/fs/cgroup").iterdir():
            top = base / "kubepods"
            if not top.is_dir():
                continue
            dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            for p in [*dirs, top]:
                try:
                    p.rmdir()
                except OSError:
                    pass

    def _state_extras(self) -> dict[str, Any]:
        return {"created": self.created or {}}

    @classmethod
    def load(cls, state_dir: Path | str) -> RealNodeCluster:
        state_dir = Path(state_dir)
        st = json.loads((state_dir / "cluster.json").read_text())
        return cls(state_dir=state_dir, bin=Path(st["bin_dir"]) if st.get("bin_dir") else None,
                   etcd_port=st["etcd_port"], etcd_peer_port=st["etcd_peer_port"],
                   apiserver_port=st["apiserver_port"], pids={k: int(v) for k, v in st["pids"].items()},
                   created=dict(st.get("created") or {}))

