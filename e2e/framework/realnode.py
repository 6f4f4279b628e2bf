"""A real node for the local control plane: Pods run in containers, as on a user's cluster.

``RealNode`` is a node backend of ``e2e.framework.cluster.Cluster`` (``Cluster(state_dir, backend=RealNode())``), in
place of the test kubelet:

* **containerd** and **runc** from Debian, with a private root, state, socket and config (never
  ``/etc/containerd`` or ``/var/lib/containerd``): runc by path, cgroupfs, ``restrict_oom_score_adj``
  (root here lacks ``CAP_SYS_RESOURCE``, so a negative OOM score would fail every Pod), the CNI plugins
  of Debian's ``containernetworking-plugins``, and a pause image built from Kubernetes' own
  ``build/pause/linux/pause.c`` (``gcc -static``), so nothing is pulled;
* a **bridge** of its own (``pidisp<tag>``, a free ``/24`` in ``10.244.0.0/16``): the node's address is the
  bridge's, Pods reach processes on this machine at that address (a scripted model, a fake forge), and one
  DNAT rule in a chain of its own (``PIDISP-<TAG>``) sends the ``kubernetes`` Service address
  (``10.0.0.1:443``) to the apiserver: the only Service a Pod here needs, with no kube-proxy. ``<tag>`` is
  a hash of the state directory, and the kubelet's cgroups live under ``/pidispatch-<tag>``, so two real
  nodes (the demo's and a test run's) run side by side without touching each other;
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

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.framework.clusterkit import (
    REPO_ROOT,
    SCHEDULER_CLIENT,
    ClusterError,
    Host,
    free_port,
    node_ready,
    python_module_env,
    start_scheduler,
    write_kubeconfig,
)
from e2e.framework.kube import wait_for
from e2e.framework.realnodekit import (
    bridge_name,
    chain_name,
    choose_subnet,
    networks_in_use,
    node_tag,
    pause_image,
    run,
    say,
)

NODE_NAME = "pidispatch-real-node"
API_SERVICE_IP = "10.0.0.1"  # the `kubernetes` Service (first address of SERVICE_CIDR)
KUBELET_PORT = 10250
RUNC = "/usr/sbin/runc"
CNI_BIN = Path("/usr/lib/cni")
PACKAGES = ("containerd", "runc", "containernetworking-plugins", "iptables", "gcc")
IMAGES_SCRIPT = REPO_ROOT / "e2e" / "images" / "build.sh"
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


def _arg(words: list[str], flag: str) -> str | None:
    """The word after ``flag`` in an ``iptables -S`` rule, or None."""
    return words[words.index(flag) + 1] if flag in words[:-1] else None


# -- the node backend ---------------------------------------------------------------------------------------
@dataclass
class RealNode:
    """A real kubelet, containerd and runc running the cluster's Pods (see the module docstring)."""

    #: docker-archive tars imported into containerd at start (default: the two of `make images`)
    images: tuple[Path, ...] | None = None
    kind: str = "real"
    components: tuple[str, ...] = NODE_COMPONENTS
    #: a list flag: a real node's kubelet needs Node first
    authorization_mode: str = "Node,RBAC"
    #: the node lifecycle runs: it lifts the not-ready taint of a real kubelet's Node
    controllers: str = "*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller,-csrsigning"
    start_timeout: float = 180
    #: what this run created and must remove: {"bridge": name, "chain": iptables chain, "cgroups": root}
    created: dict[str, str] = field(default_factory=dict)
    #: the node's /24, chosen at start (a free one) and kept in cluster.json
    subnet: ipaddress.IPv4Network | None = None
    healthz_port: int = 0
    _host: Host | None = field(default=None, repr=False)

    # names and addresses -------------------------------------------------------------------------------
    @property
    def host(self) -> Host:
        if self._host is None:
            raise RuntimeError("the node backend is not attached to a cluster")
        return self._host

    @property
    def tag(self) -> str:
        return node_tag(self.host.state_dir)

    @property
    def bridge(self) -> str:
        return bridge_name(self.tag)

    @property
    def chain(self) -> str:
        return chain_name(self.tag)

    @property
    def cgroup_root(self) -> str:
        """The kubelet's ``cgroupRoot``: its ``kubepods`` hierarchy goes under it, away from any other
        kubelet's (a kubelet destroys the Pod cgroups it does not know)."""
        return f"pidispatch-{self.tag}"

    @property
    def cni_network(self) -> str:
        return f"pidispatch-{self.tag}"

    @property
    def name(self) -> str:
        return NODE_NAME

    @property
    def ip(self) -> str:
        """The node's (and the bridge's) address: where a Pod reaches a process on this machine."""
        if self.subnet is None:
            raise ClusterError("the real node has no address before it starts")
        return str(self.subnet.network_address + 1)

    @property
    def node_dir(self) -> Path:
        return self.host.state_dir / "node"

    @property
    def containerd_socket(self) -> Path:
        return self.node_dir / "containerd" / "containerd.sock"

    @property
    def registry_hosts_dir(self) -> Path:
        """containerd's ``certs.d``: how it reaches each registry (``<host:port>/hosts.toml``)."""
        return self.node_dir / "containerd" / "certs.d"

    def trust_registry(self, host: str, ca: Path) -> None:
        """Pull from ``https://<host>`` (``host:port``) trusting only ``ca`` for it, as a cluster's nodes are set up
        for a private registry with its own CA: containerd's ``hosts.toml`` for that host. containerd reads it at
        each pull, so a registry started after the node needs no restart. Credentials are not here: they come
        with each pull, from the Pod's ``imagePullSecrets``."""
        d = self.registry_hosts_dir / host
        d.mkdir(parents=True, exist_ok=True)
        trusted = d / "ca.crt"
        shutil.copyfile(ca, trusted)
        (d / "hosts.toml").write_text(f'server = "https://{host}"\n\n[host."https://{host}"]\n'
                                      f'  capabilities = ["pull", "resolve"]\n  ca = "{trusted}"\n')

    def ctr(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        """``ctr`` against this node's containerd, in the CRI namespace ``k8s.io``."""
        return run("ctr", f"--address={self.containerd_socket}", "--namespace=k8s.io", *args, check=check,
                   timeout=timeout)

    def pod_log(self, namespace: str, pod: str, container: str | None = None, *, previous: bool = False) -> str:
        """``kubectl logs`` (the kubelet serves it)."""
        args = ["logs", "-n", namespace, pod] + (["-c", container] if container else [])
        r = self.host.kubectl(*args + (["--previous"] if previous else []), check=False, timeout=30)
        return r.stdout + (r.stderr if r.returncode else "")

    # the backend's part of the cluster ---------------------------------------------------------------------
    def attach(self, host: Host) -> None:
        self._host = host

    def pki_extras(self) -> dict[str, Any]:
        return {"clients": (("kubelet-client", "kube-apiserver-kubelet-client", "system:masters"),
                            ("node", f"system:node:{NODE_NAME}", "system:nodes"),
                            SCHEDULER_CLIENT),
                "server_ips": (self.ip,)}

    def apiserver_args(self) -> list[str]:
        pki = self.host.pki
        return [
            # Pods reach the apiserver through the bridge (the DNAT rule), the admin through loopback
            "--bind-address=0.0.0.0",
            "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
        ]

    def prepare(self) -> None:
        """Before the certificates: what this machine allows, and the node's own names and address."""
        why = unavailable()
        if why:
            raise ClusterError(why)
        if run("ip", "link", "show", self.bridge, check=False).returncode == 0:
            raise ClusterError(f"the bridge {self.bridge} of {self.host.state_dir} already exists: is a real node "
                               f"running from there? "
                               f"(`python -m e2e.framework.cluster down --dir {self.host.state_dir}`, "
                               f"or `ip link delete {self.bridge}` if it is left from a crash)")
        self.created = {}
        self.subnet = choose_subnet(self.tag, networks_in_use())
        self.healthz_port = free_port()

    # lifecycle ------------------------------------------------------------------------------------------
    def start_before(self, timeout: float) -> None:
        self._network()
        self._start_containerd(timeout)
        self._import_images()

    def start_after(self, timeout: float, *, kubelet: bool) -> None:
        bins = self.host.bin_dir
        start_scheduler(self.host, timeout)
        self._cgroup_root()
        self._start_node_kubelet(bins, timeout)
        self._start_provisioner(timeout)
        say(f"up: node {NODE_NAME} ({self.ip} on {self.bridge}, containerd + runc), apiserver {self.host.server}")

    def _network(self) -> None:
        """The bridge (the node's address) and the DNAT of the ``kubernetes`` Service to the apiserver."""
        host, bridge = self.host, self.bridge
        run("ip", "link", "add", bridge, "type", "bridge")
        self.created["bridge"] = bridge
        host.save()
        run("ip", "addr", "add", f"{self.ip}/{self.subnet.prefixlen}", "dev", bridge)  # type: ignore[union-attr]
        run("ip", "link", "set", bridge, "up")
        chain = self.chain
        run("iptables", "-w", "-t", "nat", "-N", chain)
        self.created["chain"] = chain
        host.save()
        run("iptables", "-w", "-t", "nat", "-A", chain, "-d", f"{API_SERVICE_IP}/32", "-p", "tcp", "--dport", "443",
            "-j", "DNAT", "--to-destination", f"{self.ip}:{host.apiserver_port}")
        run("iptables", "-w", "-t", "nat", "-I", "PREROUTING", "-i", bridge, "-j", chain)

    def route_service(self, cluster_ip: str, port: int, pod_ip: str, target_port: int) -> None:
        """Send ``cluster_ip:port`` (a Service's address and port) to ``pod_ip:target_port``, as kube-proxy would for
        one endpoint: a DNAT rule in the node's own chain (beside the ``kubernetes`` Service's), so it goes with the
        node at stop. A rule already there for ``cluster_ip:port`` is replaced (a Pod restarted with a new address).
        Pods only: the chain is jumped to from ``PREROUTING`` for packets coming in from the bridge."""
        match = ["-d", f"{cluster_ip}/32", "-p", "tcp", "--dport", str(port)]
        for line in run("iptables", "-w", "-t", "nat", "-S", self.chain).stdout.splitlines():
            words = line.split()
            if words[:2] == ["-A", self.chain] and "DNAT" in words and _arg(words, "-d") == f"{cluster_ip}/32" \
                    and _arg(words, "--dport") == str(port):
                run("iptables", "-w", "-t", "nat", "-D", *words[1:])
        run("iptables", "-w", "-t", "nat", "-A", self.chain, *match, "-j", "DNAT", "--to-destination",
            f"{pod_ip}:{target_port}")

    def _cgroup_root(self) -> None:
        """``/<cgroup_root>`` in every hierarchy (the kubelet checks it exists); a new cpuset gets its parent's
        CPUs and memory nodes, or no task could join it."""
        for base in Path("/sys/fs/cgroup").iterdir():
            d = base / self.cgroup_root
            if not base.is_dir() or d.exists():
                continue
            d.mkdir()
            for f in ("cpuset.cpus", "cpuset.mems"):
                if (d / f).exists() and not (d / f).read_text().strip():
                    (d / f).write_text((base / f).read_text())
        self.created["cgroups"] = self.cgroup_root
        self.host.save()
    def _start_containerd(self, timeout: float) -> None:
        d = self.node_dir / "containerd"
        (d / "netns").mkdir(parents=True, exist_ok=True)
        cni_conf = self.node_dir / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        pause, _ = pause_image(self._k8s_version())
        (cni_conf / "10-pidispatch.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": self.cni_network,
            "plugins": [{"type": "bridge", "bridge": self.bridge, "isGateway": True, "ipMasq": False,
                         "hairpinMode": True,
                         "ipam": {"type": "host-local", "ranges": [[{"subnet": str(self.subnet), "gateway": self.ip}]],
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
  # a registry's CA and mirrors: one <host:port>/hosts.toml per registry, read at each pull (trust_registry)
  [{cri}.registry]
    config_path = "{self.registry_hosts_dir}"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
""")
        self.host.spawn("containerd", ["containerd", f"--config={d / 'config.toml'}", "--log-level=warn"])

        def ready():
            return self.containerd_socket.exists() and self.ctr("version", check=False, timeout=10).returncode == 0

        self.host.await_up("containerd", f"{self.containerd_socket}", ready, timeout)

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

    def _start_node_kubelet(self, bins: Path, timeout: float) -> None:
        import requests

        d = self.node_dir / "kubelet"
        d.mkdir(parents=True, exist_ok=True)
        host = self.host
        kc = write_kubeconfig(d / "kubeconfig", host.server, host.ca_file, cert=host.pki / "node.crt",
                              key=host.pki / "node.key", user=f"system:node:{NODE_NAME}")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # these machines are cgroup v1 (hybrid) with no systemd; 1.36 refuses v1 unless told
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupsPerQOS": True,
            "enforceNodeAllocatable": ["pods"], "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": self.ip, "port": KUBELET_PORT, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self.healthz_port,
            # its own hierarchy: a kubelet destroys every Pod cgroup under its root that it does not know
            "cgroupRoot": f"/{self.cgroup_root}",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(host.ca_file)}},
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
        self.host.spawn("node-kubelet", [
            str(bins / "kubelet"), f"--config={d / 'config.yaml'}", f"--kubeconfig={kc}",
            f"--root-dir={d / 'root'}", f"--cert-dir={d / 'pki'}", f"--node-ip={self.ip}",
            f"--hostname-override={NODE_NAME}", "-v=1",
        ])

        def healthy():
            try:
                return requests.get(f"http://127.0.0.1:{self.healthz_port}/healthz", timeout=2).text == "ok"
            except requests.RequestException:
                return False

        self.host.await_up("node-kubelet", "/healthz", healthy, timeout)
        k = host.kube()
        host.await_up("node-kubelet", f"Node {NODE_NAME} Ready", lambda: node_ready(k, NODE_NAME), timeout)

    def _start_provisioner(self, timeout: float) -> None:
        log = self.host.logs / "pv-provisioner.log"
        self.host.spawn("pv-provisioner", [
            sys.executable, "-m", "e2e.framework.kubelet", f"--kubeconfig={self.host.kubeconfig}",
            f"--data-dir={self.node_dir / 'volumes'}", "--provision-only",
        ], env=python_module_env())
        self.host.await_up("pv-provisioner", "start", lambda: log.exists() and log.stat().st_size > 0, timeout)

    # stopping -------------------------------------------------------------------------------------------
    def stop_pods(self) -> None:
        """The scheduler first (a Pod a ReplicaSet makes again during the drain stays unbound, instead of
        starting on the kubelet being drained), then the Pods (the kubelet tears their sandboxes down), then the
        node's daemons by their pids, then the containers left in its containerd; the cluster stops the rest."""
        host = self.host
        host.stop_component("kube-scheduler")
        if host.pids.get("node-kubelet") and host.pids.get("kube-apiserver"):
            self._drain()
        for c in ("pv-provisioner", "node-kubelet"):
            host.stop_component(c)
        if host.pids.get("containerd"):
            self._remove_containers()

    def clean(self) -> None:
        """What the run created, once every process is stopped: mounts under its state directory, the bridge,
        the iptables chain, the kubelet's cgroups."""
        self._unmount_all()
        self._remove_network()
        self._remove_cgroups()

    def _drain(self, timeout: float = 30) -> None:
        """Delete every Pod at once and wait (a while) for the kubelet to stop their containers."""
        k = self.host.kube()
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
            # a sandbox removed by force had no CNI DEL: libcni's cache file of its loopback stays otherwise
            Path("/var/lib/cni/results", f"cni-loopback-{c}-lo").unlink(missing_ok=True)

    def _unmount_all(self) -> None:
        """Every mount under the state directory (netns, shm, rootfs, Secret tmpfs), deepest first."""
        root = str(self.host.state_dir)
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
            for f in results.glob(f"{self.cni_network}-*"):
                f.unlink(missing_ok=True)

    def _remove_network(self) -> None:
        created = self.created
        chain, bridge = created.get("chain"), created.get("bridge")
        if chain:
            while run("iptables", "-w", "-t", "nat", "-D", "PREROUTING", "-i", bridge or self.bridge, "-j", chain,
                      check=False).returncode == 0:
                pass
            run("iptables", "-w", "-t", "nat", "-F", chain, check=False)
            run("iptables", "-w", "-t", "nat", "-X", chain, check=False)
            created.pop("chain")
        if bridge:
            run("ip", "link", "delete", bridge, check=False)
            created.pop("bridge")

    def _remove_cgroups(self) -> None:
        """The kubelet's hierarchy under this node's cgroup root, in each controller, when it is empty (rmdir,
        deepest first); only the root this run made."""
        root = self.created.pop("cgroups", None)
        if not root:
            return
        for base in Path("/sys/fs/cgroup").iterdir():
            top = base / root
            if not top.is_dir():
                continue
            dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            for p in [*dirs, top]:
                try:
                    p.rmdir()
                except OSError:
                    pass

    # cluster.json -------------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {"node_name": NODE_NAME, "created": self.created,
                "network": {"bridge": self.bridge, "chain": self.chain, "subnet": str(self.subnet or ""),
                            "node_ip": self.ip if self.subnet else ""},
                "healthz_port": self.healthz_port, "cgroup_root": self.cgroup_root}

    def restore(self, state: dict[str, Any]) -> None:
        self.created = dict(state.get("created") or {})
        subnet = (state.get("network") or {}).get("subnet")
        self.subnet = ipaddress.IPv4Network(subnet) if subnet else None
        self.healthz_port = int(state.get("healthz_port") or 0)
