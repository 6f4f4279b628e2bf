"""The chart's lists the job Pod and per-job Secret policies are built from (issue 40), rendered offline with the
pinned helm and held to the operator's code: every literal env name a job Pod can carry, the image and command,
and the per-job Secret names. ``e2e/test_job_pod_policy.py`` and ``e2e/test_job_secret_policy.py`` hold the
apiserver to the policies themselves.
"""

from __future__ import annotations

import json
from typing import Any

from pidispatch.api.models import JobSpec, TriggerSpec
from pidispatch.contract import CONTAINER
from pidispatch.contract import gateway_wire as gateway_protocol
from pidispatch.jobflow.pod import pod_env
from pidispatch.manifests.pod import (
    GatewayInputs,
    PodInputs,
    TransferInputs,
    WorkspaceInputs,
    gateway_secret_name,
    job_pod,
    pod_name,
    token_secret_name,
    transfer_secret_name,
)
from pidispatch.transfer import protocol as transfer_protocol
from testkit.chart import FULLNAME, NAMESPACE, POD_POLICY, SECRET_POLICY, STORE_ON, kinds, one, render

TRANSFER_ON: dict[str, Any] = {**STORE_ON, "sessions.staging.mode": "transfer"}


def variables(policy: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def every_literal_name() -> set[str]:
    """The literal env names of the fullest job Pods the operator builds (mount and transfer mode, and behind the
    gateway)."""
    env = pod_env("j", JobSpec(trigger="t", forge="github", repository="a/b", issue=1, pullRequest=2),
                  TriggerSpec.model_validate({"on": {"event": "issue_comment.created", "phrase": "@pi"}, "run": {
                      "model": "m", "piVersion": "1", "flow": "f", "command": "/c"}}))
    common: dict[str, Any] = {
        "job_name": "j", "job_uid": "u", "namespace": "n", "image": "i", "command": ["c"], "env": env,
        "host_resume": True, "rethread": "r", "github_token": ("s", "k"), "credentials": {"K": ("s", "k")},
        "run_secrets": ("r",), "models_configmap": "m", "workspace_size_limit": ("1Gi", 2**30),
        "workspace": WorkspaceInputs(checkout={"url": "u"}, subject={"title": "t"}, previous={"sha": "s"},
                                     gh_host="ghe.example", ca_bundle_configmap="ca")}
    pods = [job_pod(PodInputs(**common, staging_claim="c", session_subpath="u/session")),
            job_pod(PodInputs(**common, transfer=TransferInputs(url="https://t", secret="s", ca_configmap="ca",
                                                                max_bytes=1))),
            job_pod(PodInputs(**{**common, "github_token": None, "credentials": {}},
                              gateway=GatewayInputs(url="https://g", proxy="http://g:3128", ca_configmap="g-ca",
                                                    secret="s")))]
    return {e["name"] for pod in pods for c in pod["spec"]["containers"] if c["name"] == CONTAINER
            for e in c["env"] if "value" in e}


def test_the_pod_policy_allows_a_literal_value_under_every_name_the_operator_writes_and_job_envs(helm: Any) -> None:
    policy = one(render(helm, {"job.env": {"PI_OFFLINE": "1"}}), "ValidatingAdmissionPolicy", POD_POLICY)
    allowed = set(json.loads(variables(policy)["envNames"]))
    names = every_literal_name()
    assert {"PI_TRANSFER_URL", "PI_CODING_AGENT_DIR", "PI_SESSION_FILE", "GH_HOST", "PI_GATEWAY_URL"} <= names, names
    assert names - allowed == set(), "a literal env name the operator writes is missing from the chart's list"
    assert allowed - names == {"PI_OFFLINE"}, "the chart's list names what the operator never writes"
    assert not allowed & {"GH_TOKEN", "GH_ENTERPRISE_TOKEN", transfer_protocol.ENV_TOKEN, gateway_protocol.ENV_TOKEN}, (
        "a credential's name takes no literal value")


def test_the_pod_policy_allows_the_job_image_the_listed_ones_and_job_command_only(helm: Any) -> None:
    digest = "sha256:" + "a" * 64
    docs = render(helm, {"job.image": "registry.example/pi/job:1", "job.imageDigest": digest,
                         "jobPodPolicy.images": ["registry.example/team/job:2"], "job.command": ["pi-run", "--x"]})
    policy = one(docs, "ValidatingAdmissionPolicy", POD_POLICY)
    images = json.loads(variables(policy)["images"])
    assert images == [f"registry.example/pi/job@{digest}", "registry.example/team/job:2"]
    [rule] = [v for v in policy["spec"]["validations"] if "c.command ==" in v["expression"]]
    assert 'c.command == ["pi-run","--x"]' in rule["expression"] and "!has(c.args)" in rule["expression"]


def test_the_secret_policy_is_on_with_the_pod_policy_and_bound_to_the_operator(helm: Any) -> None:
    docs = render(helm)
    policy = one(docs, "ValidatingAdmissionPolicy", SECRET_POLICY)
    binding = one(docs, "ValidatingAdmissionPolicyBinding", SECRET_POLICY)
    assert binding["spec"]["policyName"] == SECRET_POLICY and binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": NAMESPACE}
    [condition] = policy["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{FULLNAME}'"
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["secrets"] and rule["operations"] == ["CREATE", "UPDATE", "DELETE"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert not kinds(render(helm, {"jobPodPolicy.enabled": False}), "ValidatingAdmissionPolicy")


def test_the_policies_name_the_operators_per_job_secrets(helm: Any) -> None:
    """<the Pod's name>-<purpose>-<the Job's uid>: what both policies build the names from."""
    uid = "0b3c2a9e-5d1f-4c6e-9a7b-1e2d3c4b5a69"
    assert token_secret_name("j", uid) == f"{pod_name('j')}-token-{uid}"
    assert transfer_secret_name("j", uid) == f"{pod_name('j')}-transfer-{uid}"
    assert gateway_secret_name("j", uid) == f"{pod_name('j')}-gateway-{uid}"
    mount = render(helm, {**STORE_ON, "gateway.enabled": False})
    assert json.loads(variables(one(mount, "ValidatingAdmissionPolicy", SECRET_POLICY))["purposes"]) == ["token"]
    assert variables(one(mount, "ValidatingAdmissionPolicy", POD_POLICY))["secrets"].startswith(
        "[object.metadata.name + '-token-' + variables.job]")
    transfer = variables(one(render(helm, {**TRANSFER_ON, "gateway.enabled": False}), "ValidatingAdmissionPolicy",
                                SECRET_POLICY))
    assert json.loads(transfer["purposes"]) == ["token", "transfer"]
    gateway = render(helm, TRANSFER_ON)  # the gateway is on by default
    assert json.loads(variables(one(gateway, "ValidatingAdmissionPolicy", SECRET_POLICY))["purposes"]) == [
        "token", "transfer", "gateway"]
    pod_policy = variables(one(gateway, "ValidatingAdmissionPolicy", POD_POLICY))
    assert "object.metadata.name + '-gateway-' + variables.job" in pod_policy["secrets"]
    assert f"{FULLNAME}-gateway-ca" in json.loads(pod_policy["configMaps"])


def test_the_trigger_override_lists_reach_the_operator_and_the_pod_policy(helm: Any) -> None:
    """jobPodPolicy.triggerEnv, configMaps, priorityClasses and maxResources (docs/nodes.md#pod-overrides): the
    operator reads them (PI_DISPATCH_JOB_TRIGGER_POLICY) and the policy holds every job Pod to them."""
    from pidispatch.settings.jobpod import trigger_policy
    from testkit.chart import env_list, operator_container

    values = {"jobPodPolicy.triggerEnv": ["LOG_LEVEL"], "jobPodPolicy.configMaps": ["lint"],
              "jobPodPolicy.priorityClasses": ["high"], "jobPodPolicy.maxResources": {"cpu": 2, "memory": "4Gi"},
              "job.priorityClassName": "low"}
    docs = render(helm, values)
    env = {e["name"]: e.get("value") for e in env_list(operator_container(docs))}
    read = trigger_policy(env)
    assert read is not None and read.env == {"LOG_LEVEL"} and read.config_maps == {"lint"}
    assert read.priority_classes == {"high"} and dict(read.max_resources) == {"cpu": "2", "memory": "4Gi"}
    policy = one(docs, "ValidatingAdmissionPolicy", POD_POLICY)
    assert "LOG_LEVEL" in json.loads(variables(policy)["envNames"])
    assert "lint" in json.loads(variables(policy)["configMaps"])
    expressions = [v["expression"] for v in policy["spec"]["validations"]]
    assert any('object.spec.priorityClassName in ["low","high"]' in e for e in expressions), expressions
    assert any('quantity({"cpu":"2","memory":"4Gi"}[r])' in e for e in expressions), expressions
    disabled = render(helm, {"jobPodPolicy.enabled": False})
    off = {e["name"]: e.get("value") for e in env_list(operator_container(disabled))}
    assert off["PI_DISPATCH_JOB_TRIGGER_POLICY"] == "off" and trigger_policy(off) is None
    assert trigger_policy({e["name"]: e.get("value") for e in env_list(operator_container(render(helm)))}) == (
        type(read)()), "by default nothing is listed"
