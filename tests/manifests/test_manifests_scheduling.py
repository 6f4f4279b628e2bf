"""Where a job Pod may run (manifests/scheduling.py): the cluster's rules, a Trigger's node pool, and the
co-location a ReadWriteOnce staging claim needs, merged into the Pod the operator creates."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pidispatch.manifests.pod import PodInputs, job_pod
from pidispatch.manifests.scheduling import HOSTNAME_TOPOLOGY
from pidispatch.settings.scheduling import Scheduling

BASE = PodInputs(job_name="delivery-1234", job_uid="u-1", namespace="ns", image="pi-job:0.73.1",
                 command=["pidispatch", "runner"], staging_claim="staging")
MOUNTED = replace(BASE, session_subpath="u-1/session")
OPERATOR = {"app.kubernetes.io/name": "pi-dispatch", "app.kubernetes.io/instance": "rel",
            "app.kubernetes.io/component": "operator"}
GPU_POOL = Scheduling(
    node_selector={"pool": "agents", "kubernetes.io/arch": "amd64"},
    tolerations=[{"key": "agents", "operator": "Exists", "effect": "NoSchedule"}],
    affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]}}]}},
    image_pull_secrets=["registry-creds"], priority_class_name="agents-low", runtime_class_name="gvisor",
    topology_spread_constraints=[{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                  "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"a": "b"}}}],
    pod_security_context={"runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000]})

SCHEDULING_FIELDS = ("nodeSelector", "tolerations", "affinity", "imagePullSecrets", "priorityClassName",
                     "runtimeClassName", "topologySpreadConstraints")


def spec(inputs: PodInputs) -> dict[str, Any]:
    return job_pod(inputs)["spec"]


def test_no_rules_leave_the_pod_as_it_was() -> None:
    for inputs in (BASE, MOUNTED):
        assert not set(SCHEDULING_FIELDS) & set(spec(inputs)), "nothing to schedule by, nothing written"
    assert spec(BASE)["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                             "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}


def test_the_deployments_rules_reach_every_job_pod() -> None:
    got = spec(replace(BASE, scheduling=GPU_POOL))
    assert got["nodeSelector"] == {"pool": "agents", "kubernetes.io/arch": "amd64"}
    assert got["tolerations"] == [{"key": "agents", "operator": "Exists", "effect": "NoSchedule"}]
    assert got["affinity"] == GPU_POOL.affinity
    assert got["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert got["priorityClassName"] == "agents-low"
    assert got["runtimeClassName"] == "gvisor"
    assert got["topologySpreadConstraints"] == list(GPU_POOL.topology_spread_constraints)
    assert got["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 3000, "fsGroup": 2000,
                                      "supplementalGroups": [4000], "seccompProfile": {"type": "RuntimeDefault"}}
    assert got["containers"][0]["securityContext"]["runAsGroup"] == 3000, "the container does not undo the group"


def test_the_user_is_always_the_operators_whatever_the_security_context_says() -> None:
    """The staged copy is the operator's uid's, 0600: a job Pod under another uid could not read it."""
    hostile = Scheduling(pod_security_context={"runAsUser": 0, "runAsNonRoot": False})
    got = spec(replace(MOUNTED, scheduling=hostile))
    assert got["securityContext"]["runAsUser"] == 65532 and got["securityContext"]["runAsNonRoot"] is True
    assert got["containers"][0]["securityContext"]["runAsUser"] == 65532


def test_a_trigger_picks_its_node_pool_over_the_deployments() -> None:
    got = spec(replace(BASE, scheduling=GPU_POOL, trigger_node_selector={"pool": "gpu"},
                       trigger_tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},)))
    assert got["nodeSelector"] == {"pool": "gpu", "kubernetes.io/arch": "amd64"}, "the Trigger's value wins per key"
    assert got["tolerations"] == [{"key": "agents", "operator": "Exists", "effect": "NoSchedule"},
                                  {"key": "nvidia.com/gpu", "operator": "Exists"}]


def test_a_pod_mounting_a_read_write_once_staging_claim_runs_on_the_operators_node() -> None:
    rwo = Scheduling(colocate_with=OPERATOR)
    got = spec(replace(MOUNTED, scheduling=rwo))
    assert got["affinity"] == {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": OPERATOR}, "topologyKey": HOSTNAME_TOPOLOGY}]}}
    assert "affinity" not in spec(replace(BASE, scheduling=rwo)), "no session mounted: it may run anywhere"
    assert "affinity" not in spec(MOUNTED), "ReadWriteMany: no co-location"


def test_co_location_is_added_to_the_deployments_own_pod_affinity() -> None:
    own_term = {"labelSelector": {"matchLabels": {"cache": "warm"}}, "topologyKey": "topology.kubernetes.io/zone"}
    rules = replace(GPU_POOL, colocate_with=OPERATOR, affinity={
        **GPU_POOL.affinity, "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [own_term]}})
    got = spec(replace(MOUNTED, scheduling=rules))
    assert got["affinity"]["nodeAffinity"] == GPU_POOL.affinity["nodeAffinity"]
    assert got["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        own_term, {"labelSelector": {"matchLabels": OPERATOR}, "topologyKey": HOSTNAME_TOPOLOGY}]
    assert rules.affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [own_term], \
        "the deployment's rules are not changed by one Pod"


# -- from the chart's variables and the Trigger to the Pod the operator creates ------------------------------------

def test_the_operator_creates_job_pods_with_the_deployments_and_the_triggers_rules() -> None:
    import json

    from pidispatch.api.models import TriggerSpec
    from pidispatch.api.views import JobView
    from pidispatch.jobflow.cluster import Cluster
    from pidispatch.jobflow.pod import create_pod
    from pidispatch.settings import OperatorSettings
    from testkit.memoryapi import MemoryApi

    settings = OperatorSettings.from_env({
        "PI_DISPATCH_JOB_CHECKOUT": "false",
        "PI_DISPATCH_JOB_NODE_SELECTOR": json.dumps({"pool": "agents"}),
        "PI_DISPATCH_JOB_TOLERATIONS": json.dumps([{"key": "agents", "operator": "Exists"}]),
        "PI_DISPATCH_JOB_IMAGE_PULL_SECRETS": json.dumps([{"name": "registry-creds"}]),
        "PI_DISPATCH_JOB_PRIORITY_CLASS_NAME": "agents-low",
        "PI_DISPATCH_JOB_RUNTIME_CLASS_NAME": "gvisor",
        "PI_DISPATCH_JOB_POD_SECURITY_CONTEXT": json.dumps({"fsGroup": 2000}),
        "PI_DISPATCH_STAGING_COLOCATE": json.dumps(OPERATOR),
    })
    trigger = TriggerSpec.model_validate({
        "on": {"event": "issue_comment.created"},
        "run": {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}})
    job = JobView.of({"metadata": {"name": "fix-1", "uid": "u-1"},
                      "spec": {"trigger": "fix", "forge": "github", "repository": "acme/widgets", "issue": 1}})
    api = MemoryApi()
    made = create_pod(settings, Cluster(api, "ns"), job, trigger, None, None)  # type: ignore[arg-type]
    pod = api.get(f"/api/v1/namespaces/ns/pods/{made.name}")
    got = pod["spec"]
    assert got["nodeSelector"] == {"pool": "gpu"}, "the Trigger's node pool over the deployment's"
    assert got["tolerations"] == [{"key": "agents", "operator": "Exists"},
                                  {"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert got["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert (got["priorityClassName"], got["runtimeClassName"]) == ("agents-low", "gvisor")
    assert got["securityContext"]["fsGroup"] == 2000
    assert "affinity" not in got, "no session staged: no co-location"


def test_scheduling_values_the_operator_cannot_use_stop_it_naming_the_variable() -> None:
    import pytest

    from pidispatch.settings import ConfigError, OperatorSettings

    for name, raw in [("PI_DISPATCH_JOB_NODE_SELECTOR", '["pool"]'), ("PI_DISPATCH_JOB_TOLERATIONS", '{"key":"x"}'),
                      ("PI_DISPATCH_JOB_IMAGE_PULL_SECRETS", '["registry-creds"]'),
                      ("PI_DISPATCH_JOB_POD_SECURITY_CONTEXT", '{"runAsUser":0}'),
                      ("PI_DISPATCH_JOB_PRIORITY_CLASS_NAME", "Not A Name")]:
        with pytest.raises(ConfigError) as err:
            OperatorSettings.from_env({name: raw})
        assert name in str(err.value)
