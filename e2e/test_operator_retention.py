"""Retention on the local control plane (issue 14 item 6): a finished job's Pod and token Secret go after
``job.podRetentionSeconds``, the pijob itself after ``job.ttlSecondsAfterFinished``, a job still running
keeps everything, and the SessionKey of the conversation stays.

The operator runs as installed by its chart, with a GitHub App (the fake API of ``testkit/fakegithub_api.py``)
so that every job gets its own token Secret, and deletes as the chart's ServiceAccount: a missing RBAC
rule fails the test.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import Release, base_values, fresh_namespace, merge
from pidispatch.manifests.pod import token_secret_name
from pidispatch.store.keys import issue_key
from testkit.fakegithub_api import FakeGitHubAPI, generate_app_key
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

APP_ID, INSTALLATION, REPO = 4242, 77, "acme/widgets"
RETENTION, TTL = 3, 25  # seconds; the operator looks every 5 s


@pytest.fixture(scope="module")
def github() -> Iterator[tuple[FakeGitHubAPI, bytes]]:
    pem, public = generate_app_key()
    with FakeGitHubAPI(app_id=APP_ID, public_key=public, installation_id=INSTALLATION,
                       installation_repos=(REPO,)) as api:
        yield api, pem


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet: object, github: tuple[FakeGitHubAPI, bytes]) -> Iterator[Release]:
    api, pem = github
    values = merge(base_values(), {
        "sessions": {"enabled": True}, "maxConcurrentJobs": 2,
        # The token Secret is what retention must delete; no workspace (this fake API has no repositories).
        "job": {"podRetentionSeconds": RETENTION, "ttlSecondsAfterFinished": TTL, "checkout": False},
        "github": {"authSource": "app", "apiUrl": api.url, "timeoutSeconds": 2,
                   "app": {"id": APP_ID, "installationId": INSTALLATION, "privateKeySecret": {"name": "gh-app"}}}})
    ns = fresh_namespace(kube, "retention")
    kube.create(f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": "gh-app"},
                                                     "data": {"private-key.pem": base64.b64encode(pem).decode()}})
    r = Release(cluster, kube, ns, values)
    try:
        r.install()
        r.trigger("fix")
        yield r
    finally:
        r.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


def secret(r: Release, job: dict[str, Any]) -> dict[str, Any] | None:
    name = token_secret_name(job["metadata"]["name"], job["metadata"]["uid"])
    return r.kube.get_or_none(f"/api/v1/namespaces/{r.ns}/secrets/{name}")


def test_a_finished_job_loses_its_pod_and_secret_then_itself_and_its_conversation_stays(release: Release) -> None:
    r = release
    held = r.job("held", issue=901, comment="@pi hold=release")
    running = r.wait_job("held", phases=("Running",))
    wait_until("the held job's Pod Running", lambda: [p for p in r.pods_of("held")
                                                     if (p.get("status") or {}).get("phase") == "Running"], timeout=60)
    assert secret(r, held) is not None

    done = r.run("done", issue=902)
    assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"])
    assert r.pods_of("done") and secret(r, done) is not None, "kept until the retention has passed"
    key = issue_key("github", REPO, 902)
    assert r.sessionkey(key) is not None

    wait_until("the finished job's Pod deleted", lambda: not r.pods_of("done"), timeout=RETENTION + 60)
    wait_until("the finished job's token Secret deleted", lambda: secret(r, done) is None, timeout=30)
    gone_at = time.monotonic()
    assert r.kube.get_or_none(r.path("jobs", "done")) is not None, "the pijob stays until its ttl"
    events = r.kube.list(f"/api/v1/namespaces/{r.ns}/events", fieldSelector="involvedObject.name=done")
    assert any(e["reason"] == "PodDeleted" for e in events), [e["reason"] for e in events]

    # Retention passes ran while the other job was running: its Pod and Secret are untouched.
    [pod] = r.pods_of("held")
    assert pod["status"]["phase"] == "Running" and not pod["metadata"].get("deletionTimestamp")
    assert secret(r, held) is not None

    wait_until("the finished pijob deleted after its ttl", lambda: r.kube.get_or_none(r.path("jobs", "done")) is None,
               timeout=TTL + 60)
    assert time.monotonic() - gone_at > 5, "the pijob went with its Pod, not at its own ttl"
    assert r.sessionkey(key) is not None, "the conversation outlives the Jobs that continued it"
    assert r.key_dir(key).is_dir()

    (r.staging / running["metadata"]["uid"] / "session" / "release").touch()
    assert r.wait_job("held")["status"]["phase"] == "Succeeded"
    wait_until("the held job's Pod deleted once it finished", lambda: not r.pods_of("held"), timeout=RETENTION + 60)
    assert r.sessionkey(issue_key("github", REPO, 901)) is not None
