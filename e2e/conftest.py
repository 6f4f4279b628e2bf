"""pytest fixtures for tests against the local control plane.

Fixtures (import nothing; pytest finds them for every test under e2e/):

* ``cluster`` (session) -- ``e2e.framework.cluster.Cluster``: ``.kubeconfig`` (admin), ``.server``, ``.bin_dir``
  (kubectl, helm, ...), ``.kubectl(...)``, ``.kube()`` (``e2e.framework.kube.Kube`` admin client),
  ``.api_client()`` (official ``kubernetes`` client), ``.env()`` (KUBECONFIG + PATH for
  subprocesses), ``.service_account_kubeconfig(ns, sa)``, ``.pvc_host_path(ns, pvc)``.
  Started fresh in a temporary directory (with the test kubelet) and stopped at the end of the
  session; set ``PIDISPATCH_E2E_CLUSTER=<state dir>`` to reuse one started by ``make cluster-up``,
  or ``PIDISPATCH_E2E_KUBECONFIG=<kubeconfig>`` to run against another cluster (``e2e/kind/run.sh``);
  there Pods run on real kubelets and tests that need the test kubelet are skipped.
* ``multinode_cluster`` (session) -- a second ``Cluster`` of three nodes (``e2e/framework/multinode.py``: test kubelets
  ``node-a``, ``node-b``, ``node-c``, the real kube-scheduler, ReadWriteOnce volumes that attach to one node at a
  time, a ReadWriteMany class). Started only for the tests that ask for it, in a temporary directory; set
  ``PIDISPATCH_E2E_MULTINODE_CLUSTER=<state dir>`` to reuse one started by ``python -m e2e.framework.cluster up --node
  multi --dir <state dir>``.
* ``kube`` (session) -- admin ``Kube`` client.
* ``kubelet`` (session) -- ``KubeletHandle``: node name, data dir, ``pod_log(ns, pod, container)``.
* ``namespace`` (function) -- a fresh namespace (its ``default`` ServiceAccount exists), deleted after.
* ``github_contracts_kept`` (autouse) -- fails a test during which the fake forge met a request or gave an
  answer GitHub's published description does not allow (``testkit/contract_fixture.py``).
* ``service_account`` (function) -- factory ``(name, namespace=<fresh ns>) -> ServiceAccountAccess``
  with ``.kubeconfig`` (bearer token from the TokenRequest API), ``.kube`` and ``.kubectl(...)``.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.framework.cluster import NODE_NAME, Cluster
from e2e.framework.kube import Kube, wait_for
from e2e.framework.multinode import MultiNode
from testkit.contract_fixture import github_contracts_kept  # noqa: F401 - autouse: docs/github-contracts.md


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    external = os.environ.get("PIDISPATCH_E2E_KUBECONFIG")
    if external:
        yield Cluster(state_dir=tmp_path_factory.mktemp("external"), external_kubeconfig=Path(external))
        return
    reuse = os.environ.get("PIDISPATCH_E2E_CLUSTER")
    if reuse:
        c = Cluster.load(reuse)
        if not c.is_running():
            pytest.fail(f"PIDISPATCH_E2E_CLUSTER={reuse}: no running cluster there (make cluster-up)")
        yield c
        return
    c = Cluster(state_dir=tmp_path_factory.mktemp("cluster"))
    c.start(kubelet=True)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def multinode_cluster(tmp_path_factory: pytest.TempPathFactory):
    if os.environ.get("PIDISPATCH_E2E_KUBECONFIG"):
        pytest.skip("needs the local multi-node cluster (test kubelets and the real kube-scheduler)")
    reuse = os.environ.get("PIDISPATCH_E2E_MULTINODE_CLUSTER")
    if reuse:
        c = Cluster.load(reuse)
        if not c.is_running():
            pytest.fail(f"PIDISPATCH_E2E_MULTINODE_CLUSTER={reuse}: no running cluster there "
                        "(python -m e2e.framework.cluster up --node multi --dir ...)")
        yield c
        return
    c = Cluster(state_dir=tmp_path_factory.mktemp("multinode"), backend=MultiNode())
    c.start(kubelet=True)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def kube(cluster: Cluster) -> Kube:
    return cluster.kube()


@dataclass
class KubeletHandle:
    node_name: str
    data_dir: Path

    def pod_dir(self, kube: Kube, namespace: str, name: str) -> Path:
        uid = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["metadata"]["uid"]
        return self.data_dir / "pods" / f"{namespace}_{name}_{uid}"

    def pod_log(self, kube: Kube, namespace: str, name: str, container: str) -> str:
        """stdout+stderr of a container (all restarts); ``kubectl logs`` has no kubelet to ask."""
        f = self.pod_dir(kube, namespace, name) / "logs" / f"{container}.log"
        return f.read_text(errors="replace") if f.exists() else ""


@pytest.fixture(scope="session")
def kubelet(cluster: Cluster, kube: Kube) -> KubeletHandle:
    if cluster.external_kubeconfig:
        pytest.skip("needs the test kubelet (Pods as local processes); this cluster runs real kubelets")
    def ready():
        n = kube.get_or_none(f"/api/v1/nodes/{NODE_NAME}")
        return n and any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))

    wait_for(f"Node {NODE_NAME} (test kubelet) Ready", ready, timeout=30)
    return KubeletHandle(NODE_NAME, cluster.kubelet_dir)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube: Kube):
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    kube.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": {"pidispatch.dev/e2e": "true"}}})
    # the ServiceAccount admission plugin rejects Pods until the serviceaccount controller made `default`
    wait_for(f"ServiceAccount {name}/default", lambda: kube.get_or_none(
        f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=30)
    yield name
    kube.delete_ignore_missing(f"/api/v1/namespaces/{name}")


@dataclass
class ServiceAccountAccess:
    namespace: str
    name: str
    kubeconfig: Path
    kube: Kube
    cluster: Cluster

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    def kubectl(self, *args: str, **kw):
        return self.cluster.kubectl(*args, kubeconfig=self.kubeconfig, **kw)


@pytest.fixture
def service_account(cluster: Cluster, namespace: str):
    def make(name: str, ns: str | None = None) -> ServiceAccountAccess:
        ns = ns or namespace
        kc = cluster.service_account_kubeconfig(ns, name)
        return ServiceAccountAccess(ns, name, kc, Kube.from_kubeconfig(kc), cluster)

    return make
