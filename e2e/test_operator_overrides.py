"""A Trigger's Pod overrides on the local control plane (issue 42 item 7; docs/nodes.md#pod-overrides).

The chart lists what Triggers may ask for (``jobPodPolicy.triggerEnv``, ``configMaps``, ``priorityClasses``,
``maxResources``); a Trigger within the lists gets its env, resources, priority class, affinity and ConfigMap on
its job Pod, past the apiserver's ValidatingAdmissionPolicy, and the job reads them; a Trigger asking for more is
not Ready (``OverrideNotAllowed``) and its Job is refused before any Pod.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import Release, base_values, installed, merge
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
PRIORITY = "pi-overrides-high"
RULES = "lint-rules\n"
# Preferred only: the one test kubelet can always take it.
AFFINITY = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                       "labelSelector": {"matchLabels": {"team": "a"}}}}]}}


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet: Any) -> Iterator[Release]:
    values = merge(base_values(), {"jobPodPolicy": {"triggerEnv": ["LOG_LEVEL"], "configMaps": ["lint"],
                                                    "priorityClasses": [PRIORITY],
                                                    "maxResources": {"cpu": "2", "memory": "2Gi"}}})
    if kube.get_or_none(f"{PRIORITY_CLASSES}/{PRIORITY}") is None:
        kube.create(PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                       "metadata": {"name": PRIORITY}, "value": 1000})
    try:
        with installed(cluster, kube, "overrides", values) as r:
            yield r
    finally:
        kube.delete_ignore_missing(f"{PRIORITY_CLASSES}/{PRIORITY}")


def ready(r: Release, name: str) -> dict[str, Any] | None:
    return r.condition(r.get("triggers", name), "Ready")


def test_a_triggers_env_resources_priority_affinity_and_configmap_reach_its_job_pod(release: Release) -> None:
    r = release
    r.kube.create(f"/api/v1/namespaces/{r.ns}/configmaps", {"metadata": {"name": "lint"}, "data": {"rules": RULES}})
    r.trigger("tuned", resume=False, env=[{"name": "LOG_LEVEL", "value": "debug"}],
              resources={"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}},
              priorityClassName=PRIORITY, volumes=[{"name": "lint", "configMap": "lint"}], affinity=AFFINITY)
    job = r.run("tuned-1", trigger="tuned", issue=901, comment="@pi env-sha=LOG_LEVEL file-sha=/mnt/lint/rules",
                timeout=120)
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    [pod] = r.pods_of("tuned-1")
    spec = pod["spec"]
    [c] = spec["containers"]
    assert {"name": "LOG_LEVEL", "value": "debug"} in c["env"]
    assert c["resources"]["limits"]["cpu"] == "2" and c["resources"]["limits"]["memory"] == "1Gi"
    assert c["resources"]["requests"]["cpu"] == "100m"
    assert spec["priorityClassName"] == PRIORITY and spec["priority"] == 1000
    assert spec["affinity"] == AFFINITY, "no deployment affinity, no session: the Trigger's as given"
    assert {"name": "trigger-lint", "mountPath": "/mnt/lint", "readOnly": True} in c["volumeMounts"]
    assert {"name": "trigger-lint", "configMap": {"name": "lint", "defaultMode": 0o444}} in spec["volumes"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False and c["securityContext"]["runAsNonRoot"]
    log = r.pod_log(pod["metadata"]["name"])
    assert f"env-sha LOG_LEVEL sha256:{hashlib.sha256(b'debug').hexdigest()}" in log, log
    assert f"file-sha /mnt/lint/rules sha256:{hashlib.sha256(RULES.encode()).hexdigest()}" in log, log


@pytest.mark.parametrize("name, run, said", [
    ("greedy", {"resources": {"limits": {"memory": "4Gi"}}},
     "run.resources.limits.memory 4Gi is above the job Pod policy's ceiling (jobPodPolicy.maxResources.memory: 2Gi)"),
    ("unlisted-env", {"env": [{"name": "OTHER", "value": "x"}]}, "jobPodPolicy.triggerEnv: LOG_LEVEL"),
    ("unlisted-cm", {"volumes": [{"name": "c", "configMap": "someone-elses"}]}, "jobPodPolicy.configMaps: lint"),
    ("unlisted-pc", {"priorityClassName": "top"}, f"jobPodPolicy.priorityClasses: {PRIORITY}"),
])
def test_a_trigger_asking_for_more_than_the_policy_is_not_ready_and_its_job_is_refused(
        release: Release, name: str, run: dict[str, Any], said: str) -> None:
    r = release
    r.trigger(name, resume=False, **run)
    condition = wait_until(f"Trigger {name} refused", lambda: (c := ready(r, name)) is not None and
                           c["status"] == "False" and c, timeout=60)
    assert condition["reason"] == "OverrideNotAllowed", condition
    assert said in condition["message"], condition["message"]
    refused = r.run(f"{name}-1", trigger=name, issue=902, timeout=60)
    assert (refused["status"]["phase"], refused["status"]["reason"]) == ("Refused", "trigger-not-ready"), \
        refused["status"]
    assert r.pods_of(f"{name}-1") == [], "refused before any Pod"


def test_a_contract_env_name_is_refused_as_an_invalid_spec(release: Release) -> None:
    """The CRD's schema takes any name; the operator refuses the contract's own (Ready False, InvalidSpec)."""
    r = release
    r.trigger("hijack", resume=False, env=[{"name": "HTTPS_PROXY", "value": "http://elsewhere:3128"}])
    condition = wait_until("Trigger hijack refused", lambda: (c := ready(r, "hijack")) is not None and
                           c["status"] == "False" and c, timeout=60)
    assert condition["reason"] == "InvalidSpec", condition
    assert "run.env: HTTPS_PROXY is set by the operator or the job's contract" in condition["message"]
