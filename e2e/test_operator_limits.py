"""Limits on the local control plane: the run timeout and a job Pod that never starts (issue 14 item 5).

The test kubelet does what a real one does here: it stops a Pod at its ``activeDeadlineSeconds`` and
fails it ``DeadlineExceeded``, and it keeps a Pod whose image cannot be pulled Pending
(``ErrImagePull``, then ``ImagePullBackOff``; an image from ``unpullable.invalid`` is never found).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import Release, base_values, installed, merge
from pidispatch.contract import RUN_SECRETS_DIR
from pidispatch.store.keys import issue_key
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

START_TIMEOUT = 10  # the chart's minimum; the resync (every 30 s) notices it
UNPULLABLE = "unpullable.invalid/pi-dispatch/job:0"


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet) -> Iterator[Release]:
    values = merge(base_values(), {"sessions": {"enabled": True}, "maxConcurrentJobs": 1,
                                   "job": {"startTimeoutSeconds": START_TIMEOUT},
                                   # the Secrets and the image the Triggers below name (the chart's policy allows
                                   # no other)
                                   "jobPodPolicy": {"credentialSecrets": ["model-keys", "no-such", "deploy-keys"],
                                                    "images": [UNPULLABLE]}})
    with installed(cluster, kube, "limits", values) as r:
        yield r


def test_a_job_past_its_timeout_is_stopped_and_promotes_nothing(release: Release) -> None:
    r = release
    key = issue_key("github", "acme/widgets", 801)
    assert r.run("seed-801", issue=801)["status"]["phase"] == "Succeeded"
    before = r.digest(key)
    r.trigger("hasty", timeoutSeconds=3)
    job = r.run("late-801", trigger="hasty", issue=801, comment="@pi sleep=60")
    assert job["status"]["phase"] == "Failed", json.dumps(job["status"])
    done = r.condition(job, "Completed")
    assert done is not None and done["reason"] == "DeadlineExceeded", done
    [pod] = r.pods_of("late-801")
    assert pod["spec"]["activeDeadlineSeconds"] == 3
    assert r.digest(key) == before, "a job stopped at its deadline changed the store"


def test_a_pod_that_never_starts_fails_its_job_and_the_next_one_runs(release: Release) -> None:
    r = release
    r.trigger("unpullable", image=UNPULLABLE)
    r.job("stuck", trigger="unpullable", issue=802)
    r.job("behind", issue=803)
    stuck = r.wait_job("stuck", timeout=START_TIMEOUT + 90)
    assert stuck["status"]["phase"] == "Failed", json.dumps(stuck["status"])
    done = r.condition(stuck, "Completed")
    assert done is not None and done["reason"] == "PodNeverStarted", done
    assert "ImagePullBackOff" in done["message"] or "ErrImagePull" in done["message"], done["message"]
    wait_until("the stuck Job's Pod deleted", lambda: not r.pods_of("stuck"), timeout=60)
    behind = r.wait_job("behind")
    assert behind["status"]["phase"] == "Succeeded", "the slot was not freed for the next queued Job"


def test_model_credentials_reach_the_job_by_reference_only(release: Release) -> None:
    r = release
    r.kube.create(f"/api/v1/namespaces/{r.ns}/secrets", {
        "metadata": {"name": "model-keys"}, "stringData": {"openai": "sk-test-credential"}})
    r.trigger("keyed", resume=False, credentials={"OPENAI_API_KEY": {"secretName": "model-keys", "key": "openai"}})
    job = r.run("keyed-1", trigger="keyed", issue=804, comment="@pi env-sha=OPENAI_API_KEY")
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    [pod] = r.pods_of("keyed-1")
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["OPENAI_API_KEY"] == {"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": "model-keys", "key": "openai"}}}
    assert "sk-test-credential" not in json.dumps(pod), "the key's value is in the Pod spec"
    expected = hashlib.sha256(b"sk-test-credential").hexdigest()
    assert f"env-sha OPENAI_API_KEY sha256:{expected}" in r.pod_log(pod["metadata"]["name"])


def test_a_missing_model_secret_fails_the_job_at_the_start_timeout(release: Release) -> None:
    r = release
    r.trigger("unkeyed", resume=False, credentials={"OPENAI_API_KEY": {"secretName": "no-such", "key": "openai"}})
    r.job("unkeyed-1", trigger="unkeyed", issue=805)
    r.job("after-unkeyed", issue=806)
    job = r.wait_job("unkeyed-1", timeout=START_TIMEOUT + 90)
    done = r.condition(job, "Completed")
    assert done is not None and done["reason"] == "PodNeverStarted", done
    assert "CreateContainerConfigError" in done["message"] and "no-such" in done["message"], done["message"]
    assert r.wait_job("after-unkeyed")["status"]["phase"] == "Succeeded"


def test_a_secret_the_policy_does_not_allow_fails_the_job_pod_refused(release: Release) -> None:
    """The chart's admission policy (issue 31 item 10): a Trigger naming a Secret that is not the chart's
    fails its Job at the Pod's creation, naming the policy, and the next job runs."""
    r = release
    r.trigger("prying", resume=False, credentials={"OPENAI_API_KEY": {"secretName": "someone-elses", "key": "k"}})
    job = r.run("prying-1", trigger="prying", issue=807)
    assert job["status"]["phase"] == "Failed", json.dumps(job["status"])
    started = r.condition(job, "Started")
    assert started is not None and started["reason"] == "PodRefused", started
    assert "ValidatingAdmissionPolicy" in started["message"], started["message"]
    assert "reads only its own token Secret" in started["message"], started["message"]
    assert r.pods_of("prying-1") == []
    assert r.run("after-prying", issue=808)["status"]["phase"] == "Succeeded"


def test_run_secrets_reach_the_job_as_read_only_files_and_never_in_the_pod_spec(release: Release) -> None:
    r = release
    value = "deploy_" + "k" * 33
    r.kube.create(f"/api/v1/namespaces/{r.ns}/secrets", {
        "metadata": {"name": "deploy-keys"}, "stringData": {"token": value}})
    r.trigger("deployer", resume=False, secrets=["deploy-keys"])
    path = f"{RUN_SECRETS_DIR}/deploy-keys/token"
    job = r.run("deployer-1", trigger="deployer", issue=805, comment=f"@pi file-sha={path}")
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    [pod] = r.pods_of("deployer-1")
    assert value not in json.dumps(pod), "the Secret's value is in the Pod spec"
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    [mount] = [m for m in mounts if m["mountPath"] == f"{RUN_SECRETS_DIR}/deploy-keys"]
    assert mount["readOnly"] is True
    expected = hashlib.sha256(value.encode()).hexdigest()
    assert f"file-sha {path} sha256:{expected}" in r.pod_log(pod["metadata"]["name"])


def test_a_trigger_naming_a_secret_the_policy_does_not_list_fails_its_job_pod_refused(release: Release) -> None:
    r = release
    r.trigger("unlisted", resume=False, secrets=["not-listed"])
    job = r.run("unlisted-1", trigger="unlisted", issue=806)
    assert job["status"]["phase"] == "Failed", json.dumps(job["status"])
    started = r.condition(job, "Started")
    assert started is not None and started["reason"] == "PodRefused", started
    assert "ValidatingAdmissionPolicy" in started["message"] and "mounts only emptyDirs" in started["message"], (
        started["message"])
    assert r.pods_of("unlisted-1") == []
