"""The gateway as a chart component (``gateway.enabled``, docs/gateway.md#deploying), rendered offline with the
pinned helm.

Its Deployment (the operator's image, the wire's ports, probes on the metrics port, spread over nodes), the
Service job Pods reach (443 and 3128 only, ClientIP affinity), the budget that keeps one replica up, RBAC that is
exactly what the gateway needs in the release namespace and nothing cluster-wide, the Secret (a 48-byte key and a
serving certificate that names the host job Pods connect to, signed by the CA they mount), and the operator's side:
the key alone mounted, the gateway's addresses in its env, a ledger's read. That the Secret is kept across an
upgrade needs ``lookup`` on a real apiserver: e2e/test_chart_gateway.py.
"""

from __future__ import annotations

import base64
import json
import posixpath
from typing import Any
from urllib.parse import urlsplit

import pytest
from cryptography import x509

from pidispatch.contract import gateway_wire as protocol
from pidispatch.settings import gatewayserver
from testkit.chart import (
    FULLNAME,
    GATEWAY,
    NAMESPACE,
    SERVICE_MONITOR_API,
    env_values,
    gateway_objects,
    kinds,
    one,
    operator_container,
    render,
    template,
)

GATEWAY_OFF: dict[str, Any] = {"gateway.enabled": False}


def _rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def _pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    return spec


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [container] = _pod(docs)["containers"]
    assert container["name"] == "gateway"
    return container


def _mounted_from(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str, str]:
    """The (kind, name, key) a file path of ``container`` comes from."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        if posixpath.dirname(path) == mount["mountPath"]:
            volume = volumes[mount["name"]]
            kind, source = ("Secret", volume["secret"]) if "secret" in volume else ("ConfigMap", volume["configMap"])
            [key] = [i["key"] for i in source["items"] if i["path"] == posixpath.basename(path)]
            return kind, source.get("secretName") or source["name"], key
    raise AssertionError(f"{path} is not mounted")


# -- the Deployment ------------------------------------------------------------------------------------------------
def test_the_gateway_runs_by_default_two_replicas_of_the_operators_image(helm: Any) -> None:
    docs = render(helm)
    deployment = one(docs, "Deployment", GATEWAY)
    assert deployment["spec"]["replicas"] == 2
    container = _container(docs)
    assert container["command"] == ["pidispatch", "gateway"]
    assert container["image"] == operator_container(docs)["image"], "one image: the operator's"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "https": protocol.HTTPS_PORT, "proxy": protocol.PROXY_PORT, "metrics": protocol.METRICS_PORT}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert "scheme" not in container["readinessProbe"]["httpGet"], "plain HTTP on the metrics port"
    assert _pod(docs)["serviceAccountName"] == GATEWAY
    assert one(render(helm, {"gateway.replicas": 3}), "Deployment", GATEWAY)["spec"]["replicas"] == 3


def test_gateway_env_names_its_files_and_its_lists_as_json(helm: Any) -> None:
    docs = render(helm, {"gateway.egress.hosts": ["registry.npmjs.org", "*.pypi.org", "mirror.example:8443"],
                         "gateway.egress.deniedNetworks": ["100.64.0.0/10"]})
    container, pod = _container(docs), _pod(docs)
    env = env_values(container)
    assert env["POD_NAME"] and env[gatewayserver.NAMESPACE] == NAMESPACE
    by_name = {v["name"]: v for v in container["env"]}
    assert by_name["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert json.loads(env[gatewayserver.EGRESS_HOSTS]) == ["registry.npmjs.org", "*.pypi.org", "mirror.example:8443"]
    assert json.loads(env[gatewayserver.DENIED_NETWORKS]) == ["100.64.0.0/10"]
    assert _mounted_from(pod, container, env[gatewayserver.GATEWAY_KEY_FILE]) == ("Secret", GATEWAY, "key")
    assert _mounted_from(pod, container, env[gatewayserver.CERT_FILE]) == ("Secret", GATEWAY, "tls.crt")
    assert _mounted_from(pod, container, env[gatewayserver.KEY_FILE]) == ("Secret", GATEWAY, "tls.key")
    assert gatewayserver.MODELS_FILE not in env, "no models ConfigMap: pi's own providers only"
    defaults = env_values(_container(render(helm)))
    assert defaults[gatewayserver.EGRESS_HOSTS] == "[]"
    assert set(defaults) == {gatewayserver.POD_NAME, gatewayserver.NAMESPACE, gatewayserver.GATEWAY_KEY_FILE,
                             gatewayserver.CERT_FILE, gatewayserver.KEY_FILE, gatewayserver.EGRESS_HOSTS}


def test_every_name_the_chart_gives_the_gateway_is_one_it_reads(helm: Any) -> None:
    """The chart and settings/gatewayserver.py spell each name once and alike: the gateway refuses to start
    without its files, so a misspelt name would fail its rollout, not a test, without this."""
    docs = render(helm, {"job.modelsConfigMap": "pi-models", "github.caBundle.configMap": "forge-ca",
                         "gateway.egress.deniedNetworks": ["100.64.0.0/10"]})
    env = env_values(_container(docs))
    assert set(env) <= set(gatewayserver.ENV_NAMES), set(env) - set(gatewayserver.ENV_NAMES)
    settings = gatewayserver.GatewaySettings.from_env(env)
    assert settings.namespace == NAMESPACE and settings.denied_networks == ("100.64.0.0/10",)
    assert settings.forge_ca_file and settings.models_file


def test_the_models_configmap_reaches_the_gateway_too(helm: Any) -> None:
    docs = render(helm, {"job.modelsConfigMap": "pi-models"})
    container = _container(docs)
    path = env_values(container)[gatewayserver.MODELS_FILE]
    assert _mounted_from(_pod(docs), container, path) == ("ConfigMap", "pi-models", "models.json")


def test_a_forge_behind_a_private_ca_is_trusted_by_the_gateway_as_by_the_operator(helm: Any) -> None:
    docs = render(helm, {"github.caBundle.configMap": "forge-ca"})
    container, operator = _container(docs), operator_container(docs)
    path = env_values(container)[gatewayserver.FORGE_CA_FILE]
    assert path == env_values(operator)["GITHUB_CA_BUNDLE_FILE"], "one bundle, one place, for both"
    assert _mounted_from(_pod(docs), container, path) == ("ConfigMap", "forge-ca", "ca.crt")
    assert gatewayserver.FORGE_CA_FILE not in env_values(_container(render(helm)))


def test_the_gateway_pod_is_restricted_and_mounts_no_claim(helm: Any) -> None:
    docs = render(helm, {"sessions.enabled": True, "github.authSource": "app"})
    pod, container = _pod(docs), _container(docs)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
                                            "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod.get("hostNetwork") is not True
    assert {v["name"] for v in pod["volumes"]} == {"tmp", "gateway-key", "gateway-tls"}
    assert "persistentVolumeClaim" not in json.dumps(pod), "the store is the operator's alone"
    assert container["resources"]["limits"]["memory"] == "512Mi"


def test_replicas_spread_over_nodes_and_the_chart_placement_applies(helm: Any) -> None:
    docs = render(helm, {"nodeSelector": {"pool": "system"}, "tolerations": [{"key": "system", "operator": "Exists"}],
                         "gateway.affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": [{"matchExpressions": [
                                 {"key": "zone", "operator": "In", "values": ["a"]}]}]}}}})
    pod = _pod(docs)
    selector = one(docs, "Deployment", GATEWAY)["spec"]["selector"]["matchLabels"]
    [spread] = pod["topologySpreadConstraints"]
    assert spread == {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                      "labelSelector": {"matchLabels": selector}}
    [anti] = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname",
                                       "labelSelector": {"matchLabels": selector}}
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["podAntiAffinity"], \
        "preferred: one node still runs both"
    assert "nodeAffinity" in pod["affinity"], "gateway.affinity is added to the spread"
    assert pod["nodeSelector"] == {"pool": "system"} and pod["tolerations"] == [{"key": "system",
                                                                                 "operator": "Exists"}]
    assert selector["app.kubernetes.io/component"] == "gateway"
    operator_labels = one(docs, "Deployment", FULLNAME)["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= operator_labels.items(), "the gateway's selector never picks the operator"


# -- the Service, the budget, the monitor ---------------------------------------------------------------------------
def test_the_service_exposes_https_and_the_proxy_only_with_client_ip_affinity(helm: Any) -> None:
    docs = render(helm)
    service = one(docs, "Service", GATEWAY)
    assert service["spec"]["type"] == "ClusterIP" and service["spec"]["sessionAffinity"] == "ClientIP"
    assert service["spec"]["ports"] == [
        {"name": "https", "port": protocol.SERVICE_PORT, "targetPort": "https", "protocol": "TCP"},
        {"name": "proxy", "port": protocol.PROXY_PORT, "targetPort": "proxy", "protocol": "TCP"}], \
        "never the metrics port: job Pods must not reach /metrics"
    assert service["spec"]["selector"] == one(docs, "Deployment", GATEWAY)["spec"]["selector"]["matchLabels"]
    assert [s["metadata"]["name"] for s in kinds(gateway_objects(docs), "Service")] == [GATEWAY], \
        "no metrics Service without a ServiceMonitor"


def test_the_service_monitor_scrapes_a_metrics_service_of_its_own(helm: Any) -> None:
    docs = render(helm, {"metrics.serviceMonitor.enabled": True}, "--api-versions", SERVICE_MONITOR_API)
    monitor = one(docs, "ServiceMonitor", GATEWAY)
    metrics = one(docs, "Service", f"{GATEWAY}-metrics")
    assert metrics["spec"]["ports"] == [{"name": "metrics", "port": protocol.METRICS_PORT, "targetPort": "metrics",
                                         "protocol": "TCP"}]
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    selector = monitor["spec"]["selector"]["matchLabels"].items()
    assert selector <= metrics["metadata"]["labels"].items()
    assert not selector <= one(docs, "Service", GATEWAY)["metadata"]["labels"].items(), "not the jobs' Service"
    off = render(helm, {"metrics.serviceMonitor.enabled": True, "gateway.serviceMonitor.enabled": False},
                 "--api-versions", SERVICE_MONITOR_API)
    assert [m["metadata"]["name"] for m in kinds(off, "ServiceMonitor")] == [FULLNAME]


def test_a_budget_keeps_one_gateway_up_only_with_more_than_one(helm: Any) -> None:
    docs = render(helm)
    pdb = one(docs, "PodDisruptionBudget", GATEWAY)
    assert pdb["spec"] == {"minAvailable": 1, "selector": {
        "matchLabels": one(docs, "Deployment", GATEWAY)["spec"]["selector"]["matchLabels"]}}
    assert kinds(gateway_objects(render(helm, {"gateway.replicas": 1})), "PodDisruptionBudget") == [], \
        "one replica: minAvailable 1 would block every drain"
    assert kinds(gateway_objects(render(helm, {"gateway.podDisruptionBudget.enabled": False})),
                 "PodDisruptionBudget") == []


# -- RBAC -----------------------------------------------------------------------------------------------------------
def test_gateway_rbac_is_exactly_secrets_get_ledgers_and_jobs_get_in_its_namespace(helm: Any) -> None:
    docs = render(helm)
    role = one(docs, "Role", GATEWAY)
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, f"no resourceNames/nonResourceURLs: {rule}"
    assert _rules(role) == {("", "secrets", "get"), ("", "configmaps", "get"), ("", "configmaps", "create"),
                            ("", "configmaps", "patch"), ("pi-dispatch.dev", "jobs", "get")}, \
        "get Secrets by name (never list or watch), its ledgers, a Job to own the ledger by"
    binding = one(docs, "RoleBinding", GATEWAY)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": GATEWAY, "namespace": NAMESPACE}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": GATEWAY}
    assert one(docs, "ServiceAccount", GATEWAY)
    assert not kinds(gateway_objects(docs), "ClusterRole") and not kinds(gateway_objects(docs), "ClusterRoleBinding")
    for binding in kinds(docs, "ClusterRoleBinding"):
        assert GATEWAY not in [s["name"] for s in binding["subjects"]], "nothing cluster-wide for the gateway"


def test_the_operator_may_read_ledgers_only_with_the_gateway(helm: Any) -> None:
    on, off = _rules(one(render(helm), "Role", FULLNAME)), _rules(one(render(helm, GATEWAY_OFF), "Role", FULLNAME))
    assert on - off == {("", "configmaps", "get")}, "a Job's ledger, read when it ends; never written"
    assert {g for g in on if g[1] == "secrets"} == {("", "secrets", "create"), ("", "secrets", "delete")}, \
        "the per-job capability Secret is created and deleted like the token's, never read"


# -- the Secret and the CA ------------------------------------------------------------------------------------------
def _leaf_and_ca(docs: list[dict[str, Any]]) -> tuple[x509.Certificate, x509.Certificate]:
    secret = one(docs, "Secret", GATEWAY)
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca_pem = one(docs, "ConfigMap", f"{GATEWAY}-ca")["data"]["ca.crt"]
    assert ca_pem.strip() == base64.b64decode(secret["data"]["ca.crt"]).decode().strip()
    return leaf, x509.load_pem_x509_certificate(ca_pem.encode())


def test_the_key_is_48_random_bytes_of_its_own(helm: Any) -> None:
    first, second = one(render(helm), "Secret", GATEWAY), one(render(helm), "Secret", GATEWAY)
    key = base64.b64decode(first["data"]["key"])
    assert len(key) == 48
    assert key != base64.b64decode(second["data"]["key"]), "made at install, never a constant of the chart"


@pytest.mark.parametrize("values", [
    {},
    {"gateway.url": "https://localhost:18443", "gateway.extraDNSNames": ["localhost"]},
    {"gateway.url": "https://10.0.0.7:8443", "gateway.extraDNSNames": ["10.0.0.7"]},
], ids=["the Service's name", "a URL of its own, named in the certificate", "an address, in the certificate"])
def test_the_certificate_names_the_host_job_pods_connect_to_and_the_mounted_ca_signed_it(
        helm: Any, values: dict[str, Any]) -> None:
    docs = render(helm, values)
    leaf, ca = _leaf_and_ca(docs)
    host = urlsplit(env_values(operator_container(docs))["PI_DISPATCH_GATEWAY_URL"]).hostname
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert host in names.get_values_for_type(x509.DNSName) + [str(a) for a in names.get_values_for_type(
        x509.IPAddress)], names
    leaf.verify_directly_issued_by(ca)  # raises when the CA job Pods trust did not sign it


# -- the operator's side --------------------------------------------------------------------------------------------
def test_the_operator_gets_the_gateways_addresses_and_mounts_its_key_alone(helm: Any) -> None:
    docs = render(helm)
    operator = operator_container(docs)
    env = env_values(operator)
    assert env["PI_DISPATCH_GATEWAY_URL"] == f"https://{GATEWAY}.{NAMESPACE}.svc", "no port: 443, for gh"
    assert env["PI_DISPATCH_GATEWAY_PROXY"] == f"http://{GATEWAY}.{NAMESPACE}.svc:{protocol.PROXY_PORT}"
    assert env["PI_DISPATCH_GATEWAY_CA_CONFIGMAP"] == f"{GATEWAY}-ca"
    assert one(docs, "ConfigMap", env["PI_DISPATCH_GATEWAY_CA_CONFIGMAP"])["data"]["ca.crt"]
    assert "PI_DISPATCH_GATEWAY_DEFAULT_MAX_TOKENS" not in env, "null: no budget by default"
    pod = one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    assert _mounted_from(pod, operator, env["PI_DISPATCH_GATEWAY_KEY_FILE"]) == ("Secret", GATEWAY, "key")
    from_gateway = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == GATEWAY]
    assert [i["key"] for v in from_gateway for i in v["secret"]["items"]] == ["key"], "never the TLS key"
    budget = env_values(operator_container(render(helm, {"gateway.defaultMaxTokens": 2000000})))
    assert budget["PI_DISPATCH_GATEWAY_DEFAULT_MAX_TOKENS"] == "2000000"


def test_gateway_off_renders_nothing_of_it(helm: Any) -> None:
    docs = render(helm, GATEWAY_OFF)
    assert gateway_objects(docs) == []
    assert not [d for d in docs if d["metadata"]["name"].startswith(GATEWAY)]
    operator = operator_container(docs)
    assert not [n for n in env_values(operator) if "GATEWAY" in n]
    assert "gateway-key" not in {m["name"] for m in operator["volumeMounts"]}


def _without_randomness(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The render with the Secret's and the CA's data (new in every render) left out."""
    return [{**d, "data": None} if (d["kind"], d["metadata"]["name"]) in (("Secret", GATEWAY),
                                                                       ("ConfigMap", f"{GATEWAY}-ca")) else d
            for d in docs]


@pytest.mark.parametrize("values", [{}, {"job.modelsConfigMap": "pi-models", "metrics.serviceMonitor.enabled": True}],
                         ids=["defaults", "models and a monitor"])
def test_a_release_made_before_the_gateway_upgrades_to_the_same_gateway(helm: Any, values: dict[str, Any]) -> None:
    """`helm upgrade --reuse-values` (docs/upgrading.md) from a release without `gateway` in its values renders with
    no `gateway` at all: the templates' defaults must be values.yaml's (e2e/test_chart_gateway.py runs the upgrade)."""
    extra = ("--api-versions", SERVICE_MONITOR_API)
    fresh = render(helm, values, *extra)
    reused = render(helm, {**values, "gateway": None}, *extra)
    assert gateway_objects(reused), "the gateway is on, as in a fresh install"
    assert _without_randomness(reused) == _without_randomness(fresh)


# -- values the schema refuses --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("values", "where"), [
    ({"gateway.egress.hosts": ["https://pypi.org"]}, "hosts"),
    ({"gateway.egress.hosts": ["pypi.org/simple"]}, "hosts"),
    ({"gateway.egress.deniedNetworks": ["10.0.0.0"]}, "deniedNetworks"),
    ({"gateway.defaultMaxTokens": 0}, "defaultMaxTokens"),
    ({"gateway.defaultMaxTokens": "1M"}, "defaultMaxTokens"),
    ({"gateway.url": "http://gw.example"}, "url"),
    ({"gateway.replicas": -1}, "replicas"),
    ({"gateway.port": 8443}, "port"),
], ids=["a scheme in a host", "a path in a host", "a network without its length", "a zero budget", "a budget as text",
        "a URL without TLS", "negative replicas", "an unknown key"])
def test_the_schema_refuses(helm: Any, values: dict[str, Any], where: str) -> None:
    result = template(helm, values)
    assert result.returncode != 0 and where in result.stderr, result.stderr
