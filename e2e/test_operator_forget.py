"""Forgetting wins: ``kubectl delete sessionkey`` while a job on that key runs, on the real apiserver.

The job (``@pi hold=release``) resumed the conversation and is still running when its SessionKey is
deleted. Before the fix its promotion re-created the key directory with the deleted conversation plus
the new turn, a new SessionKey appeared, and the next job resumed it. Now the job completes without
promoting (its ``Completed`` condition says why), the key stays gone, no SessionKey comes back, and the
next delivery starts a fresh conversation. Also with the operator killed between the deletion and the
job's end (the finalizer's ``key-forgotten`` failpoint: the store has forgotten, the finalizer is not
yet removed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import Release, base_values, installed, merge
from pidispatch.store.keys import issue_key
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

MARKS = "/var/lib/pi-dispatch/jobs/.failpoints"
KILLED_ISSUE = 702


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet) -> Iterator[Release]:
    killed_key = issue_key("github", "acme/widgets", KILLED_ISSUE)
    values = merge(base_values(PIDISPATCH_FAILPOINT=f"key-forgotten@{killed_key}", PIDISPATCH_FAILPOINT_MARK=MARKS),
                   {"sessions": {"enabled": True}})
    with installed(cluster, kube, "forget", values) as r:
        (r.staging / ".failpoints").mkdir(exist_ok=True)
        yield r


def restarts(r: Release) -> int:
    return sum(s.get("restartCount", 0) for p in r.operator_pods()
               for s in (p.get("status") or {}).get("containerStatuses") or [])


@pytest.mark.parametrize("issue", [701, KILLED_ISSUE], ids=["operator running", "operator killed after the forget"])
def test_a_key_forgotten_while_its_job_runs_stays_forgotten(release: Release, issue: int) -> None:
    r = release
    key = issue_key("github", "acme/widgets", issue)
    assert key is not None
    seed = r.run(f"seed-{issue}", issue=issue)
    assert seed["status"]["phase"] == "Succeeded"
    assert r.key_dir(key).is_dir()
    before = restarts(r)

    name = f"inflight-{issue}"
    r.job(name, issue=issue, comment="@pi hold=release")
    running = r.wait_job(name, phases=("Running",))
    assert running["status"]["session"]["reason"] == "resumed", "the job holds a copy of the conversation"

    r.kube.delete(r.path("sessionkeys", key))
    wait_until(f"SessionKey {key} gone", lambda: r.sessionkey(key) is None, timeout=120)
    assert not r.key_dir(key).exists()
    if issue == KILLED_ISSUE:
        assert (r.staging / ".failpoints" / f"key-forgotten@{key}").exists(), "the failpoint never fired"
        assert restarts(r) > before, "the operator was not restarted"

    (r.staging / running["metadata"]["uid"] / "session" / "release").touch()
    job = r.wait_job(name)
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    completed = r.condition(job, "Completed")
    assert completed is not None and completed["reason"] == "KeyForgotten", completed
    assert job["status"]["session"]["reason"] == "absent", "what the next delivery finds"
    assert len(r.pods_of(name)) == 1
    assert not r.key_dir(key).exists(), "the job's promotion brought the forgotten conversation back"
    assert r.sessionkey(key) is None, "a SessionKey was re-created from the forgotten job"

    nxt = r.run(f"after-{issue}", issue=issue)
    assert (nxt["status"]["session"]["resumed"], nxt["status"]["session"]["reason"]) == (False, "absent")
    assert r.sessionkey(key) is not None, "a new conversation gets a SessionKey again"
