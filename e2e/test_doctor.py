"""``pidispatch doctor`` against the real apiserver: CRDs established, Triggers counted, RBAC asked of the
apiserver as the identity that runs it, the staging PVC Bound, the gateway reached over TLS verified with the CA
job Pods mount, and the in-cluster run that ``helm test`` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.pods import pod_path, wait_pod_phase
from pidispatch.api import crds
from pidispatch.doctor.cluster import CRD_NAMES, REQUIRED_ACCESS
from pidispatch.gateway.secrets import StaticSecrets
from testkit.gatewaykit import GatewayServer
from testkit.transferkit import make_pki
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
SCRUBBED = ("PI_", "GITHUB_AUTH_SOURCE", "KUBECONFIG", "KUBERNETES_SERVICE_")
HELM_FIX = "helm upgrade <release> pi-dispatch -n {ns} --reuse-values --set sessions.enabled=true"


@pytest.fixture(scope="module")
def crds_installed(cluster: Cluster) -> None:
    cluster.kubectl("apply", "-f", str(ROOT / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    *(f"customresourcedefinition/{name}" for name in CRD_NAMES))


def doctor(kubeconfig: Path, namespace: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED)}
    return subprocess.run([sys.executable, "-m", "pidispatch", "doctor", *args], capture_output=True, text=True,
                          env={**base, "KUBECONFIG": str(kubeconfig), "PI_DISPATCH_NAMESPACE": namespace, **env},
                          stdin=subprocess.DEVNULL, timeout=120)


def create_trigger(kube: Kube, namespace: str, name: str, run: dict) -> None:
    kube.create(f"/apis/{crds.GROUP}/{crds.VERSION}/namespaces/{namespace}/triggers", {
        "apiVersion": f"{crds.GROUP}/{crds.VERSION}", "kind": "Trigger", "metadata": {"name": name},
        "spec": {"on": {"event": "issue_comment.created", "phrase": "@pi", "repositories": ["acme/*"]}, "run": run}})


def grant_operator_role(cluster: Cluster, kube: Kube, namespace: str, sa: str) -> None:
    """The Role the chart must grant: every request the doctor asks about, and get on PVCs (its staging check)."""
    rules = [{"apiGroups": [a.group], "resources": [f"{a.resource}/{a.subresource}" if a.subresource
                                                    else a.resource], "verbs": [a.verb]} for a in REQUIRED_ACCESS]
    rules.append({"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"]})
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    kube.create(f"{rbac}/roles", {"metadata": {"name": "operator"}, "rules": rules})
    kube.create(f"{rbac}/rolebindings", {
        "metadata": {"name": "operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]})
    who = f"--as=system:serviceaccount:{namespace}:{sa}"
    wait_until("the operator Role to be in force", lambda: cluster.kubectl(
        "auth", "can-i", "create", "events", who, "-n", namespace, check=False).stdout.strip() == "yes", timeout=30)


def bound_pvc(kube: Kube, namespace: str, name: str) -> None:
    kube.create(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    wait_until(f"PVC {namespace}/{name} Bound", lambda: kube.get(
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}").get("status", {}).get("phase") == "Bound",
        timeout=30)


def test_admin_resume_trigger_without_a_store_fails(cluster: Cluster, kube: Kube, namespace: str,
                                                    crds_installed: None) -> None:
    create_trigger(kube, namespace, "resumer", {"resume": True})
    create_trigger(kube, namespace, "plain", {"model": "openai/gpt-4o"})
    result = doctor(cluster.kubeconfig, namespace)
    lines = result.stdout.splitlines()
    assert result.returncode == 1, result.stdout + result.stderr
    assert [line for line in lines if line.startswith("ok    crd")] == [
        f"ok    crd        {name} established" for name in CRD_NAMES]
    assert f"ok    triggers   2 Triggers in {namespace}, 1 arms resume" in lines
    assert any(line.startswith("ok    rbac       admin may make all") for line in lines)
    # GITHUB_AUTH_SOURCE is scrubbed: the gh default, where the chart refuses sessions.enabled=true alone
    store = lines.index("FAIL  store      1 Trigger arms resume but PI_SESSIONS_DIR is unset: their jobs are "
                        "refused (sessions-dir-unset) rather than lose the conversation and look successful; "
                        "enabling the store also needs an auth source it can resume under (the chart refuses "
                        "sessions.enabled=true with GITHUB_AUTH_SOURCE=gh): a GitHub App or a pat")
    assert lines[store + 1] == "                 fix: " + HELM_FIX.format(ns=namespace) + (
        ",github.authSource=app,github.app.id=<app-id>,github.app.installationId=<installation-id>,"
        "github.app.privateKeySecret.name=<secret>")
    assert not [line for line in lines if line.split()[1:2] in (["privacy"], ["bounds"], ["staging"])]


def test_service_account_without_bindings_fails_rbac_naming_each_missing_request(
        cluster: Cluster, namespace: str, service_account, crds_installed: None) -> None:
    sa = service_account("nobody")
    result = doctor(sa.kubeconfig, namespace, "--json", GITHUB_AUTH_SOURCE="app")
    assert result.returncode == 1, result.stdout + result.stderr
    checks = [json.loads(line) for line in result.stdout.splitlines()]
    rbac = [c for c in checks if c["check"] == "rbac"]
    assert [c["status"] for c in rbac] == ["fail"] * len(REQUIRED_ACCESS)
    for check, access in zip(rbac, REQUIRED_ACCESS, strict=True):
        assert check["message"].startswith(f"cannot {access.what} in {namespace}: re-install the chart")
        assert check["fix"] == access.can_i(namespace, sa.username)
    # the fix is a literal command: run it, and the apiserver says no
    asked = subprocess.run(rbac[0]["fix"].split(), capture_output=True, text=True, env=cluster.env(), timeout=60)
    assert asked.stdout.strip() == "no"
    # CRDs are not readable by this identity; API discovery still shows them served
    assert [c["status"] for c in checks if c["check"] == "crd"] == ["ok"] * 3
    assert all("per API discovery" in c["message"] for c in checks if c["check"] == "crd")
    [triggers] = [c for c in checks if c["check"] == "triggers"]
    assert triggers["status"] == "warn" and "(forbidden)" in triggers["message"]


def test_operator_role_store_and_bound_staging_pvc_pass(cluster: Cluster, kube: Kube, namespace: str,
                                                        service_account, kubelet, crds_installed: None,
                                                        tmp_path: Path) -> None:
    sa = service_account("operator")
    grant_operator_role(cluster, kube, namespace, "operator")
    bound_pvc(kube, namespace, "staging")
    create_trigger(kube, namespace, "resumer", {"resume": True})
    store = tmp_path / "sessions"
    store.mkdir(mode=0o700)
    store.chmod(0o700)
    env = {"PI_SESSIONS_DIR": str(store), "PI_DISPATCH_STAGING_CLAIM": "staging", "GITHUB_AUTH_SOURCE": "app"}
    result = doctor(sa.kubeconfig, namespace, **env)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"ok    rbac       {sa.username} may make all {len(REQUIRED_ACCESS)} requests the operator makes in " \
           f"{namespace}" in lines
    assert f"ok    store      {store} exists (0700)" in lines
    assert "ok    staging    PVC staging Bound" in lines
    assert [line for line in lines if not line.startswith("ok")][:1] == [
        "warn  gateway    jobs go out without a gateway: each job Pod holds the model keys and the forge token it "
        "uses, and reaches what the NetworkPolicy allows"], "every check passes; this deployment has no gateway"

    missing = doctor(sa.kubeconfig, namespace, **{**env, "PI_DISPATCH_STAGING_CLAIM": "no-such-claim"})
    assert missing.returncode == 1
    assert f"FAIL  staging    PVC no-such-claim does not exist in {namespace}" in missing.stdout.splitlines()


def test_in_cluster_run_as_helm_test_does_it(cluster: Cluster, kube: Kube, namespace: str, kubelet,
                                            crds_installed: None) -> None:
    """A Pod with the operator's ServiceAccount and env: in-cluster config, namespace from the token mount."""
    if os.geteuid() != 0:
        pytest.skip("the test kubelet mounts the ServiceAccount token at its in-cluster path only as root")
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "operator"}})
    grant_operator_role(cluster, kube, namespace, "operator")
    bound_pvc(kube, namespace, "staging")
    bound_pvc(kube, namespace, "store")
    create_trigger(kube, namespace, "resumer", {"resume": True})
    kube.create(pod_path(namespace), {"metadata": {"name": "doctor"}, "spec": {
        "restartPolicy": "Never", "serviceAccountName": "operator",
        "containers": [{"name": "doctor", "image": "ignored", "command": [sys.executable, "-m", "pidispatch", "doctor"],
                        "env": [{"name": "PI_SESSIONS_DIR", "value": "/var/lib/pi-dispatch/sessions"},
                                {"name": "PI_DISPATCH_STAGING_CLAIM", "value": "staging"},
                                {"name": "GITHUB_AUTH_SOURCE", "value": "app"}],
                        "volumeMounts": [{"name": "store", "mountPath": "/var/lib/pi-dispatch/sessions"}]}],
        "volumes": [{"name": "store", "persistentVolumeClaim": {"claimName": "store"}}]}})
    pod = wait_pod_phase(kube, namespace, "doctor", ("Succeeded", "Failed"), timeout=90)
    log = kubelet.pod_log(kube, namespace, "doctor", "doctor")
    assert pod["status"]["phase"] == "Succeeded", log
    lines = log.splitlines()
    assert f"ok    rbac       system:serviceaccount:{namespace}:operator may make all {len(REQUIRED_ACCESS)} " \
           f"requests the operator makes in {namespace}" in lines
    assert f"ok    triggers   1 Trigger in {namespace}, 1 arms resume" in lines, "namespace from the token mount"
    assert "ok    staging    PVC staging Bound" in lines
    # the test provisioner makes volumes 0777: the store line says so, as a warning with the fix
    store = lines.index("warn  store      /var/lib/pi-dispatch/sessions exists (0777): others can list its keys; "
                        "keep it 0700")
    assert lines[store + 1] == "                 fix: chmod 0700 /var/lib/pi-dispatch/sessions"


def test_the_gateway_line_says_whether_a_job_could_use_the_gateway(cluster: Cluster, kube: Kube, namespace: str,
                                                                  service_account, crds_installed: None,
                                                                  tmp_path: Path) -> None:
    """The gateway's line against a real gateway (the model path's TLS listener, testkit/gatewaykit.py) and the
    CA ConfigMap on the apiserver, as the operator's identity (the chart's Role: get on ConfigMaps with the
    gateway): it answers, then each thing a job would fail on is named."""
    sa = service_account("operator")
    grant_operator_role(cluster, kube, namespace, "operator")
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    kube.create(f"{rbac}/roles", {"metadata": {"name": "ledgers"},
                                  "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]})
    kube.create(f"{rbac}/rolebindings", {
        "metadata": {"name": "ledgers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ledgers"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}]})
    pki, other = make_pki(tmp_path / "pki", "gateway"), make_pki(tmp_path / "other", "other")
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    kube.create(configmaps, {"metadata": {"name": "gw-ca"}, "data": {"ca.crt": pki.ca.read_text()}})
    key = tmp_path / "gateway.key"
    key.write_bytes(b"k" * 48)
    with GatewayServer(pki, {}, StaticSecrets({})) as gateway:
        env = {"GITHUB_AUTH_SOURCE": "app", "PI_DISPATCH_GATEWAY_URL": gateway.url,
               "PI_DISPATCH_GATEWAY_PROXY": "http://127.0.0.1:3128", "PI_DISPATCH_GATEWAY_CA_CONFIGMAP": "gw-ca",
               "PI_DISPATCH_GATEWAY_KEY_FILE": str(key)}

        def line() -> list[str]:
            done = doctor(sa.kubeconfig, namespace, **env)
            return [row for row in done.stdout.splitlines() if row[6:17].strip() == "gateway"]

        wait_until("the gateway line passes (the Role in force)", lambda: line()[:1] == [
            f"ok    gateway    jobs go out through {gateway.url}: it answered over TLS verified with ConfigMap gw-ca"],
            timeout=30)
        kube.patch(f"{configmaps}/gw-ca", {"data": {"ca.crt": other.ca.read_text()}})
        [wrong] = line()
        assert wrong.startswith(f"FAIL  gateway    the gateway at {gateway.url} did not answer (its certificate "
                                "does not verify with the CA job Pods mount"), wrong
        key.write_bytes(b"short")
        kube.delete(f"{configmaps}/gw-ca")
        failed = line()
        assert failed[0] == (f"FAIL  gateway    the gateway key in {key} has 5 bytes; it needs at least 32 random "
                             "bytes (the chart makes one in its gateway Secret): the operator cannot sign "
                             "capabilities, so every job fails before its Pod starts"), failed
        assert failed[1] == ("FAIL  gateway    ConfigMap gw-ca is missing: job Pods mount it to verify the gateway, "
                             "so none can start"), failed
        key.write_bytes(b"k" * 48)
        kube.create(configmaps, {"metadata": {"name": "gw-ca"}, "data": {"ca.crt": pki.ca.read_text()}})
        url = gateway.url
    [down] = line()
    assert down.startswith(f"FAIL  gateway    the gateway at {url} did not answer ("), down
    assert down.endswith("every job's model, forge and proxy requests would fail"), down
