"""A real NetworkPolicy implementation for the real node: kube-router's firewall (its network policy controller)
as a process on this machine, in the host's network namespace where the node's bridge and the Pods' veths are.

Why kube-router and not kube-network-policies (what kind ships): that one queues each new connection to user space
with nftables' ``queue`` statement, and this machine's kernel is built without ``CONFIG_NFT_QUEUE``; kube-router
enforces with iptables and ipsets, which the kernel has (``docs/control-plane.md#networkpolicy-on-the-real-node``
has the evidence). It runs with only its firewall (``--run-router=false --run-service-proxy=false``), the
cluster's admin kubeconfig, the real node's name, and the control plane's Service range.

kube-router removes nothing of its own when it stops, so ``stop`` does: the jumps from the built-in chains, its
``KUBE-ROUTER-*``, ``KUBE-POD-FW-*`` and ``KUBE-NWPLCY-*`` chains of the filter table and its ``KUBE-SRC-*`` and
``KUBE-DST-*`` ipsets; no other rule or set is touched. Needs root, the ``ipset`` tool and the binary
``e2e/controlplane/build.sh`` builds into the control plane's bin dir.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from e2e.framework.cluster import SERVICE_CIDR, Cluster
from e2e.framework.realnode import NODE_NAME
from e2e.framework.realnodekit import run, say

COMPONENT = "kube-router"
CHAIN_PREFIXES = ("KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-")
IPSET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-")
#: NodePorts kube-router lets reach this machine's own addresses: two (it refuses a range of one), away from the
#: ports the tests listen on
NODE_PORTS = "30000-30001"


def binary(cluster: Cluster) -> Path:
    return cluster.bin_dir / COMPONENT


def unavailable(cluster: Cluster) -> str | None:
    """Why kube-router cannot enforce here, or None."""
    if not binary(cluster).exists():
        return f"{binary(cluster)} missing: e2e/controlplane/build.sh builds it (make controlplane)"
    missing = [tool for tool in ("ipset", "iptables-save", "iptables-restore") if not shutil.which(tool)]
    if missing:
        return f"missing {', '.join(missing)}: apt-get install ipset iptables (or `make node`)"
    return None


def start(cluster: Cluster, timeout: float = 60) -> None:
    """kube-router's firewall against ``cluster``'s apiserver, up once its top-level chains are in place."""
    cluster.spawn(COMPONENT, [
        str(binary(cluster)), f"--kubeconfig={cluster.kubeconfig}", f"--hostname-override={NODE_NAME}",
        "--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
        "--enable-ipv4=true", "--enable-ipv6=false", f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--service-node-port-range={NODE_PORTS}", "--health-port=0", "--metrics-port=0", "-v=1",
    ])

    cluster.await_up(COMPONENT, "its chains in the filter table", _jumps_present, timeout)
    say(f"kube-router's firewall is enforcing NetworkPolicy on {NODE_NAME}")


def _jumps_present() -> bool:
    return any(line.startswith("-A FORWARD") and "KUBE-ROUTER-FORWARD" in line for line in _rules())


def _rules() -> list[str]:
    return run("iptables-save", "-t", "filter").stdout.splitlines()


def stop(cluster: Cluster) -> None:
    """Stop kube-router by its pid, then remove its rules, chains and ipsets (and nothing else)."""
    cluster.stop_component(COMPONENT)
    rules = _rules()
    for line in rules:  # the jumps from the built-in chains (and from any chain) into kube-router's
        words = shlex.split(line)
        if line.startswith("-A ") and not words[1].startswith(CHAIN_PREFIXES) and "-j" in words:
            target = words[words.index("-j") + 1]
            if target.startswith(CHAIN_PREFIXES):
                subprocess.run(["iptables", "-w", "-t", "filter", "-D", *words[1:]], capture_output=True,
                               check=False)
    chains = [line[1:].split()[0] for line in rules if line.startswith(":") and line[1:].startswith(CHAIN_PREFIXES)]
    for chain in chains:
        run("iptables", "-w", "-t", "filter", "-F", chain, check=False)
    for chain in chains:
        run("iptables", "-w", "-t", "filter", "-X", chain, check=False)
    for name in run("ipset", "list", "-n", check=False).stdout.split():
        if name.startswith(IPSET_PREFIXES):
            run("ipset", "destroy", name, check=False)
