"""The gateway's objects on a real apiserver (docs/gateway.md#deploying): the key and the certificate are made once and
kept across `helm upgrade` (``lookup``, which `helm template` cannot do), a certificate is remade when the names it
must carry change but the key never is, and the gateway's and the operator's ServiceAccounts hold exactly the access
the chart promises (``kubectl auth can-i --as``).

The gateway itself is not started (gateway.replicas=0, as the operator's replicas=0): this is the chart's contract.
"""

from __future__ import annotations

import base64
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import pytest
from cryptography import x509

from e2e.framework.chartinstall import CHART, FULLNAME, RELEASE, fresh_namespace, helm, install
from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.test_upgrade import ROOT, last_tag

pytestmark = pytest.mark.e2e

GATEWAY = f"{FULLNAME}-gateway"
UPGRADE = ("--set", "sessions.enabled=true", "--set", "github.authSource=app", "--set", "replicas=0",
           "--set", "gateway.replicas=0")


@dataclass
class Installed:
    namespace: str
    notes: str


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture(scope="module")
def installed(cluster: Cluster, kube: Kube, helm_home: Path) -> Iterator[Installed]:
    namespace = fresh_namespace(kube, "chart-gateway")
    try:
        yield Installed(namespace, install(cluster, helm_home, namespace))
    finally:
        helm(cluster, helm_home, "uninstall", RELEASE, "--namespace", namespace, check=False)
        kube.delete_ignore_missing(f"/api/v1/namespaces/{namespace}")


def _secret(kube: Kube, ns: str) -> dict[str, str]:
    data: dict[str, str] = kube.get(f"/api/v1/namespaces/{ns}/secrets/{GATEWAY}")["data"]
    return data


def _ca(kube: Kube, ns: str) -> str:
    ca: str = kube.get(f"/api/v1/namespaces/{ns}/configmaps/{GATEWAY}-ca")["data"]["ca.crt"]
    return ca


def test_the_key_and_certificate_are_kept_across_upgrades_and_remade_only_for_new_names(
        installed: Installed, cluster: Cluster, kube: Kube, helm_home: Path) -> None:
    ns = installed.namespace
    first, first_ca = _secret(kube, ns), _ca(kube, ns)
    assert len(base64.b64decode(first["key"])) == 48
    helm(cluster, helm_home, "upgrade", RELEASE, str(CHART), "--namespace", ns, *UPGRADE)
    assert _secret(kube, ns) == first, "an upgrade keeps the key (running jobs' capabilities) and the certificate"
    assert _ca(kube, ns) == first_ca, "job Pods keep trusting the same CA"

    helm(cluster, helm_home, "upgrade", RELEASE, str(CHART), "--namespace", ns, *UPGRADE,
         "--set", "gateway.extraDNSNames={gateway.example}")
    renamed = _secret(kube, ns)
    assert renamed["key"] == first["key"], "a new name never changes the key"
    assert renamed["tls.crt"] != first["tls.crt"]
    leaf = x509.load_pem_x509_certificate(base64.b64decode(renamed["tls.crt"]))
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gateway.example" in names.get_values_for_type(x509.DNSName)
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(_ca(kube, ns).encode()))


def test_the_documented_upgrade_from_the_last_tag_brings_the_gateway(cluster: Cluster, kube: Kube, helm_home: Path,
                                                                    tmp_path: Path) -> None:
    """docs/upgrading.md's `helm upgrade --reuse-values` from a release whose values have no `gateway`: Helm then
    reuses the old values alone, so the chart's templates supply the gateway's defaults (_gateway.tpl)."""
    tag = last_tag()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", tag, "charts/pi-dispatch"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(tmp_path, filter="data")
    ns = fresh_namespace(kube, "chart-gateway-up")
    try:
        helm(cluster, helm_home, "install", RELEASE, str(tmp_path / "charts" / "pi-dispatch"), "--namespace", ns,
             "--set", "sessions.enabled=true", "--set", "github.authSource=app", "--set", "replicas=0")
        assert kube.get_or_none(f"/api/v1/namespaces/{ns}/secrets/{GATEWAY}") is None, f"{tag} has no gateway"
        notes = helm(cluster, helm_home, "upgrade", RELEASE, str(CHART), "--namespace", ns, "--reuse-values",
                     "--set", "gateway.replicas=0").stdout
        assert "reach the outside only through the gateway" in notes
        deployment = kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{GATEWAY}")
        assert deployment["spec"]["replicas"] == 0, "a value given beside --reuse-values still applies"
        operator = kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{FULLNAME}")
        env = {e["name"] for e in operator["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert "PI_DISPATCH_GATEWAY_URL" in env
        first = _secret(kube, ns)
        helm(cluster, helm_home, "upgrade", RELEASE, str(CHART), "--namespace", ns, "--reuse-values")
        assert _secret(kube, ns) == first
    finally:
        helm(cluster, helm_home, "uninstall", RELEASE, "--namespace", ns, check=False)
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


def test_install_notes_say_jobs_go_out_through_the_gateway(installed: Installed) -> None:
    assert "reach the outside only through the gateway" in installed.notes
    assert f"{GATEWAY}.{installed.namespace}.svc" in installed.notes


GATEWAY_CAN = [
    ("get secrets (a capability's named keys)", ["get", "secrets"]),
    ("get configmaps (its ledgers)", ["get", "configmaps"]),
    ("create configmaps", ["create", "configmaps"]),
    ("patch configmaps", ["patch", "configmaps"]),
    ("get pi jobs (the ledger's owner)", ["get", "jobs.pi-dispatch.dev"]),
]
GATEWAY_CANNOT = [
    ("list secrets", ["list", "secrets"]),
    ("watch secrets", ["watch", "secrets"]),
    ("create secrets", ["create", "secrets"]),
    ("list configmaps", ["list", "configmaps"]),
    ("delete configmaps", ["delete", "configmaps"]),
    ("update configmaps", ["update", "configmaps"]),
    ("list pi jobs", ["list", "jobs.pi-dispatch.dev"]),
    ("patch pi jobs status", ["patch", "jobs.pi-dispatch.dev", "--subresource=status"]),
    ("create pods", ["create", "pods"]),
    ("get pods", ["get", "pods"]),
    ("list namespaces (cluster-wide)", ["list", "namespaces"]),
    ("get nodes (cluster-wide)", ["get", "nodes"]),
]


def can_i(cluster: Cluster, user: str, ns: str, args: list[str]) -> bool:
    result = cluster.kubectl("auth", "can-i", *args, f"--as={user}", "-n", ns, check=False)
    assert result.stdout.strip() in ("yes", "no"), result.stdout + result.stderr
    return result.stdout.strip() == "yes"


@pytest.mark.parametrize("args", [c[1] for c in GATEWAY_CAN], ids=[c[0] for c in GATEWAY_CAN])
def test_gateway_can(installed: Installed, cluster: Cluster, args: list[str]) -> None:
    user = f"system:serviceaccount:{installed.namespace}:{GATEWAY}"
    assert can_i(cluster, user, installed.namespace, args), f"{user} should be allowed to {' '.join(args)}"


@pytest.mark.parametrize("args", [c[1] for c in GATEWAY_CANNOT], ids=[c[0] for c in GATEWAY_CANNOT])
def test_gateway_cannot(installed: Installed, cluster: Cluster, args: list[str]) -> None:
    user = f"system:serviceaccount:{installed.namespace}:{GATEWAY}"
    assert not can_i(cluster, user, installed.namespace, args), f"{user} must not be allowed to {' '.join(args)}"


def test_gateway_reaches_nothing_in_another_namespace(installed: Installed, cluster: Cluster, namespace: str) -> None:
    user = f"system:serviceaccount:{installed.namespace}:{GATEWAY}"
    for args in (["get", "secrets"], ["create", "configmaps"], ["get", "jobs.pi-dispatch.dev"]):
        assert not can_i(cluster, user, namespace, args), f"{' '.join(args)} in {namespace}"


def test_the_operator_reads_ledgers_and_writes_none(installed: Installed, cluster: Cluster) -> None:
    user = f"system:serviceaccount:{installed.namespace}:{FULLNAME}"
    assert can_i(cluster, user, installed.namespace, ["get", "configmaps"])
    for verb in ("list", "create", "patch", "delete"):
        assert not can_i(cluster, user, installed.namespace, [verb, "configmaps"]), verb
    assert not can_i(cluster, user, installed.namespace, ["get", "secrets"]), "it still never reads a Secret"
