"""Issue 31: the job Pod's disk is bounded (items 4) and its operator's power too (item 10), offline.

The workspace emptyDir's ``sizeLimit`` and the container's ephemeral-storage come from the chart's values
through the operator's settings (one parse, a named error at start); job Pods carry their release, and
the uninstall hook stops only its own release's Pods. ``e2e/test_job_pod_policy.py`` holds the chart's
admission policy to the job Pod's shape on a real apiserver.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.models import TriggerRun
from pidispatch.contract import ENV_WORKSPACE_LIMIT, JOB_LABEL, MANAGED_BY, RELEASE_LABEL
from pidispatch.jobflow.resources import job_resources
from pidispatch.kubeapi import ApiError
from pidispatch.manifests.pod import PodInputs, job_pod
from pidispatch.settings import ConfigError, OperatorSettings, parse_bytes
from pidispatch.uninstall import release_pods, stop_job_pods
from testkit.chart import FULLNAME, POD_POLICY, RELEASE, env_values, kinds, one, operator_container, render
from testkit.env import clean_env

GI = 2**30
BASE = PodInputs(job_name="delivery-1", job_uid="u-1", namespace="ns", image="job:1", command=["pidispatch", "runner"])


# ---- the quantity, parsed once ------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [
    ("10Gi", 10 * GI), ("500Mi", 500 * 2**20), ("20G", 20 * 10**9), ("1.5Gi", 3 * GI // 2), ("1e9", 10**9),
    ("2E", 2 * 10**18), (" 1Ti ", 2**40), ("1048576", 2**20), ("1.0000001G", 1000000100), ("1.00000001Gi", 1073741835),
], ids=["binary", "mebibytes", "decimal", "a fraction", "an exponent", "exa, not an exponent", "trimmed",
        "plain bytes", "a fraction exact in bytes", "a fraction of a byte rounds up"])
def test_a_quantity_is_read_in_bytes(raw: str, expected: int) -> None:
    assert parse_bytes("X", raw) == expected


@pytest.mark.parametrize("raw", ["", "10GB", "-1Gi", "10 Gi", "500m", "1Ki", "Gi", "0x10", "1e"],
                         ids=["empty", "a unit Kubernetes has not", "negative", "a space", "milli (a fraction of a "
                              "byte)", "under 1Mi", "no number", "hex", "an exponent without digits"])
def test_a_bad_quantity_is_a_config_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_bytes("PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT", raw)
    assert err.value.variable == "PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT" and "quantity" in str(err.value)


def test_the_disk_settings_default_to_a_10gi_workspace_in_a_12gi_container() -> None:
    s = OperatorSettings.from_env({})
    assert (s.job_workspace_size_limit, s.job_workspace_limit_bytes) == ("10Gi", 10 * GI)
    assert (s.job_ephemeral_storage_request, s.job_ephemeral_storage_limit, s.release) == ("2Gi", "12Gi", None)
    given = OperatorSettings.from_env({"PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT": "20Gi", "PI_DISPATCH_RELEASE": "r1",
                                       "PI_DISPATCH_JOB_EPHEMERAL_STORAGE_REQUEST": "1Gi",
                                       "PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT": "25Gi"})
    assert (given.job_workspace_size_limit, given.job_workspace_limit_bytes, given.job_ephemeral_storage_request,
            given.job_ephemeral_storage_limit, given.release) == ("20Gi", 20 * GI, "1Gi", "25Gi", "r1")


@pytest.mark.parametrize(("env", "variable"), [
    ({"PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT": "lots"}, "PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT"),
    ({"PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT": "20Gi"}, "PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT"),
    ({"PI_DISPATCH_JOB_EPHEMERAL_STORAGE_REQUEST": "13Gi"}, "PI_DISPATCH_JOB_EPHEMERAL_STORAGE_REQUEST"),
    ({"PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT": "12 GiB"}, "PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT"),
    ({"PI_DISPATCH_RELEASE": "Not_A_Name"}, "PI_DISPATCH_RELEASE"),
], ids=["not a quantity", "a workspace larger than the container's limit", "a request above the limit",
        "a limit in a unit Kubernetes has not", "a release that is no name"])
def test_a_bad_disk_setting_is_refused_naming_it(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as err:
        OperatorSettings.from_env(env)
    assert err.value.variable == variable


def test_the_operator_with_a_bad_workspace_limit_exits_2_naming_it(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "pidispatch", "operator"], capture_output=True, text=True,
                            env=clean_env(tmp_path, PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT="10 gigs"),
                            stdin=subprocess.DEVNULL, timeout=60, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert "PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT='10 gigs'" in line and "quantity" in line, line


# ---- the job Pod -------------------------------------------------------------------------------


def test_the_workspace_has_its_size_limit_and_the_runner_is_told_it_in_bytes() -> None:
    pod = job_pod(replace(BASE, workspace_size_limit=("10Gi", 10 * GI)))
    [workspace] = [v for v in pod["spec"]["volumes"] if v["name"] == "workspace"]
    assert workspace == {"name": "workspace", "emptyDir": {"sizeLimit": "10Gi"}}
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env[ENV_WORKSPACE_LIMIT] == str(10 * GI)


def test_a_job_pod_carries_its_release() -> None:
    labels = job_pod(replace(BASE, release="rel"))["metadata"]["labels"]
    assert labels[RELEASE_LABEL] == "rel" and labels[JOB_LABEL] == "delivery-1"
    assert RELEASE_LABEL not in job_pod(BASE)["metadata"]["labels"], "no release: no label (not an empty one)"


DISK = OperatorSettings.from_env({})


@pytest.mark.parametrize(("deployment", "run", "expected"), [
    ((), {}, {"requests": {"ephemeral-storage": "2Gi"}, "limits": {"ephemeral-storage": "12Gi"}}),
    ((("limits", (("memory", "4Gi"),)),), {},
     {"requests": {"ephemeral-storage": "2Gi"}, "limits": {"memory": "4Gi", "ephemeral-storage": "12Gi"}}),
    ((), {"resources": {"requests": {"cpu": "1"}}},
     {"requests": {"cpu": "1", "ephemeral-storage": "2Gi"}, "limits": {"ephemeral-storage": "12Gi"}}),
    ((), {"resources": {"limits": {"ephemeral-storage": "40Gi"}}},
     {"requests": {"ephemeral-storage": "2Gi"}, "limits": {"ephemeral-storage": "40Gi"}}),
    ((), {"resources": {"limits": {"ephemeral-storage": "1Gi"}}},
     {"requests": {}, "limits": {"ephemeral-storage": "1Gi"}}),
], ids=["the deployment's bound alone", "added to the deployment's resources", "added to a Trigger's resources",
        "a Trigger's own limit is kept", "no request above a Trigger's lower limit (the apiserver would refuse)"])
def test_every_job_container_has_an_ephemeral_storage_limit(deployment: tuple, run: dict, expected: dict) -> None:
    assert job_resources(replace(DISK, job_resources=deployment), TriggerRun.model_validate(run)) == expected


# ---- the chart's values reach the operator ----------------------------------------------------


def test_the_charts_disk_values_reach_the_operator(helm: Any) -> None:
    defaults = OperatorSettings.from_env(env_values(operator_container(render(helm))))
    assert (defaults.job_workspace_size_limit, defaults.job_ephemeral_storage_request,
            defaults.job_ephemeral_storage_limit, defaults.release) == ("10Gi", "2Gi", "12Gi", RELEASE)
    given = OperatorSettings.from_env(env_values(operator_container(render(helm, {
        "job.workspace.sizeLimit": "30Gi", "job.ephemeralStorage.request": "5Gi",
        "job.ephemeralStorage.limit": "33Gi"}))))
    assert (given.job_workspace_limit_bytes, given.job_ephemeral_storage_request,
            given.job_ephemeral_storage_limit) == (30 * GI, "5Gi", "33Gi")


def test_the_job_pod_policy_is_on_by_default_and_bound_to_the_operator(helm: Any) -> None:
    docs = render(helm)
    policy = one(docs, "ValidatingAdmissionPolicy", POD_POLICY)
    binding = one(docs, "ValidatingAdmissionPolicyBinding", POD_POLICY)
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] and binding["spec"]["validationActions"] == [
        "Deny"]
    [condition] = policy["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == 'system:serviceaccount:pi-ns:{FULLNAME}'"
    assert policy["spec"]["failurePolicy"] == "Fail"
    off = render(helm, {"jobPodPolicy.enabled": False})
    assert not kinds(off, "ValidatingAdmissionPolicy") and not kinds(off, "ValidatingAdmissionPolicyBinding")


def test_the_policy_allows_the_charts_secrets_and_configmaps_by_name(helm: Any) -> None:
    docs = render(helm, {"github.authSource": "pat", "github.token.secretName": "gh-token",
                         "job.credentials": {"OPENAI_API_KEY": {"secretName": "model-keys", "key": "k"}},
                         "jobPodPolicy.credentialSecrets": ["trigger-keys"], "job.modelsConfigMap": "models",
                         "sessions.enabled": True})
    policy = one(docs, "ValidatingAdmissionPolicy", POD_POLICY)
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["secrets"] == (
        "[object.metadata.name + '-token-' + variables.job, object.metadata.name + '-gateway-' + variables.job] + "
        "[\"gh-token\",\"model-keys\",\"trigger-keys\"]")
    assert variables["configMaps"] == f'["models","{FULLNAME}-gateway-ca"]'
    assert any(f"claimName == '{FULLNAME}-staging'" in v["expression"] for v in policy["spec"]["validations"])


# ---- the uninstall hook stops its own release's Pods ------------------------------------------


def pod(name: str, release: str | None, claim: str | None = None) -> dict[str, Any]:
    labels = {JOB_LABEL: name, **MANAGED_BY, **({RELEASE_LABEL: release} if release else {})}
    volumes = [{"name": "session", "persistentVolumeClaim": {"claimName": claim}}] if claim else []
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
            "spec": {"volumes": volumes}, "status": {"phase": "Succeeded"}}


TWO_RELEASES = [pod("mine", "a"), pod("theirs", "b"), pod("old-mine", None, "a-pi-dispatch-staging"),
                pod("old-theirs", None, "b-pi-dispatch-staging"), pod("old-sessionless", None)]


@pytest.mark.parametrize(("release", "claim", "expected"), [
    ("a", "a-pi-dispatch-staging", ["mine", "old-mine"]),
    ("b", "b-pi-dispatch-staging", ["theirs", "old-theirs"]),
    (None, None, ["mine", "theirs", "old-mine", "old-theirs", "old-sessionless"]),
], ids=["release a", "release b", "a hook from before the label: every job Pod"])
def test_a_release_owns_its_labelled_pods_and_the_unlabelled_ones_on_its_claim(
        release: str | None, claim: str | None, expected: list[str]) -> None:
    assert [p["metadata"]["name"] for p in release_pods(TWO_RELEASES, release, claim)] == expected


class PodsApi:
    """The two calls the hook makes on Pods: list and a DELETE (gone at once)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}

    def list(self, path: str, **_: Any) -> list[dict[str, Any]]:
        return list(self.pods.values())

    def request(self, method: str, path: str, body: Any = None) -> None:
        assert method == "DELETE"
        if self.pods.pop(path.rsplit("/", 1)[1], None) is None:
            raise ApiError(404, method, path, "not found")


def test_the_uninstall_hook_leaves_another_releases_job_pods() -> None:
    api = PodsApi(TWO_RELEASES)
    said: list[str] = []
    assert stop_job_pods(api, "ns", None, timeout=1, say=said.append, release="a",  # type: ignore[arg-type]
                         staging_claim="a-pi-dispatch-staging") == 0
    assert sorted(api.pods) == ["old-sessionless", "old-theirs", "theirs"]
    assert said[-1] == "2 finished job Pod(s) deleted, 0 running one(s) stopped"
