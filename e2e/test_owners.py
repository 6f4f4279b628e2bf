"""Trusted owners on the local control plane (issue 34, item 5): the receiver and the operator installed by the
Helm chart, Triggers that name the repositories they serve (``on.repositories``), signed GitHub-format deliveries.

A delivery from an untrusted owner creates no Job (the receiver: 202 ``repository not served by any Trigger``);
one from a trusted owner creates its Job and the operator runs it; a Job made by hand for an untrusted owner is
refused by the operator's admission (``beyond-trigger``), no Pod. A resume Trigger that names no repository is
Ready with ``ResumeArmed=False`` (``NoRepositories``) and its job runs as without resume.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.receiver_release import Receiver, installed_receiver
from e2e.framework.release import PI_VERSION
from pidispatch.api.crds import GROUP, VERSION
from pidispatch.receiver.delivery import body_digest, job_name
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

SECRET = b"e2e-owners-" + uuid.uuid4().hex.encode()
TRIGGERS: dict[str, dict[str, Any]] = {
    "fix": {"event": "issue_comment.created", "phrase": "@pi", "repositories": ["acme/*", "acme-labs/api-*"]},
    "label": {"event": "issues.labeled", "label": "pi", "repository": "acme/widgets"},
}
_numbers = iter(range(700, 100000))


@pytest.fixture(scope="module")
def receiver(cluster: Cluster, kube: Kube, kubelet: object) -> Iterator[Receiver]:
    with installed_receiver(cluster, kube, "owners", SECRET, TRIGGERS) as r:
        yield r


def jobs(r: Receiver) -> set[str]:
    return {j["metadata"]["name"] for j in r.release.kube.list(r.release.path("jobs"))}


@pytest.mark.parametrize("repository", ["evil/widgets", "acme-evil/widgets", "acme-labs/web"],
                         ids=["another owner", "an owner whose name starts with a trusted one",
                              "a trusted owner's name the glob does not match"])
def test_a_signed_delivery_from_an_untrusted_owner_creates_no_job(receiver: Receiver, repository: str) -> None:
    before = jobs(receiver)
    hooks = receiver.hooks(repository=repository)
    for delivery in (hooks.issue_comment(next(_numbers), "@pi fix the flaky test"),
                     hooks.issues_labeled(next(_numbers), "pi")):
        sent = hooks.send(delivery)
        assert sent.status == 202, sent.json
        assert sent.json == {"ignored": "repository not served by any Trigger"}, sent.json
    assert jobs(receiver) == before


@pytest.mark.parametrize(("repository", "trigger"), [("acme/widgets", "fix"), ("ACME-Labs/api-gateway", "fix")],
                         ids=["an owner the Trigger names", "a name glob, another case"])
def test_a_signed_delivery_from_a_trusted_owner_creates_its_job_and_it_runs(receiver: Receiver, repository: str,
                                                                            trigger: str) -> None:
    hooks = receiver.hooks(repository=repository)
    sent = hooks.send(hooks.issue_comment(next(_numbers), "@pi fix the flaky test"))
    assert sent.status == 202, sent.json
    [name] = sent.json["jobs"]
    assert name == job_name(body_digest(sent.delivery.body), trigger)
    assert receiver.release.get("jobs", name)["spec"]["repository"] == repository
    done = receiver.release.wait_job(name)
    assert done["status"]["phase"] == "Succeeded", done["status"]


def test_a_hand_made_job_for_an_untrusted_owner_is_refused_by_the_operator(receiver: Receiver) -> None:
    r = receiver.release
    name = f"hand-made-{next(_numbers)}"
    job = r.run(name, trigger="fix", issue=next(_numbers), repository="evil/widgets")
    assert (job["status"]["phase"], job["status"]["reason"]) == ("Refused", "beyond-trigger"), job["status"]
    started = r.condition(job, "Started")
    assert started["reason"] == "BeyondTrigger" and "serves only acme/*, acme-labs/api-*" in started["message"]
    assert r.pods_of(name) == []


def test_a_resume_trigger_naming_no_repository_runs_its_jobs_without_resume(receiver: Receiver) -> None:
    r = receiver.release
    r.kube.create(r.path("triggers"), {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trigger", "metadata": {"name": "everywhere"},
        "spec": {"on": {"event": "issue_comment.created", "phrase": "/everywhere"},
                 "run": {"model": "fake/fake-model", "piVersion": PI_VERSION, "resume": True}}})

    def armed() -> dict[str, Any] | None:
        trigger = r.get("triggers", "everywhere")
        return r.condition(trigger, "ResumeArmed") if r.condition(trigger, "Ready") else None

    condition = wait_until("the Trigger's ResumeArmed condition", armed, timeout=60)
    assert (condition["status"], condition["reason"]) == ("False", "NoRepositories"), condition
    assert (r.condition(r.get("triggers", "everywhere"), "Ready") or {}).get("status") == "True"
    # This release has no store: a Trigger whose resume were armed would have its jobs refused sessions-dir-unset.
    job = r.run(f"everywhere-{next(_numbers)}", trigger="everywhere", issue=next(_numbers),
                repository="anyone/anything", comment="/everywhere go")
    assert job["status"]["phase"] == "Succeeded", job["status"]
    assert job["status"]["session"]["resumed"] is False and job["status"]["session"]["reason"] == "disabled", (
        job["status"]["session"])
