"""The chart in ``sessions.staging.mode: transfer`` (issue 33 item 2), rendered offline with the pinned helm.

What the operator needs (its env, parsed by ``OperatorSettings``; the files it reads, mounted from the right
Secrets; its port), what job Pods may do (the NetworkPolicy's egress to that port; the Pod policy's per-job
Secret and CA ConfigMap, and no claim), and that TLS verifies: the serving certificate the chart makes names
the host of the URL job Pods are given and is signed by the CA job Pods mount.
"""

from __future__ import annotations

import base64
import posixpath
from typing import Any
from urllib.parse import urlsplit

import pytest
from cryptography import x509

from pidispatch.settings import OperatorSettings
from pidispatch.settings.staging import TransferLimits
from testkit.chart import (
    FULLNAME,
    NAMESPACE,
    POD_POLICY,
    STORE_ON,
    env_values,
    one,
    operator_container,
    render,
    template,
)

TRANSFER_ON: dict[str, Any] = {**STORE_ON, "sessions.staging.mode": "transfer"}
TRANSFER = f"{FULLNAME}-transfer"
NETPOL_ON: dict[str, Any] = {"job.networkPolicy.enabled": True,
                             "job.networkPolicy.egress": [{"name": "forge", "cidrs": ["192.0.2.0/24"], "ports": [443]}]}


def _settings(docs: list[dict[str, Any]]) -> OperatorSettings:
    return OperatorSettings.from_env(env_values(operator_container(docs)))


def _mounted_from(docs: list[dict[str, Any]], path: str) -> tuple[str, str]:
    """The (Secret, key) a file path of the operator container comes from."""
    pod = one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in operator_container(docs)["volumeMounts"]:
        if posixpath.dirname(path) == mount["mountPath"]:
            secret = volumes[mount["name"]]["secret"]
            [key] = [i["key"] for i in secret["items"] if i["path"] == posixpath.basename(path)]
            return secret["secretName"], key
    raise AssertionError(f"{path} is not mounted")


def test_transfer_mode_reaches_the_operator_settings_with_every_file_mounted(helm: Any) -> None:
    docs = render(helm, TRANSFER_ON)
    settings = _settings(docs)
    transfer = settings.staging.transfer
    assert settings.staging.mode == "transfer" and transfer is not None
    assert transfer.base_url == f"https://{TRANSFER}.{NAMESPACE}.svc:8443"
    assert transfer.port == 8443 and transfer.max_bytes == 33554432
    assert transfer.limits == TransferLimits(max_connections=256, head_seconds=10, idle_seconds=15, body_seconds=300)
    limited = _settings(render(helm, {**TRANSFER_ON, "sessions.staging.transfer.maxConnections": 64,
                                      "sessions.staging.transfer.bodySeconds": 900})).staging.transfer
    assert limited is not None and (limited.limits.max_connections, limited.limits.body_seconds) == (64, 900)
    assert transfer.ca_configmap == f"{TRANSFER}-ca"
    assert _mounted_from(docs, transfer.token_key_file) == (TRANSFER, "key")
    assert _mounted_from(docs, transfer.cert_file) == (TRANSFER, "tls.crt")
    assert _mounted_from(docs, transfer.key_file) == (TRANSFER, "tls.key")
    ports = {p["name"]: p["containerPort"] for p in operator_container(docs)["ports"]}
    assert ports["transfer"] == 8443
    service = one(docs, "Service", TRANSFER)
    assert service["spec"]["ports"] == [{"name": "transfer", "port": 8443, "targetPort": "transfer", "protocol": "TCP"}]
    assert "PI_DISPATCH_STAGING_COLOCATE" not in env_values(operator_container(docs)), \
        "no job Pod mounts the claim: nothing to co-locate"


def test_mount_mode_renders_nothing_of_transfer(helm: Any) -> None:
    docs = render(helm, STORE_ON)
    assert _settings(docs).staging.transfer is None
    assert not [d for d in docs if d["metadata"]["name"].startswith(TRANSFER)]
    assert "transfer" not in {p["name"] for p in operator_container(docs).get("ports", [])}


def _leaf_and_ca(docs: list[dict[str, Any]]) -> tuple[x509.Certificate, x509.Certificate]:
    secret = one(docs, "Secret", TRANSFER)
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(one(docs, "ConfigMap", f"{TRANSFER}-ca")["data"]["ca.crt"].encode())
    return leaf, ca


@pytest.mark.parametrize("values", [
    {},
    {"sessions.staging.transfer.url": "https://localhost:18443",
     "sessions.staging.transfer.extraDNSNames": ["localhost"]},
], ids=["the Service's name", "a URL of its own, named in the certificate"])
def test_the_certificate_names_the_host_job_pods_connect_to_and_the_mounted_ca_signed_it(
        helm: Any, values: dict[str, Any]) -> None:
    docs = render(helm, {**TRANSFER_ON, **values})
    leaf, ca = _leaf_and_ca(docs)
    host = urlsplit(_settings(docs).staging.transfer.base_url).hostname  # type: ignore[union-attr]
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert host in names.get_values_for_type(x509.DNSName), names
    assert leaf.issuer == ca.subject
    leaf.verify_directly_issued_by(ca)  # raises when the CA job Pods trust did not sign it


def test_a_url_outside_https_is_refused_by_the_schema(helm: Any) -> None:
    result = template(helm, {**TRANSFER_ON, "sessions.staging.transfer.url": "http://localhost:18443"})
    assert result.returncode != 0 and "url" in result.stderr, result.stderr


def test_job_pods_may_reach_the_transfer_port_of_the_operator_only(helm: Any) -> None:
    docs = render(helm, {**TRANSFER_ON, **NETPOL_ON})
    policy = one(docs, "NetworkPolicy", f"{FULLNAME}-jobs")
    operator_labels = one(docs, "Deployment", FULLNAME)["spec"]["selector"]["matchLabels"]
    [rule] = [r for r in policy["spec"]["egress"] if any("podSelector" in t for t in r["to"])
              and r["ports"] == [{"protocol": "TCP", "port": 8443}]]
    assert rule["to"] == [{"podSelector": {"matchLabels": operator_labels}}]
    mount = render(helm, {**STORE_ON, **NETPOL_ON})
    assert not [r for r in one(mount, "NetworkPolicy", f"{FULLNAME}-jobs")["spec"]["egress"]
                if r["ports"] == [{"protocol": "TCP", "port": 8443}]], "mount mode opens no transfer port"


def test_the_pod_policy_allows_the_jobs_own_transfer_secret_and_the_ca_but_no_claim(helm: Any) -> None:
    docs = render(helm, {**TRANSFER_ON, "gateway.enabled": False})  # the gateway adds its own (test_chart_job_policy)
    policy = one(docs, "ValidatingAdmissionPolicy", POD_POLICY)
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["secrets"] == ("[object.metadata.name + '-token-' + variables.job, "
                                    "object.metadata.name + '-transfer-' + variables.job] + []")
    assert variables["configMaps"] == f'["{TRANSFER}-ca"]'
    volumes_rule = next(v["expression"] for v in policy["spec"]["validations"] if "claimName ==" in v["expression"])
    assert "claimName == ''" in volumes_rule, "in transfer mode job Pods mount no claim at all"


def test_cert_manager_makes_the_certificate_and_names_the_ca_configmap(helm: Any) -> None:
    values = {**TRANSFER_ON, "sessions.staging.transfer.certManager.issuer": "ca-issuer",
              "sessions.staging.transfer.certManager.caConfigMap": "cluster-ca"}
    docs = render(helm, values)
    certificate = one(docs, "Certificate", TRANSFER)
    settings = _settings(docs)
    assert settings.staging.transfer is not None and settings.staging.transfer.ca_configmap == "cluster-ca"
    assert _mounted_from(docs, settings.staging.transfer.cert_file) == (certificate["spec"]["secretName"], "tls.crt")
    assert _mounted_from(docs, settings.staging.transfer.token_key_file) == (TRANSFER, "key")
    assert urlsplit(settings.staging.transfer.base_url).hostname in certificate["spec"]["dnsNames"]
    missing = template(helm, {**TRANSFER_ON, "sessions.staging.transfer.certManager.issuer": "ca-issuer"})
    assert missing.returncode != 0 and "caConfigMap" in missing.stderr
