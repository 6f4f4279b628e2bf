"""The receiver in poll mode end to end (``receiver.poll.enabled``): installed by the Helm chart next to the
operator, running as its own ServiceAccount on the real kube-apiserver, reading the fake forge's REST API
(``testkit/fakegithub_api.py``, on this machine's loopback, as the test kubelet's Pods share the host's network)
with the pat the chart mounts. A comment written on the forge becomes a Job the operator runs; the cursor lives in
its ConfigMap, so a new receiver Pod (a restart) takes nothing in twice and asks the forge conditionally
(docs/triggers.md#polling-instead-of-a-webhook)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.framework.cluster import Cluster, free_port
from e2e.framework.kube import Kube
from e2e.framework.receiver_release import RECEIVER, Receiver
from e2e.framework.release import PI_VERSION, Release, base_values, create_secret, fresh_namespace, merge
from pidispatch.api.crds import GROUP, VERSION
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

REPO = "acme/widgets"
PAT = "ghp_e2e_polling_token_0123456789abcdef"
INTERVAL = 10
CURSOR = f"{RECEIVER}-poll-cursor"


@pytest.fixture(scope="module")
def github() -> Iterator[FakeGitHubAPI]:
    with FakeGitHubAPI(pats={PAT}) as api:
        yield api


@pytest.fixture(scope="module")
def polling(cluster: Cluster, kube: Kube, kubelet: object, github: FakeGitHubAPI) -> Iterator[Receiver]:
    ns = fresh_namespace(kube, "receiver-poll")
    create_secret(kube, ns, "gh-token", {"token": PAT.encode() + b"\n"})
    values = merge(base_values(), {
        "job": {"checkout": False},
        "github": {"authSource": "pat", "apiUrl": github.url, "token": {"secretName": "gh-token", "key": "token"}},
        "receiver": {"enabled": True, "replicas": 1, "port": free_port(), "healthPort": free_port(),
                     "poll": {"enabled": True, "intervalSeconds": INTERVAL}}})
    release = Release(cluster, kube, ns, values)
    try:
        release.install()
        r = Receiver(release, b"")
        r.await_ready()
        kube.create(release.path("triggers"), {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Trigger", "metadata": {"name": "fix"},
            "spec": {"on": {"event": "issue_comment.created", "phrase": "@pi", "repository": REPO},
                     "run": {"model": "fake/fake-model", "piVersion": PI_VERSION}}})
        # The first pass that sees the Trigger reads the repository and starts its cursor there.
        wait_until("the poller's cursor for the repository", lambda: "acme.widgets" in (
            (kube.get_or_none(f"/api/v1/namespaces/{ns}/configmaps/{CURSOR}") or {}).get("data") or {}),
            timeout=90)
        yield r
    finally:
        release.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


def polled_jobs(r: Receiver) -> list[dict[str, Any]]:
    return [j for j in r.release.kube.list(r.release.path("jobs"))
            if str(j["spec"].get("deliveryId", "")).startswith("poll-")]


def test_a_comment_on_the_forge_becomes_a_job_once_across_a_restart(polling: Receiver, github: FakeGitHubAPI) -> None:
    r = polling
    comment = github.add_issue_comment(REPO, 7, "@pi fix the flaky test", login="alice", association="MEMBER")
    jobs = wait_until("the polled comment's Job", lambda: polled_jobs(r), timeout=INTERVAL * 4)
    [job] = jobs
    assert job["spec"]["deliveryId"] == f"poll-comment-{comment['id']}"
    assert (job["spec"]["trigger"], job["spec"]["issue"], job["spec"]["sender"]) == ("fix", 7, "alice")
    done = r.release.wait_job(job["metadata"]["name"])
    assert done["status"]["phase"] == "Succeeded", done["status"]

    # A stranger's comment starts nothing, as its webhook would not.
    github.add_issue_comment(REPO, 7, "@pi from a stranger", login="mallory", association="NONE")

    # A restart: a new receiver Pod reads the cursor from its ConfigMap and takes nothing in twice.
    [pod] = r.pods()
    r.release.kube.delete(f"/api/v1/namespaces/{r.release.ns}/pods/{pod['metadata']['name']}")
    wait_until("a new receiver Pod", lambda: any(p["metadata"]["uid"] != pod["metadata"]["uid"] and
                                                 (p.get("status") or {}).get("phase") == "Running"
                                                 for p in r.pods()), timeout=90)
    before = len(github.polled)

    def quiet() -> bool:
        last = github.polled[-3:]
        return len(github.polled) >= before + 3 and all(p.conditional and p.status == 304 for p in last)

    # Once nothing changes, every listing is asked with the ETag the cursor kept, and answered 304.
    wait_until("a pass of the new receiver answered 304 throughout", quiet, timeout=INTERVAL * 6)
    assert [j["metadata"]["name"] for j in polled_jobs(r)] == [job["metadata"]["name"]]
    log = r.log()
    assert PAT not in log and "receiver_poll_pass" in log
