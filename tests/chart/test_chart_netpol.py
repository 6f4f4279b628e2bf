"""The job Pods' NetworkPolicy (issue 15, item 8; on by default since issue 40), rendered offline with the pinned helm.

Beside ``test_chart.py`` (whose helpers and ``helm`` fixture this uses). What is proven: on by default,
with every other option on too; it selects exactly the Pods the operator creates (a real job Pod manifest's
labels, not the operator's, the receiver's or the helm test Pod's), allows no ingress, and allows egress only
to DNS (UDP and TCP 53), the release's gateway Pods on 8443 and 3128, and the extra CIDRs on their ports
(none by default); every egress rule names its peers (an empty ``to`` would mean everywhere); values that
would make it useless or quietly open fail the install. ``e2e/test_netpol_realnode.py`` proves it enforced.
"""

from __future__ import annotations

from typing import Any

import pytest

from pidispatch.manifests.pod import PodInputs, job_pod
from testkit.chart import ALL_ON, CHART, FULLNAME, RECEIVER_ON, RELEASE, kinds, render, set_args, template

FORGE = {"name": "forge", "cidrs": ["140.82.112.0/20", "192.30.252.0/22"], "ports": [443]}
MODEL = {"name": "model", "cidrs": ["203.0.113.10/32", "2001:db8::/32"], "ports": [443, 8443]}
ON: dict[str, Any] = {"job.networkPolicy.egress": [FORGE, MODEL]}
GATEWAY_LABELS = {"app.kubernetes.io/name": "pi-dispatch", "app.kubernetes.io/instance": RELEASE,
                  "app.kubernetes.io/component": "gateway"}


def policy(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [np] = kinds(docs, "NetworkPolicy")
    return np


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector's meaning (matchLabels and the Exists/DoesNotExist/In/NotIn expressions)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {"Exists": key in labels, "DoesNotExist": key not in labels,
              "In": labels.get(key) in values, "NotIn": labels.get(key) not in values}[op]
        if not ok:
            return False
    return True


@pytest.mark.parametrize("values", [{}, {**ALL_ON, **RECEIVER_ON}], ids=["defaults", "every other option on"])
def test_on_by_default(helm: Any, values: dict[str, Any]) -> None:
    np = policy(render(helm, values))
    assert np["spec"]["ingress"] == [] and np["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_it_can_be_turned_off(helm: Any) -> None:
    assert kinds(render(helm, {"job.networkPolicy.enabled": False}), "NetworkPolicy") == []


def test_by_default_egress_is_dns_and_the_gateway_and_nothing_else(helm: Any) -> None:
    dns, gateway = policy(render(helm, {}))["spec"]["egress"]
    assert [p["port"] for p in dns["ports"]] == [53, 53]
    assert gateway == {"to": [{"podSelector": {"matchLabels": GATEWAY_LABELS}}],
                       "ports": [{"protocol": "TCP", "port": 8443}, {"protocol": "TCP", "port": 3128}]}
    assert not any("ipBlock" in peer for rule in (dns, gateway) for peer in rule["to"])


def test_it_selects_the_job_pods_and_nothing_the_chart_runs(helm: Any) -> None:
    docs = render(helm, {**ON, **RECEIVER_ON})
    np = policy(docs)
    assert np["metadata"]["name"] == f"{FULLNAME}-jobs"
    selector = np["spec"]["podSelector"]
    pod = job_pod(PodInputs(job_name="fix-7", job_uid="u-7", namespace="pi-ns", image="job:1",
                            command=["pidispatch", "runner"], env={}))
    assert selects(selector, pod["metadata"]["labels"]), "the operator's job Pods are selected"
    chart_pods = [d["spec"]["template"]["metadata"]["labels"] for d in docs if d["kind"] == "Deployment"]
    chart_pods += [d["metadata"]["labels"] for d in docs if d["kind"] == "Pod"]
    assert len(chart_pods) >= 3 and not any(selects(selector, labels) for labels in chart_pods)
    unlabelled = {k: v for k, v in pod["metadata"]["labels"].items() if k != "pi-dispatch.dev/job"}
    assert not selects(selector, unlabelled), "managed-by alone is not enough"


def test_no_ingress_and_egress_only_to_dns_and_the_listed_cidrs(helm: Any) -> None:
    spec = policy(render(helm, ON))["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    dns, gateway, *rest = spec["egress"]
    assert selects(gateway["to"][0]["podSelector"], GATEWAY_LABELS) and len(gateway["to"]) == 1
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert dns["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                          "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
    got = [([peer["ipBlock"]["cidr"] for peer in rule["to"]], [p["port"] for p in rule["ports"]]) for rule in rest]
    assert got == [(FORGE["cidrs"], [443]), (MODEL["cidrs"], [443, 8443])]
    for rule in spec["egress"]:
        assert rule["to"] and rule["ports"], "a rule without peers or ports would allow everything"
        assert all(set(peer) <= {"ipBlock", "namespaceSelector", "podSelector"} for peer in rule["to"])


def test_dns_by_address_only(helm: Any) -> None:
    values = {**ON, "job.networkPolicy.dns.namespaceSelector": None, "job.networkPolicy.dns.podSelector": None,
              "job.networkPolicy.dns.cidrs": ["169.254.20.10/32"]}
    dns = policy(render(helm, values))["spec"]["egress"][0]
    assert dns["to"] == [{"ipBlock": {"cidr": "169.254.20.10/32"}}]


def test_helm_lint_passes_with_the_policy_on(helm: Any) -> None:
    result = helm("lint", "--strict", str(CHART), *set_args(ON))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("values", "words"), [
    ({**ON, "job.networkPolicy.dns.namespaceSelector": None, "job.networkPolicy.dns.podSelector": None},
     "job.networkPolicy.dns"),
    ({**ON, "job.networkPolicy.egress": [{"cidrs": ["0.0.0.0/0"], "ports": [443]}]}, "allows every address"),
    ({**ON, "job.networkPolicy.egress": [{"cidrs": ["::/0"], "ports": [443]}]}, "allows every address"),
], ids=["on without DNS", "IPv4 everywhere", "IPv6 everywhere"])
def test_a_useless_or_open_policy_fails_the_install(helm: Any, values: dict[str, Any], words: str) -> None:
    result = template(helm, values)
    assert result.returncode != 0, "rendered"
    assert words in result.stderr, result.stderr


@pytest.mark.parametrize(("entry", "field"), [
    ({"cidrs": ["140.82.112.0"], "ports": [443]}, "cidrs"),
    ({"cidrs": ["github.com"], "ports": [443]}, "cidrs"),
    ({"cidrs": ["140.82.112.0/33"], "ports": [443]}, "cidrs"),
    ({"cidrs": [], "ports": [443]}, "cidrs"),
    ({"cidrs": ["140.82.112.0/20"], "ports": []}, "ports"),
    ({"cidrs": ["140.82.112.0/20"], "ports": [0]}, "ports"),
    ({"cidrs": ["140.82.112.0/20"], "ports": [65536]}, "ports"),
    ({"cidrs": ["140.82.112.0/20"], "ports": ["https"]}, "ports"),
    ({"cidrs": ["140.82.112.0/20"]}, "ports"),
    ({"cidrs": ["140.82.112.0/20"], "ports": [443], "to": [{}]}, "egress"),
], ids=["no prefix length", "a host name", "prefix too long", "no CIDR", "no port", "port 0", "port 65536",
        "a named port", "ports missing", "an unknown key"])
def test_the_schema_refuses_bad_egress_entries(helm: Any, entry: dict[str, Any], field: str) -> None:
    result = template(helm, {**ON, "job.networkPolicy.egress": [entry]})
    assert result.returncode != 0 and "schema" in result.stderr and field in result.stderr, result.stderr


@pytest.mark.parametrize("ports", [[], [0], ["http"]], ids=["none", "port 0", "a named port"])
def test_the_schema_refuses_bad_gateway_ports(helm: Any, ports: list[Any]) -> None:
    result = template(helm, {"job.networkPolicy.gateway.ports": ports})
    assert result.returncode != 0 and "schema" in result.stderr and "ports" in result.stderr, result.stderr
