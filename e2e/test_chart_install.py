"""The Helm chart on a real apiserver: `helm install` with sessions on, the CRDs served, the PVCs bound,
and the operator's ServiceAccount holding exactly the access its RBAC promises (checked both with
`kubectl auth can-i --as` and by acting with the ServiceAccount's own token).

The operator itself is not started here (replicas=0): this is the chart's contract, not the operator's.
The tests that wait for the claims to be Bound take the ``kubelet`` fixture: on kind, WaitForFirstConsumer
storage classes leave them Pending while no Pod uses them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from e2e.framework.chartinstall import CHART, FULLNAME, RELEASE, fresh_namespace, helm, install
from e2e.framework.cluster import Cluster
from e2e.framework.kube import ApiError, Kube
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

GROUP, VERSION = "pi-dispatch.dev", "v1alpha1"


@dataclass
class Release:
    namespace: str
    install_output: str

    @property
    def service_account(self) -> str:
        return FULLNAME

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, helm_home: Path) -> Iterator[Release]:
    namespace = fresh_namespace(kube, "chart-install")
    try:
        yield Release(namespace, install(cluster, helm_home, namespace))
    finally:
        helm(cluster, helm_home, "uninstall", RELEASE, "--namespace", namespace, check=False)
        kube.delete_ignore_missing(f"/api/v1/namespaces/{namespace}")


def test_install_creates_the_release_and_its_crds_are_established(release: Release, kube: Kube,
                                                                    cluster: Cluster, helm_home: Path) -> None:
    status = helm(cluster, helm_home, "status", RELEASE, "--namespace", release.namespace, "-o", "yaml")
    assert yaml.safe_load(status.stdout)["info"]["status"] == "deployed"
    names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in sorted((CHART / "crds").glob("*.yaml"))]
    assert sorted(names) == ["jobs.pi-dispatch.dev", "sessionkeys.pi-dispatch.dev", "triggers.pi-dispatch.dev"]
    for name in names:
        def established(name: str = name) -> bool:
            crd = kube.get_or_none(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            return bool(crd) and any(c["type"] == "Established" and c["status"] == "True"
                                     for c in crd.get("status", {}).get("conditions", []))

        wait_until(f"CRD {name} Established", established, timeout=60)
    ns = release.namespace
    deployment = kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{FULLNAME}")
    assert deployment["spec"]["strategy"]["type"] == "Recreate" and deployment["spec"]["replicas"] == 0
    assert kube.get(f"/api/v1/namespaces/{ns}/services/{FULLNAME}-metrics")["spec"]["ports"][0]["name"] == "metrics"


def test_the_job_network_policy_is_installed_by_default(release: Release, kube: Kube) -> None:
    """On by default (issue 40): the apiserver holds it, egress to DNS and the gateway alone, no ingress."""
    np = kube.get(f"/apis/networking.k8s.io/v1/namespaces/{release.namespace}/networkpolicies/{FULLNAME}-jobs")
    spec = np["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and not spec.get("ingress")
    ports = [sorted(p["port"] for p in rule["ports"]) for rule in spec["egress"]]
    assert ports == [[53, 53], [3128, 8443]], ports  # the gateway Pods' ports (the Service's 443 is 8443)
    assert spec["egress"][1]["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "gateway"


def test_install_notes_say_how_to_watch_and_run_doctor(release: Release) -> None:
    notes = release.install_output
    assert f"kubectl get pijobs,sessionkeys -n {release.namespace} -w" in notes
    assert "Sessions are ENABLED" in notes
    # the push-access disclosure, beside the values' comment and doctor's push-access line
    assert "Who can receive a stored transcript" in notes
    assert "Arm run.resume only for repositories whose push access you control" in notes
    assert f"kubectl exec -n {release.namespace} deploy/{FULLNAME} -- pidispatch doctor" in notes


def test_session_claims_are_bound_by_the_provisioner(release: Release, cluster: Cluster, kubelet: object) -> None:
    for claim in (f"{FULLNAME}-sessions", f"{FULLNAME}-staging"):
        assert cluster.pvc_host_path(release.namespace, claim, timeout=60).is_dir(), claim


CAN = [
    ("create pods", ["create", "pods"]),
    ("delete pods", ["delete", "pods"]),
    ("watch pods", ["watch", "pods"]),
    ("patch pi jobs status", ["patch", f"jobs.{GROUP}", "--subresource=status"]),
    ("patch trigger status", ["patch", f"triggers.{GROUP}", "--subresource=status"]),
    ("create sessionkeys", ["create", f"sessionkeys.{GROUP}"]),
    ("delete sessionkeys", ["delete", f"sessionkeys.{GROUP}"]),
    ("patch sessionkeys (the operator's finalizer)", ["patch", f"sessionkeys.{GROUP}"]),
    ("create secrets (per-job App tokens)", ["create", "secrets"]),
    ("delete secrets (per-job App tokens, after the retention)", ["delete", "secrets"]),
    ("delete pi jobs (after ttlSecondsAfterFinished)", ["delete", f"jobs.{GROUP}"]),
    ("create pi jobs (a cron Trigger's slots)", ["create", f"jobs.{GROUP}"]),
    ("create events", ["create", "events"]),
    ("get persistentvolumeclaims", ["get", "persistentvolumeclaims"]),
    ("get leases (leader election)", ["get", "leases.coordination.k8s.io"]),
    ("create leases", ["create", "leases.coordination.k8s.io"]),
    ("update leases", ["update", "leases.coordination.k8s.io"]),
    ("list crds (cluster-wide)", ["list", "customresourcedefinitions.apiextensions.k8s.io"]),
    ("watch namespaces (cluster-wide)", ["watch", "namespaces"]),
    ("get nodes (its own, to refuse a Trigger its resumed jobs could not follow onto it)", ["get", "nodes"]),
]
CANNOT = [
    ("delete leases (a replica only takes or renews the Lease)", ["delete", "leases.coordination.k8s.io"]),
    ("get secrets", ["get", "secrets"]),
    ("list secrets", ["list", "secrets"]),
    ("watch secrets", ["watch", "secrets"]),
    ("get pods/log", ["get", "pods", "--subresource=log"]),
    ("exec into pods", ["create", "pods", "--subresource=exec"]),
    ("patch pods", ["patch", "pods"]),
    ("create deployments", ["create", "deployments.apps"]),
    # Least privilege: only status is written on Jobs and Triggers, and only by patch.
    ("patch pi jobs", ["patch", f"jobs.{GROUP}"]),
    ("update pi jobs status", ["update", f"jobs.{GROUP}", "--subresource=status"]),
    ("update triggers", ["update", f"triggers.{GROUP}"]),
    ("create events.k8s.io events", ["create", "events.events.k8s.io"]),
    ("delete triggers", ["delete", f"triggers.{GROUP}"]),
    ("create persistentvolumeclaims", ["create", "persistentvolumeclaims"]),
    ("create batch jobs", ["create", "jobs.batch"]),
    ("create crds", ["create", "customresourcedefinitions.apiextensions.k8s.io"]),
    ("patch rolebindings", ["patch", "rolebindings.rbac.authorization.k8s.io"]),
    ("impersonate", ["impersonate", "serviceaccounts"]),
    ("list nodes (it reads its own by name)", ["list", "nodes"]),
    ("watch nodes", ["watch", "nodes"]),
    ("patch nodes", ["patch", "nodes"]),
]


def can_i(cluster: Cluster, release: Release, args: list[str], namespace: str | None = None) -> bool:
    result = cluster.kubectl("auth", "can-i", *args, f"--as={release.user}", "-n", namespace or release.namespace,
                             check=False)
    assert result.stdout.strip() in ("yes", "no"), result.stdout + result.stderr
    return result.stdout.strip() == "yes"


@pytest.mark.parametrize("args", [c[1] for c in CAN], ids=[c[0] for c in CAN])
def test_service_account_can(release: Release, cluster: Cluster, args: list[str]) -> None:
    assert can_i(cluster, release, args), f"{release.user} should be allowed to {' '.join(args)}"


@pytest.mark.parametrize("args", [c[1] for c in CANNOT], ids=[c[0] for c in CANNOT])
def test_service_account_cannot(release: Release, cluster: Cluster, args: list[str]) -> None:
    assert not can_i(cluster, release, args), f"{release.user} must not be allowed to {' '.join(args)}"


@pytest.mark.parametrize("verb", ["get", "list", "watch"])
def test_service_account_cannot_touch_another_namespaces_pi_jobs(release: Release, cluster: Cluster,
                                                                  namespace: str, verb: str) -> None:
    assert can_i(cluster, release, [verb, f"jobs.{GROUP}"]), "allowed at home"
    assert not can_i(cluster, release, [verb, f"jobs.{GROUP}"], namespace=namespace)
    assert not can_i(cluster, release, ["create", "pods"], namespace=namespace)


def test_service_account_token_acts_within_its_rbac(release: Release, cluster: Cluster, kube: Kube,
                                                    namespace: str) -> None:
    """The same grants exercised for real with the ServiceAccount's bound token (TokenRequest)."""
    ns = release.namespace
    sa = cluster.service_account_kube(ns, release.service_account, create=False)
    keys = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/sessionkeys"
    key = uuid.uuid4().hex
    sa.create(keys, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SessionKey", "metadata": {"name": key},
                     "spec": {"forge": "github", "repository": "octo/repo", "branch": "pi/issue-1"}})
    sa.patch(f"{keys}/{key}/status", {"status": {"next": "expired"}})
    sa.delete(f"{keys}/{key}")

    jobs = f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/jobs"
    job = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job", "metadata": {"name": "j1"},
           "spec": {"trigger": "t", "forge": "github", "repository": "octo/repo"}}
    for where in (ns, namespace):
        kube.create(jobs.format(ns=where), job)
    sa.patch(jobs.format(ns=ns) + "/j1/status", {"status": {"phase": "Queued"}})
    assert kube.get(jobs.format(ns=ns) + "/j1")["status"]["phase"] == "Queued"

    # A cron Trigger's slot: the operator creates the Job, in its own namespace only.
    sa.create(jobs.format(ns=ns), {**job, "metadata": {"name": "t-cron-202612040600"}})
    refused = [
        ("create a pi Job in another namespace", lambda: sa.create(jobs.format(ns=namespace), {
            **job, "metadata": {"name": "t-cron-202612040600"}})),
        ("get a Secret", lambda: sa.get(f"/api/v1/namespaces/{ns}/secrets")),
        ("list another namespace's pi Jobs", lambda: sa.get(jobs.format(ns=namespace))),
        ("patch another namespace's pi Job status",
         lambda: sa.patch(jobs.format(ns=namespace) + "/j1/status", {"status": {"phase": "Queued"}})),
        ("create a Deployment", lambda: sa.create(f"/apis/apps/v1/namespaces/{ns}/deployments", {})),
    ]
    for what, attempt in refused:
        with pytest.raises(ApiError) as err:
            attempt()
        assert err.value.status == 403, f"{what}: {err.value.status} {err.value.message}"


def test_uninstall_keeps_the_store_and_removes_everything_else(cluster: Cluster, kube: Kube, kubelet: object,
                                                               helm_home: Path) -> None:
    namespace = fresh_namespace(kube, "chart-uninstall")
    try:
        install(cluster, helm_home, namespace)
        store, staging = f"{FULLNAME}-sessions", f"{FULLNAME}-staging"
        cluster.pvc_host_path(namespace, store, timeout=60)
        cluster_role = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{FULLNAME}-{namespace}"
        assert kube.get_or_none(cluster_role), "cluster-scoped objects carry the namespace in their name"
        helm(cluster, helm_home, "uninstall", RELEASE, "--namespace", namespace, "--wait")
        pvcs = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"

        def staging_gone() -> bool:
            pvc = kube.get_or_none(f"{pvcs}/{staging}")
            return pvc is None or bool(pvc["metadata"].get("deletionTimestamp"))

        wait_until(f"PVC {staging} deleted by helm uninstall", staging_gone, timeout=60)
        kept = kube.get(f"{pvcs}/{store}")
        assert not kept["metadata"].get("deletionTimestamp"), "helm.sh/resource-policy: keep"
        assert kube.get_or_none(cluster_role) is None
        assert kube.get_or_none(f"/apis/apps/v1/namespaces/{namespace}/deployments/{FULLNAME}") is None
    finally:
        helm(cluster, helm_home, "uninstall", RELEASE, "--namespace", namespace, check=False)
        kube.delete_ignore_missing(f"/api/v1/namespaces/{namespace}")

