"""The chart's job NetworkPolicy enforced on the real node (issue 40): a job Pod reaches the gateway and nothing else.

On the real node (``e2e/framework/realnode.py``: containerd, runc, the CNI bridge) with a real NetworkPolicy
implementation
running on the host (kube-router's firewall, ``e2e/framework/netpolicy.py``), in a namespace enforcing ``restricted``:

* a Pod carrying the labels the operator puts on job Pods (``manifests/pod.py``'s own, taken from a real job Pod
  manifest) and running the job image;
* a stand-in gateway: a Pod with the gateway's labels (``app.kubernetes.io/component: gateway`` and the release's
  ``name``/``instance``), listening on 8443, 3128 and 9000 (the real gateway is another change; this stands in
  for its Pods' labels and ports only);
* a bystander Pod with no gateway label listening on 8443, and a listener this test runs on the node's own
  address (the bridge's: where a Pod reaches this machine).

Before the policy, every connection from the job Pod succeeds (the network is up and the probes work). With the
chart's own ``job-networkpolicy.yaml`` (default values) applied, the gateway's 8443 and 3128 still connect, and
the gateway's 9000, the bystander and the host's listener do not. With the policy deleted, all connect again:
the implementation enforces the policy, the network is not simply down. Addresses: the node's bridge only.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.framework import netpolicy
from e2e.framework.chartinstall import CHART
from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.realnode import RealNode, images_env, unavailable
from e2e.framework.release import fresh_namespace
from pidispatch.manifests.pod import PodInputs, job_pod
from testkit.chart import KUBE_VERSION
from testkit.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

RELEASE = "pi"
GATEWAY_PORTS = (8443, 3128)
OTHER_PORT = 9000
#: a TCP listener in the job image's Python: accepts and closes, on every port given
LISTEN = """
import socket, sys, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(64)
    while True:
        c, _ = s.accept(); c.close()
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(p),), daemon=True).start()
threading.Event().wait()
"""
#: one connection attempt from inside the job Pod: prints ok or the error's name
PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close(); print("ok")
except OSError as e:
    print(type(e).__name__)
"""


def _skip_or_fail(why: str) -> None:
    if os.environ.get("PIDISPATCH_REQUIRE_REAL_NODE") == "1":
        pytest.fail(f"PIDISPATCH_REQUIRE_REAL_NODE=1 but {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = unavailable()
    if why:
        _skip_or_fail(f"no real node on this machine: {why}")
    c = Cluster(state_dir=tmp_path_factory.mktemp("netpol-node"), backend=RealNode())
    why = netpolicy.unavailable(c)
    if why:
        _skip_or_fail(f"no NetworkPolicy implementation for the real node: {why}")
    c.start()
    try:
        netpolicy.start(c)
        yield c
    finally:
        try:
            netpolicy.stop(c)
        finally:
            c.stop()


@pytest.fixture(scope="module")
def kube(node: Cluster) -> Kube:
    return node.kube()


@pytest.fixture(scope="module")
def host_listener(node: Cluster) -> Iterator[tuple[str, int]]:
    """A TCP listener on the node's address (the bridge), in this process: what a Pod reaches of this machine."""
    s = socket.socket()
    s.bind((node.backend.ip, 0))
    s.listen(16)
    s.settimeout(0.5)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                s.accept()[0].close()
            except TimeoutError:
                continue
            except OSError:
                return

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield s.getsockname()[0], s.getsockname()[1]
    finally:
        done.set()
        t.join(5)
        s.close()


def _container(image: str, argv: list[str]) -> dict[str, Any]:
    return {"name": "main", "image": image, "imagePullPolicy": "Never", "command": argv,
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                "runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}}


def _pod(kube: Kube, ns: str, name: str, labels: dict[str, str], argv: list[str]) -> str:
    """A Pod of the job image running ``argv``, Running with an address; returns the address."""
    image = images_env()["JOB_IMAGE"]
    kube.create(f"/api/v1/namespaces/{ns}/pods", {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [_container(image, argv)], "terminationGracePeriodSeconds": 0,
                 "automountServiceAccountToken": False},
    })

    def running() -> str | None:
        pod = kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        status = pod.get("status", {})
        return status.get("podIP") if status.get("phase") == "Running" else None

    return str(wait_until(f"Pod {ns}/{name} Running", running, timeout=120))


def _job_labels() -> dict[str, str]:
    """The labels the operator puts on a job Pod, from a real job Pod manifest (its spec is not used: its owner,
    a pijob, does not exist here and its volumes need the chart)."""
    pod = job_pod(PodInputs(job_name="fix-1", job_uid="u-1", namespace="x", image="job:1",
                            command=["pidispatch", "runner"], env={}))
    return dict(pod["metadata"]["labels"])


def _chart_policy(node: Cluster, ns: str, home: Any) -> dict[str, Any]:
    """The chart's job NetworkPolicy with its default values, as ``helm template`` renders it for ``ns``."""
    env = {**node.env(), "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data")}
    argv = [str(node.helm_path), "template", RELEASE, str(CHART), "--namespace", ns, "--kube-version", KUBE_VERSION,
            "--show-only", "templates/job-networkpolicy.yaml"]
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return yaml.safe_load(r.stdout)


def test_the_job_pod_reaches_the_gateway_and_nothing_else_while_the_policy_is_applied(
        node: Cluster, kube: Kube, host_listener: tuple[str, int], tmp_path_factory: pytest.TempPathFactory) -> None:
    ns = fresh_namespace(kube, "netpol")
    gateway_labels = {"app.kubernetes.io/name": "pi-dispatch", "app.kubernetes.io/instance": RELEASE,
                      "app.kubernetes.io/component": "gateway"}
    ports = [str(p) for p in (*GATEWAY_PORTS, OTHER_PORT)]
    gateway = _pod(kube, ns, "gateway", gateway_labels, ["python3", "-c", LISTEN, *ports])
    bystander = _pod(kube, ns, "bystander", {"app": "bystander"}, ["python3", "-c", LISTEN, "8443"])
    job_labels = _job_labels()
    _pod(kube, ns, "job", job_labels, ["python3", "-c", "import time; time.sleep(3600)"])
    targets = {"gateway:8443": (gateway, 8443), "gateway:3128": (gateway, 3128),
               f"gateway:{OTHER_PORT}": (gateway, OTHER_PORT), "bystander:8443": (bystander, 8443),
               "host": host_listener}

    def probe(name: str) -> str:
        host, port = targets[name]
        r = node.kubectl("exec", "-n", ns, "job", "--", "python3", "-c", PROBE, host, str(port), check=False,
                         timeout=30)
        return r.stdout.strip() or f"exec failed: {r.stderr.strip()}"

    def probes() -> dict[str, str]:
        return {name: probe(name) for name in targets}

    everything = {name: "ok" for name in targets}
    assert probes() == everything, "before the policy every connection succeeds"

    policy = _chart_policy(node, ns, tmp_path_factory.mktemp("helm-home"))
    assert policy["kind"] == "NetworkPolicy"
    path = f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
    kube.create(path, policy)
    allowed = {"gateway:8443", "gateway:3128"}
    seen: dict[str, str] = {}

    def enforced() -> bool:
        seen.update(probes())
        return all((seen[n] == "ok") == (n in allowed) for n in targets)

    try:
        wait_until("the job Pod's egress limited to the gateway", enforced, timeout=90, interval=2)
    except TimeoutError:
        pytest.fail(f"the policy is not enforced: from the job Pod {seen} (only {sorted(allowed)} should connect)")
    refused = {n: seen[n] for n in targets if n not in allowed}
    assert all(v in ("ConnectionRefusedError", "TimeoutError") for v in refused.values()), seen
    print(f"[netpol] with the policy, from the job Pod: {seen}", file=sys.stderr)

    kube.delete(f"{path}/{policy['metadata']['name']}")
    wait_until("every connection succeeding again without the policy", lambda: probes() == everything, timeout=90,
               interval=2)
    print(f"[netpol] without it: {everything}", file=sys.stderr)
    kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")
