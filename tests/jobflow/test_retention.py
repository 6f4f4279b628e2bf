"""Retention and uninstall (issue 14 item 6), the pure parts: what is due when, one pass over many Jobs, what
the pre-delete hook stops, and the claims a start refuses.

The same on the local control plane: ``e2e/test_operator_retention.py`` and ``e2e/test_chart_uninstall.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.views import JobView
from pidispatch.contract import JOB_LABEL, MANAGED_BY
from pidispatch.doctor.check import Status
from pidispatch.doctor.cluster import terminating_claims
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.retention import Delete, Kind, RetainedPod, Retention, check_interval, due, finished_at
from pidispatch.kubeapi import ApiError
from pidispatch.manifests.pod import token_secret_name
from pidispatch.settings import ConfigError, OperatorSettings, Settings
from pidispatch.uninstall import split_for_uninstall
from testkit.memoryapi import JOBS, NS, PODS, MemoryApi

DONE = "2030-01-01T00:00:00Z"
T0 = finished_at(JobView.of({"status": {"completedAt": DONE}})) or 0.0
UID = "0b7e5c1e-0000-4000-8000-000000000001"


def settings(retention: int = 600, ttl: int | None = None) -> OperatorSettings:
    return OperatorSettings(store=Settings(), job_pod_retention_seconds=retention, job_ttl_seconds_after_finished=ttl)


def job(phase: str | None = "Succeeded", completed: str | None = DONE, **status: Any) -> dict[str, Any]:
    st: dict[str, Any] = {"phase": phase, **status}
    if completed is not None:
        st["completedAt"] = completed
    return {"metadata": {"name": "j1", "uid": UID}, "status": st}


def pod(phase: str = "Succeeded", owner: str = UID, name: str = "pij-j1", **md: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"pod-{name}", **md,
                         "ownerReferences": [{"kind": "Job", "name": "j1", "uid": owner, "controller": True}]},
            "status": {"phase": phase}}


POD = Delete(Kind.POD, "pij-j1", "pod-pij-j1", "j1", 601)
SECRET = Delete(Kind.SECRET, token_secret_name("j1", UID), None, "j1", 601)
REFUSED_UNCOMMENTED = {"reason": "sessions-dir-unset"}  # a refusal whose issue comment is still owed

DUE = [
    ("a finished job's pod and secret go after the retention", job(), [pod()], 601, {}, [POD, SECRET]),
    ("not before", job(), [pod()], 599, {}, []),
    ("a failed job's too", job("Failed"), [pod("Failed")], 601, {}, [POD, SECRET]),
    ("retention 0: as soon as the outcome is recorded", job(), [pod()], 0, {"retention": 0},
     [Delete(Kind.POD, "pij-j1", "pod-pij-j1", "j1", 0),
      Delete(Kind.SECRET, token_secret_name("j1", UID), None, "j1", 0)]),
    ("a running pod is never deleted", job(), [pod("Running")], 10**6, {}, []),
    ("a pending pod is never deleted", job(), [pod("Pending")], 10**6, {}, []),
    ("nor is the job of a running pod, whatever its ttl", job(), [pod("Running")], 10**6, {"ttl": 0}, []),
    ("a running job keeps everything", job("Running", None), [pod("Running")], 10**6, {"ttl": 0}, []),
    ("a queued job too", job("Queued", None), [], 10**6, {"ttl": 0}, []),
    ("a job without completedAt is left alone", job(completed=None), [pod()], 10**6, {"ttl": 0}, []),
    ("an unreadable completedAt too", job(completed="yesterday"), [pod()], 10**6, {"ttl": 0}, []),
    ("another job's pod of the same name is not this job's", job(), [pod(owner="other")], 601, {}, [SECRET]),
    ("a pod already being deleted is not deleted again", job(), [pod(deletionTimestamp=DONE)], 601, {}, [SECRET]),
    ("the secret once per process", job(), [pod()], 601, {"secret_gone": True}, [POD]),
    ("no pod left (never started): the secret still goes", job("Failed"), [], 601, {}, [SECRET]),
    ("ttl: the job itself goes, its pod and secret by garbage collection", job(), [pod()], 3600, {"ttl": 3600},
     [Delete(Kind.JOB, "j1", UID, "j1", 3600)]),
    ("ttl not reached: only the retention", job(), [pod()], 3599, {"ttl": 3600}, [
        Delete(Kind.POD, "pij-j1", "pod-pij-j1", "j1", 3599),
        Delete(Kind.SECRET, token_secret_name("j1", UID), None, "j1", 3599)]),
    ("ttl shorter than the retention", job(), [pod()], 60, {"ttl": 60}, [Delete(Kind.JOB, "j1", UID, "j1", 60)]),
    ("a refused job whose comment is owed waits for it", job("Refused", **REFUSED_UNCOMMENTED), [], 10**6,
     {"ttl": 0, "secret_gone": True}, []),
    ("a refused job whose comment is recorded goes", job("Refused", reason="sessions-dir-unset", conditions=[
        {"type": "Commented", "status": "True", "reason": "Posted", "message": "",
         "lastTransitionTime": DONE}]), [], 10, {"ttl": 0},
     [Delete(Kind.JOB, "j1", UID, "j1", 10)]),
    ("a job being deleted is left to the garbage collector", {**job(), "metadata": {
        "name": "j1", "uid": UID, "deletionTimestamp": DONE}}, [pod()], 10**6, {"ttl": 0}, []),
]


@pytest.mark.parametrize(("body", "pods", "age", "opts", "expected"), [c[1:] for c in DUE], ids=[c[0] for c in DUE])
def test_what_is_due(body: dict, pods: list, age: float, opts: dict, expected: list[Delete]) -> None:
    s = settings(opts.get("retention", 600), opts.get("ttl"))
    read = [RetainedPod.of(pod) for pod in pods]
    assert due(JobView.of(body), read, T0 + age, s, secret_gone=opts.get("secret_gone", False)) == expected


@pytest.mark.parametrize(("retention", "ttl", "interval"), [
    (600, None, 60), (0, None, 5), (20, None, 5), (100, None, 25), (600, 40, 10), (10**6, 10**7, 60)])
def test_retention_looks_often_enough_for_the_shorter_period(retention: int, ttl: int | None, interval: float) -> None:
    assert check_interval(settings(retention, ttl)) == interval


# -- settings ---------------------------------------------------------------------------------------------------
def test_retention_settings_defaults_and_values() -> None:
    s = OperatorSettings.from_env({})
    assert (s.job_pod_retention_seconds, s.job_ttl_seconds_after_finished) == (600, None)
    s = OperatorSettings.from_env({"PI_DISPATCH_JOB_POD_RETENTION_SECONDS": "0",
                                   "PI_DISPATCH_JOB_TTL_SECONDS_AFTER_FINISHED": "86400"})
    assert (s.job_pod_retention_seconds, s.job_ttl_seconds_after_finished) == (0, 86400)
    with pytest.raises(ConfigError, match="PI_DISPATCH_JOB_TTL_SECONDS_AFTER_FINISHED"):
        OperatorSettings.from_env({"PI_DISPATCH_JOB_TTL_SECONDS_AFTER_FINISHED": ""})  # empty is not "never"


@pytest.mark.parametrize("variable", ["PI_DISPATCH_JOB_POD_RETENTION_SECONDS",
                                      "PI_DISPATCH_JOB_TTL_SECONDS_AFTER_FINISHED"])
@pytest.mark.parametrize("value", ["-1", "1.5", "07", "1e3", "2147483648", "never"])
def test_malformed_retention_is_a_config_error(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        OperatorSettings.from_env({variable: value})
    assert err.value.variable == variable


# -- the pre-delete hook and the claims a start refuses -------------------------------------------------------
def test_uninstall_names_running_pods_and_deletes_finished_ones_quietly() -> None:
    pods = [pod("Succeeded", name="pij-a"), pod("Running", name="pij-b"), pod("Failed", name="pij-c"),
            pod("Pending", name="pij-d"), pod("Succeeded", name="pij-e", deletionTimestamp=DONE)]
    assert split_for_uninstall(pods) == (["pij-a", "pij-c"], ["pij-b", "pij-d"])


def pvc(name: str, deleting: bool) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "finalizers": ["kubernetes.io/pvc-protection"]}
    if deleting:
        md["deletionTimestamp"] = DONE
    return {"metadata": md, "status": {"phase": "Bound"}}


def mounting(name: str, claim: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"volumes": [
        {"name": "session", "persistentVolumeClaim": {"claimName": claim}}, {"name": "w", "emptyDir": {}}]}}


def test_a_claim_being_deleted_is_refused_naming_the_pods_that_hold_it() -> None:
    pods = [mounting("pij-old", "rel-staging"), mounting("pij-older", "rel-staging"), mounting("web", "other")]
    [check] = terminating_claims([pvc("rel-staging", True), pvc("rel-sessions", False)], pods, "pi")
    assert check.status is Status.FAIL and check.name == "claims"
    assert "PVC rel-staging is being deleted" in check.message and "pij-old, pij-older" in check.message
    assert "web" not in check.message
    assert check.fix == ("kubectl delete pod pij-old pij-older -n pi && "
                         "kubectl wait --for=delete pvc/rel-staging -n pi --timeout=5m")


def test_a_claim_being_deleted_that_nothing_holds_says_to_wait() -> None:
    [check] = terminating_claims([pvc("rel-sessions", True)], [], "pi")
    assert "kubernetes.io/pvc-protection" in check.message
    assert check.fix == "kubectl wait --for=delete pvc/rel-sessions -n pi --timeout=5m"


def test_claims_not_being_deleted_are_fine() -> None:
    assert terminating_claims([pvc("rel-staging", False)], [mounting("pij-a", "rel-staging")], "pi") == []


class DeletingApi(MemoryApi):
    """The in-memory apiserver with the DELETE retention sends (preconditions on the uid), recorded."""

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> None:
        assert method == "DELETE"
        wanted = ((body or {}).get("preconditions") or {}).get("uid")
        found = self.get_or_none(path)
        if found is None and "/secrets/" not in path:
            raise ApiError(404, method, path, "not found")
        if found is not None and wanted is not None and found["metadata"]["uid"] != wanted:
            raise ApiError(409, method, path, "precondition failed")
        if found is not None:
            self.delete(path)
        else:
            self.deletes.append(path)


def test_a_pass_over_many_jobs_deletes_each_jobs_own_pod_under_that_job(tmp_path: Path) -> None:
    """One pass, many ended Jobs with their Pods in one list: each Pod goes under its own Job, a running Job
    keeps its Pod, and a Job without a Pod still loses its Secret (the Pods are grouped by owner once a pass)."""
    api = DeletingApi()
    ended = [f"j{n}" for n in range(5)]
    jobs = {name: api.create(JOBS, {"metadata": {"name": name}, "spec": {}}) for name in [*ended, "running", "bare"]}
    for name, body in jobs.items():
        if name == "bare":
            continue
        api.create(PODS, {"metadata": {"name": f"pij-{name}", "labels": {JOB_LABEL: name, **MANAGED_BY},
                                       "ownerReferences": [{"kind": "Job", "name": name, "controller": True,
                                                            "uid": body["metadata"]["uid"]}]},
                          "status": {"phase": "Running" if name == "running" else "Succeeded"}})
        api.patch(f"{JOBS}/{name}/status", {"status": {"phase": "Running" if name == "running" else "Succeeded",
                                                       "completedAt": DONE}})
    api.patch(f"{JOBS}/bare/status", {"status": {"phase": "Failed", "completedAt": DONE}})
    pass_ = Retention(settings(), Cluster(api, NS), wall=lambda: T0 + 601)  # type: ignore[arg-type]
    done = pass_.run_once()
    pods = {(d.job, d.name) for d in done if d.kind is Kind.POD}
    assert pods == {(name, f"pij-{name}") for name in ended}
    assert {d.job for d in done if d.kind is Kind.SECRET} == {*ended, "bare"}
    assert [p["metadata"]["name"] for p in api.pods()] == ["pij-running"]
