"""The operator end to end: installed by its Helm chart, running as the chart's ServiceAccount, on the
real kube-apiserver with the test kubelet; a scripted stand-in (``testkit/fakepi.py``) plays the job image.

What a user watches (``kubectl get pijobs,sessionkeys``) is what these tests assert: the Job's phase
and ``status.session``, the SessionKey's conditions, and the store's bytes on the PVC.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import DAY, TAMPER, TAMPER_BOUNDS, Release, base_values, installed, merge, received_digest
from pidispatch.store.keys import issue_key
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

BOUNDS = TAMPER_BOUNDS


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet) -> Iterator[Release]:
    with installed(cluster, kube, "operator", merge(base_values(), {"sessions": {"enabled": True, **BOUNDS}})) as r:
        yield r


def key_of(issue: int) -> str:
    key = issue_key("github", "acme/widgets", issue)
    assert key is not None
    return key


_issues = iter(range(100, 100000))


def next_issue() -> int:
    return next(_issues)


def session(job: dict) -> dict:
    return job["status"].get("session") or {}


# ---- the main flow ----------------------------------------------------------------------------------

def test_cold_then_resumed_on_the_same_key(release: Release) -> None:
    issue = next_issue()
    key = key_of(issue)
    first = release.run(f"cold-{issue}", issue=issue)
    assert first["status"]["phase"] == "Succeeded"
    assert session(first) == {"resumed": False, "reason": "absent", "bytes": first["status"]["session"]["bytes"],
                              "redacted": 0}, "the scan before the promotion ran and found nothing"
    assert session(first)["bytes"] > 0
    assert first["status"]["tokens"]["total"] == 610
    stored = release.digest(key)
    assert stored is not None
    sk = release.sessionkey(key)
    assert sk and sk["spec"] == {"forge": "github", "repository": "acme/widgets", "branch": f"pi/issue-{issue}"}
    assert release.condition(sk, "Stored")["status"] == "True"
    assert sk["status"]["lastJob"] == f"cold-{issue}"
    assert sk["status"]["observedGeneration"] == sk["metadata"]["generation"], "the status says which spec it judged"

    second = release.run(f"warm-{issue}", issue=issue, comment="@pi and now the review")
    assert second["status"]["phase"] == "Succeeded"
    assert session(second)["resumed"] is True and session(second)["reason"] == "resumed"
    # the staged copy is byte for byte what the store held
    assert received_digest(release, second) == stored
    assert (release.key_dir(key) / "resume-chain").read_text().strip() == "1"
    assert release.digest(key) != stored
    assert len(release.pods_of(f"warm-{issue}")) == 1
    # the staging directory is gone once the Job ended
    assert not (release.staging / second["metadata"]["uid"]).exists()
    wait_until("SessionKey lastJob updated",
               lambda: release.sessionkey(key)["status"].get("lastJob") == f"warm-{issue}", timeout=10)


def test_helm_test_runs_doctor_and_it_passes(release: Release) -> None:
    # (no --logs: the test kubelet serves no log API)
    result = release.helm("test", "pi-dispatch", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"TEST SUITE:\s+pi-dispatch-doctor", result.stdout), result.stdout
    assert re.search(r"Phase:\s+Succeeded", result.stdout), result.stdout


def test_metrics_are_served_with_closed_label_sets(release: Release) -> None:
    import urllib.request

    release.run(f"metrics-{next_issue()}", issue=next_issue())
    port = release.values["metrics"]["port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for name in ("pidispatch_session_resolutions_total", "pidispatch_session_promotions_total",
                 "pidispatch_jobs", "pidispatch_queue_depth", "pidispatch_job_tokens_total",
                 "pidispatch_gate_seconds_bucket", "pidispatch_promotion_seconds_bucket",
                 "pidispatch_jobs_ended_total", "pidispatch_jobs_measured_total"):
        assert name in text, f"{name} is not exported"
    assert 'pidispatch_session_resolutions_total{reason="absent"}' in text
    assert "acme" not in text and "pi/issue" not in text and not re.search(r"[0-9a-f]{32}", text)


TRIGGER_SHAPES = {
    "resume with command": ("run:\n    resume: true\n    command: make fix", "run.command"),
    "resume on a local job": ("run:\n    resume: true\n    kind: local", "run.kind: local"),
    "resume with replicas": ("run:\n    resume: true\n    replicas: 2", "run.replicas"),
    "resume with secrets": ("run:\n    resume: true\n    secrets: [token]", "run.secrets"),
    "resume not a boolean": ("run:\n    resume: \"yes\"", "boolean"),
}


@pytest.mark.parametrize("shape", list(TRIGGER_SHAPES), ids=list(TRIGGER_SHAPES))
def test_kubectl_apply_rejects_a_refused_trigger(release: Release, shape: str) -> None:
    run, words = TRIGGER_SHAPES[shape]
    manifest = (f"apiVersion: pi-dispatch.dev/v1alpha1\nkind: Trigger\nmetadata:\n  name: refused\n"
                f"  namespace: {release.ns}\nspec:\n  \"on\":\n    event: issue_comment.created\n  {run}\n")
    result = release.cluster.kubectl("apply", "-f", "-", input=manifest, check=False)
    assert result.returncode != 0, result.stdout
    assert words in result.stderr, result.stderr
    assert release.kube.get_or_none(release.path("triggers", "refused")) is None


# Stored by the apiserver (no CEL rule refuses them: docs/crd-policy.md), reported not Ready by the operator.
NOT_READY = {
    "no-label": ({"event": "issues.labeled"}, {}, "LabelMissing", "on.label is not set"),
    "label-on-comment": ({"event": "issue_comment.created", "phrase": "@pi", "label": "pi"}, {}, "FieldNotForEvent",
                         "on.label is set but on.event is 'issue_comment.created'"),
    "local": ({"event": "issue_comment.created", "phrase": "@pi"}, {"kind": "local"}, "FieldNotImplemented",
              "run.kind: local is not implemented"),
}


def test_a_trigger_that_could_not_do_what_it_says_is_not_ready_and_its_jobs_are_refused(release: Release) -> None:
    r = release
    for name, (on, run, _, _) in NOT_READY.items():
        r.kube.create(r.path("triggers"), {"apiVersion": "pi-dispatch.dev/v1alpha1", "kind": "Trigger",
                                           "metadata": {"name": name}, "spec": {"on": on, "run": run}})
    for name, (_, _, reason, said) in NOT_READY.items():
        ready = wait_until(f"Trigger {name}'s Ready", lambda n=name: r.condition(r.get("triggers", n), "Ready"),
                           timeout=60)
        assert (ready["status"], ready["reason"]) == ("False", reason), ready
        assert ready["message"].startswith(said), ready["message"]
    issue = next_issue()
    job = r.run(f"local-{issue}", trigger="local", issue=issue)
    assert (job["status"]["phase"], job["status"]["reason"]) == ("Refused", "trigger-not-ready"), job["status"]
    refused = next(c for c in job["status"]["conditions"] if c.get("reason") == "TriggerNotReady")
    assert "run.kind: local is not implemented" in refused["message"], refused
    assert r.pods_of(f"local-{issue}") == [], "refused before any Pod"


def test_job_pod_is_restricted_and_token_free(release: Release) -> None:
    issue = next_issue()
    job = release.run(f"pod-{issue}", issue=issue)
    pod = release.kube.get(f"/api/v1/namespaces/{release.ns}/pods/{job['status']['podName']}")
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    assert not any("serviceaccount" in (v.get("projected") and json.dumps(v) or "") for v in spec["volumes"])
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Job", job["metadata"]["uid"])
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["/session"]["subPath"] == f"{job['metadata']['uid']}/session"
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["PI_SESSION_FILE"] == "/session/current.jsonl"
    assert key_of(issue) not in json.dumps(pod)


def test_a_job_without_resume_gets_the_pod_it_always_had(release: Release) -> None:
    release.trigger("plain", resume=False)
    issue = next_issue()
    job = release.run(f"plain-{issue}", trigger="plain", issue=issue)
    assert job["status"]["phase"] == "Succeeded"
    pod = release.kube.get(f"/api/v1/namespaces/{release.ns}/pods/{job['status']['podName']}")
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["workspace"]
    assert "PI_SESSION_FILE" not in {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    assert release.sessionkey(key_of(issue)) is None
    # a null in a merge patch removes the field: no bytes were staged
    assert session(job) == {"resumed": False, "reason": "disabled"}


def test_a_failed_pod_leaves_the_store_unchanged(release: Release) -> None:
    issue = next_issue()
    key = key_of(issue)
    release.run(f"keep-{issue}", issue=issue)
    before = release.digest(key)
    chain = (release.key_dir(key) / "resume-chain").read_text()
    failed = release.run(f"fail-{issue}", issue=issue, comment="@pi exit=1")
    assert failed["status"]["phase"] == "Failed"
    assert release.digest(key) == before
    assert (release.key_dir(key) / "resume-chain").read_text() == chain
    assert session(failed)["resumed"] is True  # the runner resumed; nothing was kept


def test_a_report_that_is_not_well_formed_is_ignored(release: Release) -> None:
    issue = next_issue()
    job = release.run(f"garbage-{issue}", issue=issue, comment="@pi report=garbage")
    assert job["status"]["phase"] == "Succeeded"
    assert job["status"].get("tokens") is None
    assert session(job)["reason"] == "absent"  # the host verdict stands when the runner says nothing usable


def test_a_staged_file_replaced_by_a_link_is_not_promoted(release: Release) -> None:
    issue = next_issue()
    key = key_of(issue)
    release.run(f"before-link-{issue}", issue=issue)
    before = release.digest(key)
    job = release.run(f"link-{issue}", issue=issue, comment="@pi session=symlink")
    assert session(job)["reason"] == "not-a-regular-file"
    assert release.digest(key) == before


# ---- every cold reason that can be produced from outside ----------------------------------------------

@pytest.mark.parametrize("reason", list(TAMPER), ids=list(TAMPER))
def test_each_cold_reason_shows_on_the_sessionkey_and_the_job(release: Release, reason: str) -> None:
    issue = next_issue()
    key = key_of(issue)
    release.run(f"seed-{issue}", issue=issue)
    TAMPER[reason](release.key_dir(key))

    def resumable_says() -> str | None:
        cond = release.condition(release.sessionkey(key), "Resumable")
        return cond["reason"] if cond and cond["status"] == "False" else None

    camel = "".join(p.capitalize() for p in reason.split("-"))
    wait_until(f"SessionKey Resumable=False/{camel} (refreshed by the timer)", lambda: resumable_says() == camel,
               timeout=30)
    job = release.run(f"cold-{reason}-{issue}", issue=issue)
    assert job["status"]["phase"] == "Succeeded"
    assert session(job) == {"resumed": False, "reason": reason, "bytes": session(job)["bytes"], "redacted": 0}
    assert received_digest(release, job) is None  # a refused gate stages 0 bytes
    # the cold run's promotion resets what refused it
    assert (release.key_dir(key) / "resume-chain").read_text().strip() == "0"
    assert not (release.key_dir(key) / "context").exists()


# ---- SessionKey deletion, the budget, concurrency ----------------------------------------------------

def test_deleting_a_sessionkey_forgets_the_conversation(release: Release) -> None:
    issue = next_issue()
    key = key_of(issue)
    release.run(f"forget-{issue}", issue=issue)
    assert release.key_dir(key).is_dir()
    release.kube.delete(release.path("sessionkeys", key))
    wait_until("SessionKey gone", lambda: release.sessionkey(key) is None, timeout=30)
    assert not release.key_dir(key).exists()
    job = release.run(f"after-forget-{issue}", issue=issue)
    assert session(job)["reason"] == "absent"


def test_the_reaper_and_the_staging_sweep_run_on_their_timer(cluster: Cluster, kube: Kube, kubelet) -> None:
    values = merge(base_values(PI_DISPATCH_SWEEP_INTERVAL_SECONDS="10"), {"sessions": {"enabled": True}})
    with installed(cluster, kube, "timers", values) as r:
        r.run("aged", issue=1)
        key = key_of(1)
        os.utime(r.key_dir(key) / "current.jsonl", (time.time() - 15 * DAY,) * 2)
        orphan = r.staging / "00000000-0000-0000-0000-000000000000"
        (orphan / "session").mkdir(parents=True)
        os.utime(orphan, (time.time() - 3600,) * 2)
        wait_until("the reaper removed the expired key", lambda: not r.key_dir(key).exists(), timeout=40)
        wait_until("its SessionKey deleted", lambda: r.sessionkey(key) is None, timeout=30)
        wait_until("the orphaned staging directory swept", lambda: not orphan.exists(), timeout=40)


def test_two_jobs_finishing_together_on_one_key_one_is_locked(cluster: Cluster, kube: Kube, kubelet) -> None:
    values = merge(base_values(PIDISPATCH_FAILPOINT="promote:locked", PIDISPATCH_FAILPOINT_ACTION="sleep:3"),
                   {"sessions": {"enabled": True}})
    with installed(cluster, kube, "locked", values) as r:
        r.job("a", issue=1)
        r.job("b", issue=1)
        a, b = r.wait_job("a"), r.wait_job("b")
        reasons = sorted([session(a)["reason"], session(b)["reason"]])
        assert reasons == ["absent", "locked"], reasons
        assert not (r.key_dir(key_of(1)) / "lock").exists()


def test_a_burst_is_queued_fifo_and_none_is_lost(cluster: Cluster, kube: Kube, kubelet) -> None:
    count = int(os.environ.get("PIDISPATCH_E2E_BURST", "200"))
    values = merge(base_values(), {"sessions": {"enabled": True}, "maxConcurrentJobs": 4})
    with installed(cluster, kube, "burst", values) as r:
        for i in range(count):
            r.job(f"burst-{i:03d}", issue=1000 + i, comment="@pi sleep=0.2")

        def finished() -> int:
            jobs = r.kube.list(r.path("jobs"))
            running = sum(1 for j in jobs if (j.get("status") or {}).get("phase") == "Running")
            assert running <= 4, f"{running} jobs running with maxConcurrentJobs 4"
            return sum(1 for j in jobs if (j.get("status") or {}).get("phase") in ("Succeeded", "Failed")) == count

        wait_until(f"{count} jobs finished", finished, timeout=60 + count * 3, interval=1)
        jobs = r.kube.list(r.path("jobs"))
        assert {j["status"]["phase"] for j in jobs} == {"Succeeded"}
        assert len(r.kube.list(f"/api/v1/namespaces/{r.ns}/pods", labelSelector="pi-dispatch.dev/job")) == count
        started = sorted(jobs, key=lambda j: j["status"]["startedAt"])
        # FIFO, to the second the timestamps resolve: no job started before one created earlier
        assert [j["metadata"]["creationTimestamp"] for j in started] == sorted(
            j["metadata"]["creationTimestamp"] for j in started)


# ---- refusals ---------------------------------------------------------------------------------------

def test_resume_without_a_store_is_refused_before_any_spend(cluster: Cluster, kube: Kube, kubelet) -> None:
    with installed(cluster, kube, "nostore", base_values()) as r:
        wait_until("Trigger SessionStore=False", lambda: (r.condition(r.get("triggers", "fix"), "SessionStore")
                                                        or {}).get("reason") == "SessionsDirUnset", timeout=30)
        job = r.run("refused", issue=1)
        assert job["status"]["phase"] == "Refused"
        assert job["status"]["reason"] == "sessions-dir-unset"
        assert "sessions.enabled=true" in r.condition(job, "Started")["message"]
        assert r.pods_of("refused") == []
        # The Event is written after the Job's status: wait for it, as a reader of `kubectl get events` would.
        wait_until("the SessionsDirUnset Event", lambda: any(
            e["reason"] == "SessionsDirUnset" for e in kube.list(f"/api/v1/namespaces/{r.ns}/events",
                                                                  fieldSelector="involvedObject.name=refused")),
                   timeout=30)
        r.trigger("plain", resume=False)
        assert r.run("plain", trigger="plain", issue=1)["status"]["phase"] == "Succeeded"


def test_resume_with_a_gh_token_is_refused(release: Release) -> None:
    release.trigger("gh", auth="gh")
    job = release.run(f"gh-{next_issue()}", trigger="gh", issue=next_issue())
    assert (job["status"]["phase"], job["status"]["reason"]) == ("Refused", "config-refused")
    assert release.pods_of(job["metadata"]["name"]) == []


# A Job is bounded by its Trigger (issue 31, item 9): anyone who may create Jobs gets no broader token than
# the Trigger gives. This release's source is app; Trigger `bounded` answers for acme/widgets only.
BEYOND = [
    ("a Job asking for pat on an app Trigger", {"authSource": "pat"}, "asks for the pat token"),
    ("a Job asking for gh on an app Trigger", {"authSource": "gh"}, "asks for the gh token"),
    ("a Job for a repository the Trigger does not serve", {"repository": "mallory/widgets"},
     "serves only acme/widgets"),
]


@pytest.fixture(scope="module")
def bounded(release: Release) -> str:
    release.trigger("bounded", resume=False, auth="app")
    release.kube.patch(release.path("triggers", "bounded"), {"spec": {"on": {"repository": "acme/widgets"}}})
    return "bounded"


@pytest.mark.parametrize(("spec", "named"), [b[1:] for b in BEYOND], ids=[b[0] for b in BEYOND])
def test_a_job_asking_for_more_than_its_trigger_allows_is_refused(release: Release, bounded: str, spec: dict,
                                                                   named: str) -> None:
    name = f"beyond-{next_issue()}"
    job = release.run(name, trigger=bounded, issue=next_issue(), **spec)
    assert (job["status"]["phase"], job["status"]["reason"]) == ("Refused", "beyond-trigger"), job["status"]
    started = release.condition(job, "Started")
    assert started["reason"] == "BeyondTrigger" and named in started["message"], started
    assert release.pods_of(name) == []
    assert [s for s in release.kube.list(f"/api/v1/namespaces/{release.ns}/secrets")
            if s["metadata"]["name"].startswith("pij-") and "-token-" in s["metadata"]["name"]] == [], "no token"
    wait_until("the BeyondTrigger Event", lambda: any(
        e["reason"] == "BeyondTrigger" for e in release.kube.list(f"/api/v1/namespaces/{release.ns}/events",
                                                                  fieldSelector=f"involvedObject.name={name}")),
               timeout=30)


def test_a_job_as_the_receiver_writes_it_runs_on_a_bounded_trigger(release: Release, bounded: str) -> None:
    job = release.run(f"fair-{next_issue()}", trigger=bounded, issue=next_issue(), authSource="app",
                      repository="Acme/Widgets")
    assert job["status"]["phase"] == "Succeeded", job["status"]
