"""`helm uninstall` after jobs have run, on the local control plane (issue 14 item 6).

Tried as an operator would: jobs with a session mount ran (their Pods finished, one is still running),
then the release is uninstalled. The kube-controller-manager's pvc-protection controller keeps a claim
while any Pod names it, ended Pods included, so without the chart's pre-delete hook the staging claim
stays ``Terminating`` and ``helm uninstall --wait`` times out; a following ``helm install`` would adopt
it while it is being deleted. With the hook the uninstall completes on its own and the next install gets
a fresh claim; an install that would adopt a terminating claim is refused, naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import CHART, RELEASE, Release, base_values, fresh_namespace, merge
from pidispatch.contract import JOB_LABEL, MANAGED_BY, RELEASE_LABEL
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

STAGING, STORE = f"{RELEASE}-staging", f"{RELEASE}-sessions"


@pytest.fixture
def release(cluster: Cluster, kube: Kube, kubelet: object) -> Iterator[Release]:
    ns = fresh_namespace(kube, "uninstall")
    r = Release(cluster, kube, ns, merge(base_values(), {"sessions": {"enabled": True}, "maxConcurrentJobs": 2}))
    try:
        yield r
    finally:
        if r.helm("status", RELEASE, check=False).returncode == 0:
            r.uninstall()
        for sk in kube.list(r.path("sessionkeys")):  # no operator is left to run their finalizer
            kube.patch(r.path("sessionkeys", sk["metadata"]["name"]), {"metadata": {"finalizers": []}})
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


def pvc(r: Release, name: str) -> dict[str, Any] | None:
    return r.kube.get_or_none(f"/api/v1/namespaces/{r.ns}/persistentvolumeclaims/{name}")


def job_pods(r: Release, release: str = RELEASE) -> list[dict[str, Any]]:
    return r.kube.list(f"/api/v1/namespaces/{r.ns}/pods", labelSelector=f"{JOB_LABEL},{RELEASE_LABEL}={release}")


def another_releases_job_pod(r: Release) -> dict[str, Any]:
    """A job Pod of another release in the same namespace, held Pending by a scheduling gate (the test
    kubelet binds every other unscheduled Pod)."""
    return r.kube.create(f"/api/v1/namespaces/{r.ns}/pods", {
        "metadata": {"name": "pij-theirs", "labels": {JOB_LABEL: "theirs", RELEASE_LABEL: "other", **MANAGED_BY}},
        "spec": {"schedulingGates": [{"name": "pi-dispatch.dev/e2e-hold"}], "automountServiceAccountToken": False,
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {
                     "type": "RuntimeDefault"}},
                 "containers": [{"name": "pi", "image": "ghcr.io/pi-dispatch/job:other", "securityContext": {
                     "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}})


def run_jobs(r: Release) -> dict[str, Any]:
    """Two finished jobs with a session mount and one still running; the running one's body."""
    r.install()
    r.trigger("fix")
    for name, issue in (("first", 1), ("second", 2)):
        job = r.run(name, issue=issue)
        assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    r.job("held", issue=3, comment="@pi hold=never")
    running = r.wait_job("held", phases=("Running",))
    wait_until("the held job's Pod Running", lambda: [p for p in r.pods_of("held")
                                                     if (p.get("status") or {}).get("phase") == "Running"], timeout=60)
    for pod in job_pods(r):
        claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                  if "persistentVolumeClaim" in v]
        assert claims == [STAGING], f"{pod['metadata']['name']} mounts no session: {claims}"
        [workspace] = [v for v in pod["spec"]["volumes"] if v["name"] == "workspace"]
        assert workspace["emptyDir"] == {"sizeLimit": "10Gi"}, "the chart's default workspace bound"
    return running


def test_uninstall_completes_on_its_own_and_the_next_install_gets_a_fresh_claim(release: Release) -> None:
    r = release
    run_jobs(r)
    staging_uid, store_uid = pvc(r, STAGING)["metadata"]["uid"], pvc(r, STORE)["metadata"]["uid"]
    keys = {sk["metadata"]["name"] for sk in r.kube.list(r.path("sessionkeys"))}
    assert len(keys) == 3
    theirs = another_releases_job_pod(r)

    uninstalled = r.helm("uninstall", RELEASE, "--wait", "--timeout", "120s", check=False)
    assert uninstalled.returncode == 0, uninstalled.stdout + uninstalled.stderr
    assert pvc(r, STAGING) is None, "helm uninstall --wait returned with the staging claim still there"
    assert job_pods(r) == [], "a job Pod outlived the uninstall"
    kept_pod = r.kube.get_or_none(f"/api/v1/namespaces/{r.ns}/pods/pij-theirs")
    assert kept_pod is not None and kept_pod["metadata"]["uid"] == theirs["metadata"]["uid"], \
        "the uninstall deleted another release's job Pod"
    assert not kept_pod["metadata"].get("deletionTimestamp"), "the uninstall deleted another release's job Pod"
    kept = pvc(r, STORE)
    assert kept is not None and kept["metadata"]["uid"] == store_uid and not kept["metadata"].get("deletionTimestamp")
    assert {sk["metadata"]["name"] for sk in r.kube.list(r.path("sessionkeys"))} == keys, "SessionKeys stay"
    assert r.kube.get_or_none(r.path("jobs", "first")) is not None, "pijobs stay (CRs; helm keeps the CRDs)"
    hook_logs = list(r.cluster.kubelet_dir.glob(f"pods/{r.ns}_{RELEASE}-stop-jobs-*/logs/*.log"))
    said = "".join(f.read_text(errors="replace") for f in hook_logs)
    assert "job Pod pij-held was still running: stopped by the uninstall" in said, said

    r.install()
    fresh = pvc(r, STAGING)
    assert fresh is not None and fresh["metadata"]["uid"] != staging_uid
    assert not fresh["metadata"].get("deletionTimestamp")
    assert pvc(r, STORE)["metadata"]["uid"] == store_uid, "the kept store is adopted again"
    held = r.wait_job("held")
    assert held["status"]["phase"] == "Failed", "the job stopped by the uninstall is recorded when an operator runs"
    assert r.run("after", issue=1)["status"]["session"]["resumed"] is True, "the kept conversation resumes"


def test_an_install_never_adopts_a_claim_that_is_being_deleted(release: Release) -> None:
    r = release
    run_jobs(r)
    r.kube.delete(r.path("jobs", "held"))  # (its Pod goes by garbage collection: only finished Pods are left)
    wait_until("the held job's Pod gone", lambda: not r.pods_of("held"), timeout=60)
    finished = sorted(p["metadata"]["name"] for p in job_pods(r))
    assert finished == ["pij-first", "pij-second"]

    # What an uninstall without the hook leaves: finished Pods keep the claim (pvc-protection).
    r.helm("uninstall", RELEASE, "--no-hooks")
    wait_until("the staging claim Terminating", lambda: (pvc(r, STAGING) or {}).get("metadata", {}).get(
        "deletionTimestamp"), timeout=30)
    wait_until("the operator Pod gone", lambda: not r.operator_pods(), timeout=90)
    stuck = pvc(r, STAGING)
    assert stuck is not None and "kubernetes.io/pvc-protection" in stuck["metadata"]["finalizers"], \
        "ended Pods hold the claim on this control plane"

    path = r._values_file()
    try:
        refused = r.helm("install", RELEASE, str(CHART), "--values", path, check=False)
    finally:
        os.unlink(path)
    assert refused.returncode != 0, "the install adopted a claim that is being deleted"
    assert f"PVC {STAGING} in {r.ns} is still being deleted" in refused.stderr, refused.stderr
    assert pvc(r, STAGING)["metadata"]["uid"] == stuck["metadata"]["uid"]

    for name in finished:
        r.kube.delete(f"/api/v1/namespaces/{r.ns}/pods/{name}")
    wait_until("the staging claim gone once no Pod holds it", lambda: pvc(r, STAGING) is None, timeout=60)
    r.install()
    assert pvc(r, STAGING)["metadata"]["uid"] != stuck["metadata"]["uid"]
