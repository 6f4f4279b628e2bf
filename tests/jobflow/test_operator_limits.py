"""Limits (issue 14 item 5): the run timeout, the container's resources, and a Pod that never starts.

The dispatcher against the in-memory apiserver of ``test_operator_queue``; the same on the local control
plane with a kubelet that enforces ``activeDeadlineSeconds`` and keeps unpullable Pods Pending is in
``e2e/test_operator_limits.py``.
"""

from __future__ import annotations

import calendar
import time
from pathlib import Path
from typing import Any

import pytest

from pidispatch.jobflow.dispatcher import Dispatcher
from pidispatch.jobflow.podview import PodView
from pidispatch.jobflow.slots import Slots
from pidispatch.settings import ConfigError, OperatorSettings, Settings
from testkit.jobflow import Clock, condition, new_job, phase, pump
from testkit.memoryapi import PODS, TRIGGERS, MemoryApi

CREATED = "2030-01-01T00:00:00Z"
EPOCH = calendar.timegm(time.strptime(CREATED, "%Y-%m-%dT%H:%M:%SZ"))


def dispatcher(api: MemoryApi, clock: Clock, tmp_path: Path, now: float, **settings: Any) -> Dispatcher:
    s = OperatorSettings(store=Settings(), staging_dir=str(tmp_path), max_concurrent_jobs=1, **settings)
    d = Dispatcher(s, api, "ns", wall=lambda: now)  # type: ignore[arg-type]
    d.slots = Slots(1, clock=clock)
    return d


def test_the_run_timeout_and_resources_reach_the_pod(api: MemoryApi, clock: Clock, tmp_path: Path) -> None:
    d = dispatcher(api, clock, tmp_path, EPOCH, job_timeout_seconds=900,
                   job_resources=(("limits", (("memory", "2Gi"),)),))
    d.on_job("ADDED", new_job(api, "a"))
    pump(d)
    [pod] = api.pods()
    assert pod["spec"]["activeDeadlineSeconds"] == 900
    # with the deployment's disk bound (issue 31), and the workspace's
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"ephemeral-storage": "2Gi"},
                                                         "limits": {"memory": "2Gi", "ephemeral-storage": "12Gi"}}
    [workspace] = [v for v in pod["spec"]["volumes"] if v["name"] == "workspace"]
    assert workspace["emptyDir"] == {"sizeLimit": "10Gi"}


def test_a_trigger_s_own_timeout_and_resources_win(api: MemoryApi, clock: Clock, tmp_path: Path) -> None:
    api.patch(f"{TRIGGERS}/fix", {"spec": {"run": {"timeoutSeconds": 120,
                                                   "resources": {"requests": {"cpu": "500m"}}}}})
    d = dispatcher(api, clock, tmp_path, EPOCH, job_timeout_seconds=900,
                   job_resources=(("limits", (("memory", "2Gi"),)),))
    d.on_job("ADDED", new_job(api, "a"))
    pump(d)
    [pod] = api.pods()
    assert pod["spec"]["activeDeadlineSeconds"] == 120
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "500m", "ephemeral-storage": "2Gi"},
                                                         "limits": {"ephemeral-storage": "12Gi"}}


def test_no_timeout_means_no_deadline(api: MemoryApi, clock: Clock, tmp_path: Path) -> None:
    d = dispatcher(api, clock, tmp_path, EPOCH, job_timeout_seconds=0)
    d.on_job("ADDED", new_job(api, "a"))
    pump(d)
    assert "activeDeadlineSeconds" not in api.pods()[0]["spec"]


def test_a_job_past_its_deadline_fails_deadline_exceeded(api: MemoryApi, clock: Clock, tmp_path: Path) -> None:
    d = dispatcher(api, clock, tmp_path, EPOCH)
    d.on_job("ADDED", new_job(api, "a"))
    pump(d)
    [pod] = api.pods()
    path = f"{PODS}/{pod['metadata']['name']}"
    api.patch(path + "/status", {"status": {"phase": "Failed", "reason": "DeadlineExceeded"}})
    d.on_pod(api.get(path))
    assert phase(api, "a") == "Failed"
    done = condition(api, "a", "Completed")
    assert (done["status"], done["reason"]) == ("False", "DeadlineExceeded")
    assert "3600 s" in done["message"] and "nothing was promoted" in done["message"]


def test_a_pod_that_never_starts_fails_its_job_and_frees_the_slot(api: MemoryApi, clock: Clock,
                                                                  tmp_path: Path) -> None:
    d = dispatcher(api, clock, tmp_path, EPOCH + 700)  # the in-memory apiserver stamps creations at 00:00:NN
    d.on_job("ADDED", new_job(api, "stuck"))
    d.on_job("ADDED", new_job(api, "next", issue=2))
    pump(d)
    assert (phase(api, "stuck"), phase(api, "next")) == ("Running", None), "one slot: the second waits"
    [pod] = api.pods()
    path = f"{PODS}/{pod['metadata']['name']}"
    api.patch(path + "/status", {"status": {"phase": "Pending", "containerStatuses": [
        {"name": "pi", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}})
    d.on_pod(api.get(path))
    assert phase(api, "stuck") == "Failed"
    done = condition(api, "stuck", "Completed")
    assert done["reason"] == "PodNeverStarted" and "ImagePullBackOff" in done["message"], done
    assert api.get_or_none(path) is None, "the Pod that might still start was deleted"
    pump(d)
    assert phase(api, "next") == "Running", "the slot went to the next queued Job"


def test_a_pod_within_its_start_timeout_is_left_alone(api: MemoryApi, clock: Clock, tmp_path: Path) -> None:
    d = dispatcher(api, clock, tmp_path, EPOCH + 30)
    d.on_job("ADDED", new_job(api, "slow"))
    pump(d)
    [pod] = api.pods()
    d.on_pod(pod)
    assert phase(api, "slow") == "Running"
    assert api.pods(), "not deleted"


@pytest.mark.parametrize(("variable", "value"), [
    ("PI_DISPATCH_JOB_TIMEOUT_SECONDS", "-1"), ("PI_DISPATCH_JOB_TIMEOUT_SECONDS", "1h"),
    ("PI_DISPATCH_JOB_START_TIMEOUT_SECONDS", "5"),
    ("PI_DISPATCH_JOB_RESOURCES", '{"limits": {"memory": ""}}'), ("PI_DISPATCH_JOB_RESOURCES", '{"cpu": "1"}'),
    ("PI_DISPATCH_JOB_RESOURCES", "[]"),
])
def test_malformed_limit_settings_are_configuration_errors(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        OperatorSettings.from_env({variable: value})
    assert variable in str(refused.value)


def test_resources_from_helm_may_hold_whole_numbers() -> None:
    s = OperatorSettings.from_env({"PI_DISPATCH_JOB_RESOURCES": '{"requests": {"cpu": 1, "memory": "1Gi"}}'})
    assert s.job_resources == (("requests", (("cpu", "1"), ("memory", "1Gi"))),)


# ---- model credentials and models.json (issue 14 item 4) --------------------------------------------------

def test_credentials_reach_the_pod_by_secret_reference_the_trigger_s_over_the_deployment_s(
        api: MemoryApi, clock: Clock, tmp_path: Path) -> None:
    api.patch(f"{TRIGGERS}/fix", {"spec": {"run": {"credentials": {
        "OPENAI_API_KEY": {"secretName": "team-keys", "key": "openai"}}}}})
    d = dispatcher(api, clock, tmp_path, EPOCH, job_credentials=(
        ("ANTHROPIC_API_KEY", "org-keys", "anthropic"), ("OPENAI_API_KEY", "org-keys", "openai")),
        job_env=(("OPENAI_API_KEY", "a plain value that must not win"),))
    d.on_job("ADDED", new_job(api, "a"))
    pump(d)
    [pod] = api.pods()
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["OPENAI_API_KEY"] == {"name": "OPENAI_API_KEY",
                                     "valueFrom": {"secretKeyRef": {"name": "team-keys", "key": "openai"}}}
    assert env["ANTHROPIC_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "org-keys", "key": "anthropic"}
    assert "a plain value" not in str(pod)


def test_models_json_is_mounted_read_only_into_a_writable_agent_dir(api: MemoryApi, clock: Clock,
                                                                    tmp_path: Path) -> None:
    d = dispatcher(api, clock, tmp_path, EPOCH, job_models_configmap="pi-models")
    d.on_job("ADDED", new_job(api, "a"))
    pump(d)
    [pod] = api.pods()
    container = pod["spec"]["containers"][0]
    assert {e["name"]: e.get("value") for e in container["env"]}["PI_CODING_AGENT_DIR"] == "/pi-agent"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/pi-agent/models.json"] == {"name": "models", "mountPath": "/pi-agent/models.json",
                                              "subPath": "models.json", "readOnly": True}
    assert mounts["/pi-agent"]["name"] == "agent" and not mounts["/pi-agent"].get("readOnly")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["agent"] == {"name": "agent", "emptyDir": {}}
    assert volumes["models"]["configMap"] == {"name": "pi-models",
                                              "items": [{"key": "models.json", "path": "models.json"}]}


@pytest.mark.parametrize(("raw", "named"), [
    ('{"GH_TOKEN": {"secretName": "s", "key": "k"}}', "forge token"),
    ('{"PI_SESSION_FILE": {"secretName": "s", "key": "k"}}', "set by the operator"),
    ('{"OPENAI_API_KEY": {"secretName": "S_bad", "key": "k"}}', "secretName"),
    ('{"OPENAI_API_KEY": "sk-plain"}', "secretName"),
    ('{"1X": {"secretName": "s", "key": "k"}}', "not an environment variable name"),
])
def test_malformed_credentials_are_configuration_errors(raw: str, named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        OperatorSettings.from_env({"PI_DISPATCH_JOB_CREDENTIALS": raw})
    assert "PI_DISPATCH_JOB_CREDENTIALS" in str(refused.value) and named in str(refused.value)


def test_a_pod_that_started_meanwhile_is_not_given_up(api: MemoryApi, clock: Clock, tmp_path: Path) -> None:
    """The resync saw it Pending past the timeout; by the time the Job's lock is held it runs: left alone."""
    d = dispatcher(api, clock, tmp_path, EPOCH + 700)
    d.on_job("ADDED", new_job(api, "late-start"))
    pump(d)
    [pod] = api.pods()
    stale = {**pod, "status": {"phase": "Pending"}}
    api.patch(f"{PODS}/{pod['metadata']['name']}/status", {"status": {"phase": "Running"}})
    d.give_up("late-start", PodView.of(stale), "ImagePullBackOff: seen a moment ago")
    assert phase(api, "late-start") == "Running"
    assert api.pods(), "a running Pod was deleted"


@pytest.mark.parametrize("exit_code", [137, 0], ids=["the container died", "pi carried on and exited 0"])
def test_a_job_killed_for_memory_fails_oomkilled_with_its_limit_named(api: MemoryApi, clock: Clock, tmp_path: Path,
                                                                      exit_code: int) -> None:
    d = dispatcher(api, clock, tmp_path, EPOCH, job_resources=(("limits", (("memory", "320Mi"),)),))
    d.on_job("ADDED", new_job(api, "a"))
    pump(d)
    [pod] = api.pods()
    path = f"{PODS}/{pod['metadata']['name']}"
    api.patch(path + "/status", {"status": {"phase": "Failed" if exit_code else "Succeeded", "containerStatuses": [
        {"name": "pi", "state": {"terminated": {"exitCode": exit_code, "reason": "OOMKilled"}}}]}})
    d.on_pod(api.get(path))
    assert phase(api, "a") == "Failed"
    done = condition(api, "a", "Completed")
    assert done["reason"] == "OOMKilled", done
    assert "320Mi" in done["message"] and "nothing was promoted" in done["message"]


def test_a_job_that_ends_normally_is_not_taken_for_oomkilled(api: MemoryApi, clock: Clock, tmp_path: Path) -> None:
    d = dispatcher(api, clock, tmp_path, EPOCH)
    d.on_job("ADDED", new_job(api, "a"))
    pump(d)
    [pod] = api.pods()
    path = f"{PODS}/{pod['metadata']['name']}"
    api.patch(path + "/status", {"status": {"phase": "Failed", "containerStatuses": [
        {"name": "pi", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}})
    d.on_pod(api.get(path))
    assert condition(api, "a", "Completed")["reason"] == "PodFailed"
