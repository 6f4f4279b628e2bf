"""A Trigger's Pod overrides (issue 42 item 7; contract/overrides.py, manifests/pod.py, manifests/scheduling.py):
plain env, resources, an affinity that only narrows, a priority class and read-only ConfigMaps under /mnt reach
the job Pod; everything that would weaken the Pod or reach past the contract is refused, by the Trigger's model
(Ready False, InvalidSpec) and again when the Pod is built."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from pidispatch.api.models import TriggerRun, TriggerSpec
from pidispatch.api.trigger import INVALID_SPEC_REASON, first_refusal
from pidispatch.manifests.pod import PodInputs, job_pod
from pidispatch.settings.scheduling import Scheduling

BASE = PodInputs(job_name="delivery-1234", job_uid="u-1", namespace="ns", image="pi-job:0.73.1",
                 command=["pidispatch", "runner"], staging_claim="staging", env={"TEAM": "platform"})
MOUNTED = replace(BASE, session_subpath="u-1/session")
NODE_TERM = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["agents"]}]}
ZONE_TERM = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def pod(inputs: PodInputs) -> dict[str, Any]:
    return job_pod(inputs)


def container(inputs: PodInputs) -> dict[str, Any]:
    return dict(pod(inputs)["spec"]["containers"][0])


def run(**fields: Any) -> TriggerRun:
    return TriggerRun.model_validate(fields)


def refusal(**fields: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        run(**fields)
    return str(caught.value)


# ---- what reaches the Pod ---------------------------------------------------------------------------------

def test_a_triggers_env_is_a_plain_value_beside_the_operators() -> None:
    got = container(replace(BASE, trigger_env=(("LOG_LEVEL", "debug"), ("FEATURE_X", ""))))
    assert {"name": "LOG_LEVEL", "value": "debug"} in got["env"]
    assert {"name": "FEATURE_X", "value": ""} in got["env"]
    assert {"name": "TEAM", "value": "platform"} in got["env"], "job.env stays"
    assert all("valueFrom" not in e for e in got["env"] if e["name"] in ("LOG_LEVEL", "FEATURE_X"))


def test_a_triggers_configmaps_are_mounted_read_only_under_mnt() -> None:
    inputs = replace(MOUNTED, trigger_volumes=(("lint", "lint-rules", "/mnt/lint"), ("docs", "style", "/mnt/a/b")))
    manifest = pod(inputs)
    mounts = manifest["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "trigger-lint", "mountPath": "/mnt/lint", "readOnly": True} in mounts
    assert {"name": "trigger-docs", "mountPath": "/mnt/a/b", "readOnly": True} in mounts
    volumes = {v["name"]: v for v in manifest["spec"]["volumes"]}
    assert volumes["trigger-lint"] == {"name": "trigger-lint",
                                       "configMap": {"name": "lint-rules", "defaultMode": 0o444}}
    assert volumes["trigger-docs"]["configMap"]["name"] == "style"
    assert {"workspace", "session"} <= set(volumes), "the operator's own volumes stay as they were"


def test_priority_class_replaces_the_deployments_and_affinity_only_narrows() -> None:
    rules = Scheduling(priority_class_name="agents-low", affinity={"nodeAffinity": {
        REQUIRED: {"nodeSelectorTerms": [NODE_TERM]},
        PREFERRED: [{"weight": 1, "preference": ZONE_TERM}]}})
    trigger_affinity = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [ZONE_TERM]},
                                         PREFERRED: [{"weight": 5, "preference": NODE_TERM}]},
                        "podAntiAffinity": {REQUIRED: [{"topologyKey": "kubernetes.io/hostname",
                                                        "labelSelector": {"matchLabels": {"a": "b"}}}]}}
    spec = pod(replace(BASE, scheduling=rules, trigger_priority_class="agents-high",
                       trigger_affinity=trigger_affinity))["spec"]
    assert spec["priorityClassName"] == "agents-high"
    node = spec["affinity"]["nodeAffinity"]
    # One term holding both (ANDed), never two terms (ORed: the Trigger's would widen the deployment's).
    assert node[REQUIRED] == {"nodeSelectorTerms": [
        {"matchExpressions": NODE_TERM["matchExpressions"] + ZONE_TERM["matchExpressions"]}]}
    assert [p["weight"] for p in node[PREFERRED]] == [1, 5]
    assert spec["affinity"]["podAntiAffinity"] == trigger_affinity["podAntiAffinity"]
    assert rules.affinity["nodeAffinity"][REQUIRED] == {"nodeSelectorTerms": [NODE_TERM]}, "the rules stay as given"


def test_a_triggers_affinity_keeps_the_staging_co_location() -> None:
    rules = Scheduling(colocate_with={"app": "op"})
    spec = pod(replace(MOUNTED, scheduling=rules, trigger_affinity={"podAffinity": {REQUIRED: [
        {"topologyKey": "zone", "labelSelector": {"matchLabels": {"x": "y"}}}]}}))["spec"]
    terms = spec["affinity"]["podAffinity"][REQUIRED]
    assert len(terms) == 2 and terms[1]["labelSelector"] == {"matchLabels": {"app": "op"}}


def test_overrides_never_touch_the_restricted_security_context() -> None:
    plain = pod(MOUNTED)["spec"]
    overridden = pod(replace(MOUNTED, trigger_env=(("A", "1"),), trigger_priority_class="p",
                             trigger_volumes=(("c", "cm", "/mnt/c"),),
                             trigger_affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [NODE_TERM]}}},
                             resources={"limits": {"cpu": "2", "memory": "4Gi"}}))["spec"]
    assert overridden["securityContext"] == plain["securityContext"]
    assert overridden["containers"][0]["securityContext"] == plain["containers"][0]["securityContext"]
    for key in ("automountServiceAccountToken", "enableServiceLinks", "restartPolicy"):
        assert overridden[key] == plain[key]
    assert not {"hostNetwork", "hostPID", "hostIPC", "serviceAccountName", "nodeName"} & set(overridden)
    assert overridden["containers"][0]["resources"] == {"limits": {"cpu": "2", "memory": "4Gi"}}


def test_the_trigger_model_carries_its_overrides_to_pod_inputs() -> None:
    got = run(env=[{"name": "LOG_LEVEL", "value": "debug"}], priorityClassName="agents-high",
              volumes=[{"name": "lint", "configMap": "lint-rules"},
                       {"name": "b", "configMap": "b", "mountPath": "/mnt/x"}],
              affinity={"podAntiAffinity": {PREFERRED: [{"weight": 1, "podAffinityTerm": {"topologyKey": "z"}}]}})
    assert [(v.name, v.value) for v in got.env or ()] == [("LOG_LEVEL", "debug")]
    assert got.priorityClassName == "agents-high"
    assert got.affinity is not None and got.affinity.podAntiAffinity is not None


# ---- every refusal ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["PI_MODEL", "PIDISPATCH_X", "PI_DISPATCH_JOB_ENV", "GH_TOKEN", "GH_HOST",
                                  "GITHUB_TOKEN", "GIT_SSL_NO_VERIFY", "HTTPS_PROXY", "https_proxy", "NO_PROXY",
                                  "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "NODE_OPTIONS", "LD_PRELOAD", "HOME",
                                  "PATH", "PI_GATEWAY_TOKEN", "PI_SESSION_FILE", "PI_CODING_AGENT_DIR"])
def test_env_names_of_the_contract_are_refused_by_the_model_and_the_pod(name: str) -> None:
    assert f"run.env: {name}" in refusal(env=[{"name": name, "value": "x"}])
    with pytest.raises(ValueError, match=f"run.env: {name}"):
        pod(replace(BASE, trigger_env=((name, "x"),)))


def test_env_from_a_secret_is_refused() -> None:
    why = refusal(env=[{"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])
    assert "valueFrom" in why and "Extra inputs are not permitted" in why


def test_env_names_twice_or_malformed_are_refused() -> None:
    assert "named twice" in refusal(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}])
    assert "env.0.name" in refusal(env=[{"name": "1A", "value": "1"}])


def test_env_may_not_replace_what_the_deployment_or_a_credential_sets() -> None:
    with pytest.raises(ValueError, match="TEAM is already set"):
        pod(replace(BASE, trigger_env=(("TEAM", "other"),)))
    with pytest.raises(ValueError, match="OPENAI_API_KEY is already set"):
        pod(replace(BASE, credentials={"OPENAI_API_KEY": ("keys", "openai")}, trigger_env=(("OPENAI_API_KEY", "x"),)))


@pytest.mark.parametrize("path", ["/workspace", "/workspace/x", "/session", "/pi-agent", "/etc/pi-dispatch/ca",
                                  "/var/run/pi-dispatch/secrets/x", "/mnt", "/mnt/", "/mnt/../etc", "mnt/x",
                                  "/usr/local/bin", "/", "/mnt//x"])
def test_mount_paths_outside_mnt_are_refused_by_the_model_and_the_pod(path: str) -> None:
    assert "run.volumes[a].mountPath" in refusal(volumes=[{"name": "a", "configMap": "c", "mountPath": path}])
    with pytest.raises(ValueError, match=r"run.volumes\[a\].mountPath"):
        pod(replace(BASE, trigger_volumes=(("a", "c", path),)))


@pytest.mark.parametrize("volume", [
    {"name": "a", "secret": {"secretName": "s"}},
    {"name": "a", "configMap": "c", "hostPath": {"path": "/"}},
    {"name": "a", "configMap": "c", "readOnly": False},
    {"name": "a", "persistentVolumeClaim": {"claimName": "staging"}},
    {"name": "A_B", "configMap": "c"},
])
def test_anything_but_a_configmap_volume_is_refused(volume: dict[str, Any]) -> None:
    assert "volumes.0" in refusal(volumes=[volume])


def test_volumes_named_twice_or_overlapping_are_refused() -> None:
    assert "named twice" in refusal(volumes=[{"name": "a", "configMap": "c"}, {"name": "a", "configMap": "d"}])
    assert "overlaps" in refusal(volumes=[{"name": "a", "configMap": "c", "mountPath": "/mnt/x"},
                                          {"name": "b", "configMap": "d", "mountPath": "/mnt/x/y"}])


def test_a_system_priority_class_is_refused() -> None:
    assert "system priority class" in refusal(priorityClassName="system-node-critical")
    assert "priorityClassName" in refusal(priorityClassName="Not_A_Name")


@pytest.mark.parametrize("affinity, why", [
    ({"hostNetwork": True}, "affinity.hostNetwork"),
    ({"nodeAffinity": []}, "affinity.nodeAffinity"),
    ({"nodeAffinity": {"nodeName": "n1"}}, "only requiredDuringScheduling"),
    ({"nodeAffinity": {REQUIRED: [NODE_TERM]}}, "is not {nodeSelectorTerms"),
    ({"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}}, "is not {nodeSelectorTerms"),
    ({"podAffinity": {REQUIRED: {"topologyKey": "z"}}}, "is not a list of terms"),
    ({"podAntiAffinity": {PREFERRED: "x"}}, "is not a list of terms"),
])
def test_an_affinity_not_of_kubernetes_shape_is_refused(affinity: dict[str, Any], why: str) -> None:
    assert why in refusal(affinity=affinity)


@pytest.mark.parametrize("field", [{"securityContext": {"privileged": True}}, {"hostNetwork": True},
                                   {"serviceAccountName": "admin"}, {"privileged": True}])
def test_fields_that_would_weaken_the_pod_never_reach_it(field: dict[str, Any]) -> None:
    """The Trigger's run has no such field: extra fields are pruned by the apiserver and ignored here, so the Pod
    built from such a Trigger is the Pod built without it."""
    got = run(**field)
    assert not {"securityContext", "hostNetwork", "serviceAccountName", "privileged"} & set(
        type(got).model_fields), "no override of the Pod's security"


def test_a_refused_override_makes_the_trigger_not_ready_with_invalid_spec() -> None:
    spec = {"on": {"event": "issues.labeled", "label": "pi"},
            "run": {"env": [{"name": "GH_TOKEN", "value": "x"}]}}
    found = first_refusal(spec)
    assert found is not None and found.reason == INVALID_SPEC_REASON
    assert "run.env: GH_TOKEN" in found.message
    ok = {"on": {"event": "issues.labeled", "label": "pi"},
          "run": {"env": [{"name": "LOG_LEVEL", "value": "x"}], "volumes": [{"name": "c", "configMap": "c"}],
                  "priorityClassName": "high"}}
    assert first_refusal(ok) is None
    TriggerSpec.model_validate(ok)


# ---- the job Pod policy's lists and ceiling (api/overrides.py, settings/jobpod.py) ------------------------------

def policy(**lists: Any) -> Any:
    import json

    from pidispatch.settings.jobpod import trigger_policy

    return trigger_policy({"PI_DISPATCH_JOB_TRIGGER_POLICY": json.dumps(lists)})


def test_overrides_within_the_policy_pass_and_each_outside_it_is_named() -> None:
    from pidispatch.api.overrides import policy_problem

    allowed = policy(env=["LOG_LEVEL"], configMaps=["lint"], priorityClasses=["high"],
                     maxResources={"cpu": 2, "memory": "4Gi"})
    fine = run(env=[{"name": "LOG_LEVEL", "value": "x"}], volumes=[{"name": "l", "configMap": "lint"}],
               priorityClassName="high", resources={"requests": {"cpu": "1500m", "memory": "4Gi"},
                                                    "limits": {"cpu": "2", "memory": "4096Mi", "nvidia.com/gpu": "1"}})
    assert policy_problem(fine, allowed) is None
    assert policy_problem(run(env=[{"name": "OTHER", "value": "x"}]), allowed) == (
        "run.env OTHER is not allowed by the job Pod policy (jobPodPolicy.triggerEnv: LOG_LEVEL); list it there or "
        "remove it from the Trigger")
    assert "jobPodPolicy.configMaps: lint" in str(policy_problem(
        run(volumes=[{"name": "s", "configMap": "secrets-in-disguise"}]), allowed))
    assert "jobPodPolicy.priorityClasses: high" in str(policy_problem(run(priorityClassName="top"), allowed))
    assert policy_problem(run(resources={"limits": {"cpu": "2001m"}}), allowed) == (
        "run.resources.limits.cpu 2001m is above the job Pod policy's ceiling (jobPodPolicy.maxResources.cpu: 2)")
    assert "requests.memory 5Gi" in str(policy_problem(run(resources={"requests": {"memory": "5Gi"}}), allowed))
    assert policy_problem(run(resources={"limits": {"memory": "lots"}}), allowed) is not None
    assert policy_problem(run(env=[{"name": "OTHER", "value": "x"}]), None) is None, "the policy off: nothing held"
    assert policy_problem(run(env=[{"name": "OTHER", "value": "x"}]), policy()) is not None, "by default: nothing"


def test_the_policy_setting_is_checked() -> None:
    from pidispatch.settings import ConfigError

    assert policy().env == frozenset()
    from pidispatch.settings.jobpod import trigger_policy
    assert trigger_policy({}) is not None and trigger_policy({"PI_DISPATCH_JOB_TRIGGER_POLICY": "off"}) is None
    for bad in ({"env": "LOG_LEVEL"}, {"maxResources": {"cpu": "much"}}, {"other": []}):
        with pytest.raises(ConfigError):
            policy(**bad)


def test_a_trigger_outside_the_policy_is_not_ready_and_its_jobs_are_refused() -> None:
    from pidispatch.api.overrides import OVERRIDE_NOT_ALLOWED
    from pidispatch.api.views import TriggerView
    from pidispatch.jobflow.trigger import Triggers
    from pidispatch.settings.store import Settings

    body = {"apiVersion": "pi-dispatch.dev/v1alpha1", "kind": "Trigger",
            "metadata": {"name": "t", "namespace": "ns", "resourceVersion": "1"},
            "spec": {"on": {"event": "issues.labeled", "label": "pi"},
                     "run": {"priorityClassName": "top"}}}
    triggers = Triggers(None, Settings(), Scheduling(trigger_policy=policy(priorityClasses=["high"])))  # type: ignore[arg-type]
    refused = triggers.policed(TriggerView.of(body)).refusal
    assert refused is not None and refused.reason == OVERRIDE_NOT_ALLOWED
    assert "run.priorityClassName top" in refused.message
    off = Scheduling(trigger_policy=None)
    assert Triggers(None, Settings(), off).policed(TriggerView.of(body)).refusal is None  # type: ignore[arg-type]
