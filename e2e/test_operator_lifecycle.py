"""A key's lifecycle on the real apiserver (issue 34 items 1-2): retirement and quarantine.

* A merged pull request retires its key: the receiver (in this process, on the real apiserver with the admin
  credentials; its Role is held to ``patch`` on sessionkeys by e2e/test_receiver.py) annotates the SessionKey,
  the operator archives the key directory (``sessions.retire: archive``), the SessionKey says ``Retired``,
  and the next delivery on the branch starts cold with the reason ``retired``. Before that, a stranger's pull
  request from the same branch, closed by the stranger, asks nothing; closed by a member, it asks, and the
  operator refuses (the conversation's jobs ran on another pull request) and drops the request.
* Three resumed jobs in a row that fail quarantine the transcript: ``Resumable`` is False and says why, the
  fourth delivery starts cold (``quarantined``) and leaves the transcript alone; ``kubectl annotate`` releases
  it, and the fifth resumes it again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import Release, base_values, installed, merge
from pidispatch.api.vocabulary import RELEASE_ANNOTATION, RETIRE_ANNOTATION, RETIRE_PULL_REQUEST_ANNOTATION
from pidispatch.kubeapi import Api
from pidispatch.receiver.cluster import ApiCluster
from pidispatch.store.keys import branch_key, issue_key
from testkit.receiver import Running
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

REPO = "acme/widgets"
BRANCH = "feature/lifecycle"
PR = 41
HEAD = {"headRef": BRANCH, "headRepository": REPO}


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet) -> Iterator[Release]:
    values = merge(base_values(), {"sessions": {"enabled": True, "retire": "archive", "quarantineAfter": 3}})
    with installed(cluster, kube, "lifecycle", values) as r:
        yield r


@pytest.fixture
def receiver(cluster: Cluster, release: Release) -> Iterator[Running]:
    admin = Api(cluster.server, ca_file=str(cluster.ca_file), cert_file=str(cluster.pki / "admin.crt"),
                key_file=str(cluster.pki / "admin.key"))
    running = Running(ApiCluster(admin, release.ns, cache_seconds=0))  # type: ignore[arg-type]
    yield running
    running.stop()


def session(job: dict[str, Any]) -> tuple[bool, str]:
    s = job["status"]["session"]
    return s["resumed"], s["reason"]


def merged_pr(receiver: Running) -> Any:
    hooks = receiver.hooks
    return hooks.pull_request_event(hooks.pull_request(PR, head_ref=BRANCH, repository=REPO), "closed", merged=True)


def test_a_merged_pull_request_retires_its_key_and_the_next_delivery_starts_cold(release: Release,
                                                                                receiver: Running) -> None:
    r = release
    key = branch_key("github", REPO, BRANCH)
    assert key is not None
    first = r.run("pr-first", pullRequest=PR, resolved=HEAD)
    assert first["status"]["phase"] == "Succeeded", json.dumps(first["status"])
    second = r.run("pr-second", pullRequest=PR, resolved=HEAD)
    assert session(second) == (True, "resumed")
    stored = (r.key_dir(key) / "current.jsonl").read_bytes()

    # A stranger opens pull request 42 from the branch: closing it themselves asks nothing.
    hooks = receiver.hooks
    theirs = hooks.pull_request(PR + 1, head_ref=BRANCH, repository=REPO, author="mallory", author_association="NONE")
    sent = hooks.send(hooks.pull_request_event(theirs, "closed", sender="mallory"))
    assert sent.status == 202 and "NONE" in sent.json["ignored"], sent.json
    # A member closes it: the request is made, and the operator refuses it (no job of the conversation ran on 42).
    sent = hooks.send(hooks.pull_request_event(theirs, "closed", sender="maintainer"))
    assert (sent.status, sent.json) == (202, {"retired": key, "reason": "pull-request-closed"}), sent.json

    def dropped() -> bool:
        return not (r.get("sessionkeys", key)["metadata"].get("annotations") or {}).keys() & {
            RETIRE_ANNOTATION, RETIRE_PULL_REQUEST_ANNOTATION}

    wait_until("the operator drops the refused request", dropped)
    assert "retired" not in (r.get("sessionkeys", key).get("status") or {})
    assert (r.key_dir(key) / "current.jsonl").read_bytes() == stored, "the conversation is untouched"

    sent = receiver.hooks.send(merged_pr(receiver))
    assert (sent.status, sent.json) == (202, {"retired": key, "reason": "pull-request-merged"}), sent.json

    sk = r.sessionkey_when(key, "Retired", status="True")
    assert r.condition(sk, "Retired")["reason"] == "PullRequestMerged"
    assert RETIRE_ANNOTATION not in (sk["metadata"].get("annotations") or {}), "the request is removed once done"
    resumable = r.condition(sk, "Resumable")
    assert (resumable["status"], resumable["reason"]) == ("False", "Retired"), resumable
    assert not r.key_dir(key).exists()
    archive = sk["status"]["retired"]["archive"]
    assert archive.startswith(f".retired-{key}-")
    assert (r.store / archive / "current.jsonl").read_bytes() == stored, "the archive is the key directory, whole"

    after = r.run("pr-after", pullRequest=PR, resolved=HEAD)
    assert after["status"]["phase"] == "Succeeded"
    assert session(after) == (False, "retired"), json.dumps(after["status"]["session"])

    sk = r.sessionkey_when(key, "Retired", status="False")
    assert "retired" not in sk["status"] and r.key_dir(key).is_dir()
    again = r.run("pr-again", pullRequest=PR, resolved=HEAD)
    assert session(again) == (True, "resumed"), "the new conversation resumes as any other"


def test_three_failed_resumes_quarantine_and_a_person_releases(release: Release) -> None:
    r = release
    issue = 801
    key = issue_key("github", REPO, issue)
    assert key is not None
    assert r.run("q-seed", issue=issue)["status"]["phase"] == "Succeeded"
    poisoned = r.digest(key)
    failed = []
    for i in range(1, 4):
        job = r.run(f"q-fail-{i}", issue=issue, comment="@pi exit=1")
        assert job["status"]["phase"] == "Failed" and session(job)[0] is True, json.dumps(job["status"])
        failed.append(job["metadata"]["name"])

    sk = r.sessionkey_when(key, "Resumable", reason="Quarantined")
    message = r.condition(sk, "Resumable")["message"]
    assert r.condition(sk, "Resumable")["status"] == "False"
    assert "3 resumed jobs in a row ended Failed" in message and ", ".join(failed) in message, message
    assert sk["status"]["failedResumes"]["count"] == 3 and sk["status"]["next"] == "quarantined"

    fourth = r.run("q-fourth", issue=issue, comment="@pi exit=1")
    assert session(fourth) == (False, "quarantined"), json.dumps(fourth["status"]["session"])
    assert r.digest(key) == poisoned, "the quarantined transcript is kept for a person to judge"

    r.kube.patch(r.path("sessionkeys", key), {"metadata": {"annotations": {RELEASE_ANNOTATION: "true"}}})

    sk = r.sessionkey_when(key, "Resumable", status="True")
    assert "failedResumes" not in sk["status"]
    assert RELEASE_ANNOTATION not in (sk["metadata"].get("annotations") or {})
    fifth = r.run("q-fifth", issue=issue)
    assert fifth["status"]["phase"] == "Succeeded"
    assert session(fifth) == (True, "resumed"), "released: the transcript resumes again"
