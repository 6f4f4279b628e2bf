"""The user's path on a real node: the chart installed with the images ``make images`` built, Pods run in
containers by a real kubelet (containerd + runc, ``e2e/framework/realnode.py``), the namespace enforcing the
``restricted`` Pod Security Standard, so the apiserver itself rejects a Pod that does not comply.

Proven here, with real pi inside the job image against the scripted model and the real workspace (a
clone over HTTPS from a forge on this machine, reached at the node's address):

* a cold delivery, then a resumed one that carries the first conversation;
* a failed job Pod leaves the stored conversation byte for byte as it was;
* the operator's container killed mid-job converges: one job Pod, one promotion;
* a job image that does not exist ends its Job with the pull failure named, and its slot is freed;
* a job past its memory limit ends ``OOMKilled`` with nothing promoted.

Run with ``pytest -m realnode`` (root, the Debian packages of ``make node``); ``make test`` runs it.
Where a real node cannot run, the tests are skipped with the reason, unless
``PIDISPATCH_REQUIRE_REAL_NODE=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import ApiError, Kube
from e2e.framework.realnode import NODE_NAME, RealNode, images_env, unavailable
from e2e.framework.release import NO_GATEWAY, Release, create_secret, fresh_namespace
from pidispatch.store.keys import issue_key
from testkit.fakegithub_api import FakeGitHubAPI, generate_app_key
from testkit.gitforge import Repos, make_tls
from testkit.scripted_model import ScriptedModel, text_of, write_agent_dir
from testkit.wait import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

REPO = "acme/widgets"
NO_SUCH_IMAGE = "localhost/pi-dispatch/no-such-image:dev"  # a Trigger's run.image that is never found
APP_ID, INSTALLATION = 6161, 99


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = unavailable()
    if why:
        if os.environ.get("PIDISPATCH_REQUIRE_REAL_NODE") == "1":
            pytest.fail(f"PIDISPATCH_REQUIRE_REAL_NODE=1 but no real node can run here: {why}")
        pytest.skip(f"no real node on this machine: {why}")
    c = Cluster(state_dir=tmp_path_factory.mktemp("realnode"), backend=RealNode())
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def kube(node: Cluster) -> Kube:  # this module's clusters are the real node's, not the session's
    return node.kube()


@pytest.fixture(scope="module")
def forge(tmp_path_factory: pytest.TempPathFactory, node: Cluster) -> Iterator[FakeGitHubAPI]:
    root = tmp_path_factory.mktemp("forge")
    ca, cert, key = make_tls(root / "tls", ips=("127.0.0.1", node.backend.ip))
    repos = Repos(root / "repos")
    repos.create(REPO, {"README.md": "# widgets\n", "cache.py": "def get(k):\n    return None\n"})
    pem, public = generate_app_key()
    with FakeGitHubAPI(app_id=APP_ID, public_key=public, installation_id=INSTALLATION, installation_repos=(REPO,),
                       repos=repos, tls=(str(cert), str(key)), prefix="/api/v3", bind=node.backend.ip) as api:
        api.app_pem = pem  # type: ignore[attr-defined]
        api.ca = ca  # type: ignore[attr-defined]
        yield api


@pytest.fixture(scope="module")
def model(node: Cluster) -> Iterator[ScriptedModel]:
    with ScriptedModel(host=node.backend.ip) as m:  # job Pods reach it through the node's bridge
        yield m


@pytest.fixture(scope="module")
def release(node: Cluster, kube: Kube, forge: FakeGitHubAPI, model: ScriptedModel,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    images = images_env()
    agent = write_agent_dir(tmp_path_factory.mktemp("pi") / "agent", model.base_url)
    ns = fresh_namespace(kube, "realnode")
    create_secret(kube, ns, "gh-app", {"private-key.pem": forge.app_pem})  # type: ignore[attr-defined]
    for name, key, text in (("forge-ca", "ca.crt", Path(forge.ca).read_text()),  # type: ignore[attr-defined]
                            ("pi-models", "models.json", (agent / "models.json").read_text())):
        kube.create(f"/api/v1/namespaces/{ns}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"name": name}, "data": {key: text}})
    repository, tag = images["OPERATOR_IMAGE"].rsplit(":", 1)
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        # one slot: a job that follows a failed one runs only if the failed one gave its slot back
        "maxConcurrentJobs": 1,
        "sessions": {"enabled": True},
        "job": {"image": images["JOB_IMAGE"], "modelsConfigMap": "pi-models", "startTimeoutSeconds": 20,
                "git": {"name": "pi-node[bot]", "email": "pi-node[bot]@users.noreply.github.com"}},
        "github": {"authSource": "app", "apiUrl": forge.url, "webUrl": forge.web_url, "timeoutSeconds": 5,
                   "caBundle": {"configMap": "forge-ca"},
                   "app": {"id": APP_ID, "installationId": INSTALLATION, "privateKeySecret": {"name": "gh-app"}}},
        "extraEnv": [{"name": "PI_DISPATCH_RESUMABLE_REFRESH_SECONDS", "value": "5"}],
        "jobPodPolicy": {"images": [NO_SUCH_IMAGE]},  # a Trigger's run.image below (the policy allows no other)
        **NO_GATEWAY,
    }
    r = Release(node, kube, ns, values).install()
    r.trigger("fix")
    try:
        yield r
    finally:
        r.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


_issues = iter(range(1, 100000))


def said(requests: list[dict]) -> str:
    return "\n".join(text_of(m.get("content")) for body in requests for m in body.get("messages", []))


def deliver(r: Release, model: ScriptedModel, issue: int, comment: str, *, trigger: str = "fix",
            timeout: float = 240) -> tuple[dict[str, Any], list[dict]]:
    before = len(model.requests)
    job = r.run(f"i{issue}-{uuid.uuid4().hex[:5]}", trigger=trigger, issue=issue, comment=comment, timeout=timeout)
    return job, model.requests[before:]


def key_of(issue: int) -> str:
    key = issue_key("github", REPO, issue)
    assert key is not None
    return key


def test_the_node_is_a_real_kubelet_on_containerd(node: Cluster, kube: Kube) -> None:
    info = kube.get(f"/api/v1/nodes/{NODE_NAME}")["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://"), info
    assert info["kubeletVersion"] == "v" + (Path(__file__).parent / "controlplane" / "versions.env").read_text(
    ).split("K8S_VERSION=")[1].split()[0]


def test_the_apiserver_rejects_a_pod_the_restricted_standard_forbids(node: Cluster, kube: Kube) -> None:
    ns = fresh_namespace(kube, "psa")
    try:
        with pytest.raises(ApiError) as refused:
            kube.create(f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod",
                                                          "metadata": {"name": "root"},
                                                          "spec": {"containers": [{"name": "c", "image": "x"}]}})
        assert refused.value.status == 403 and "restricted" in str(refused.value), refused.value
    finally:
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


def test_the_operator_runs_in_its_image_as_the_chart_says(node: Cluster, release: Release) -> None:
    [pod] = release.operator_pods()
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", pod["status"]  # the readiness probe answers in the container
    name = pod["metadata"]["name"]
    probe = ("import os, sys\ntry:\n    open('/written', 'w')\nexcept OSError as e:\n    print('ro', e.errno)\n"
             "print(os.getuid(), os.getgid())")
    out = node.kubectl("exec", "-n", release.ns, name, "--", "python3", "-c", probe).stdout.split("\n")
    assert out[0] == "ro 30", out  # EROFS: the root filesystem is read-only
    assert out[1] == "65532 65532", out


def test_a_cold_delivery_then_a_resumed_one_with_real_pi_in_the_job_image(
        node: Cluster, release: Release, forge: FakeGitHubAPI, model: ScriptedModel) -> None:
    issue = next(_issues)
    forge.set_issue(REPO, issue, "The cache test is flaky", "It fails one run in ten.")
    model.tool_call("bash", {"command": "id -u; git log --oneline -1; cat cache.py"}).reply(
        "I looked at the flaky test: it races on the cache.")
    first, seen1 = deliver(release, model, issue, "@pi the cache test is flaky, fix it")
    assert first["status"]["phase"] == "Succeeded", (json.dumps(first["status"]),
                                                     release.pod_log(first["status"]["podName"]))
    assert first["status"]["session"]["reason"] == "absent"
    tool_output = said(seen1[1:])
    assert "65532" in tool_output and "def get(k)" in tool_output, "pi's bash ran as 65532 in the clone"
    pod = node.kube().get(f"/api/v1/namespaces/{release.ns}/pods/{first['status']['podName']}")
    assert pod["spec"]["nodeName"] == NODE_NAME
    status = pod["status"]["containerStatuses"][0]
    assert status["imageID"] and status["image"].endswith("pi-dispatch/job:dev"), status
    stored = release.digest(key_of(issue))
    assert stored is not None

    model.reply("Added the regression test.")
    second, seen2 = deliver(release, model, issue, "@pi also add a regression test")
    assert second["status"]["phase"] == "Succeeded", json.dumps(second["status"])
    assert (second["status"]["session"]["resumed"], second["status"]["session"]["reason"]) == (True, "resumed")
    text = said(seen2)
    assert "the cache test is flaky" in text and "it races on the cache" in text and "regression test" in text
    assert release.digest(key_of(issue)) != stored


def test_a_failed_job_pod_leaves_the_stored_conversation_unchanged(release: Release, model: ScriptedModel,
                                                                   forge: FakeGitHubAPI) -> None:
    issue = next(_issues)
    forge.set_issue(REPO, issue, "Flaky", "")
    model.reply("First look done.")
    first, _ = deliver(release, model, issue, "@pi look")
    assert first["status"]["phase"] == "Succeeded"
    before = release.digest(key_of(issue))
    model.error(400, {"error": {"message": "the model refuses", "type": "invalid_request_error"}})
    failed, _ = deliver(release, model, issue, "@pi now break")
    assert failed["status"]["phase"] == "Failed", json.dumps(failed["status"])
    assert release.digest(key_of(issue)) == before


def test_the_operator_killed_mid_job_converges_with_one_pod_and_one_promotion(
        node: Cluster, release: Release, model: ScriptedModel, forge: FakeGitHubAPI) -> None:
    issue = next(_issues)
    forge.set_issue(REPO, issue, "Slow", "")
    model.reply("slow answer", delay=15)
    name = f"i{issue}-kill"
    release.job(name, issue=issue, comment="@pi take your time")
    wait_until("the job Pod running", lambda: any(p["status"].get("phase") == "Running"
                                                for p in release.pods_of(name)), timeout=120)
    [pod_uid] = [p["metadata"]["uid"] for p in release.pods_of(name)]
    [op] = release.operator_pods()
    restarts = op["status"]["containerStatuses"][0]["restartCount"]
    # the container's process, killed as the kernel or a crash would: the kubelet restarts it
    task = op["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    node.backend.ctr("tasks", "kill", "--signal", "SIGKILL", task)
    wait_until("the operator container restarted", lambda: release.operator_pods()[0]["status"][
        "containerStatuses"][0]["restartCount"] > restarts, timeout=120)
    job = release.wait_job(name, timeout=240)
    assert job["status"]["phase"] == "Succeeded", json.dumps(job["status"])
    assert [p["metadata"]["uid"] for p in release.pods_of(name)] in ([], [pod_uid]), "no second job Pod"
    # One promotion across both containers: the store logs each (a routine promotion posts no Event).
    [op] = release.operator_pods()
    logs = "\n".join(node.backend.pod_log(release.ns, op["metadata"]["name"], previous=previous)
                     for previous in (True, False))
    key = key_of(issue)
    promoted = [line for line in logs.splitlines()
                if key in line and ('"session_promoted"' in line or '"session_promotion_recovered"' in line)]
    assert len(promoted) == 1, promoted


def test_a_job_image_that_does_not_exist_names_the_pull_failure_and_the_next_job_runs(
        release: Release, model: ScriptedModel, forge: FakeGitHubAPI) -> None:
    issue = next(_issues)
    forge.set_issue(REPO, issue, "Missing image", "")
    release.trigger("noimage", image=NO_SUCH_IMAGE)
    job, _ = deliver(release, model, issue, "@pi go", trigger="noimage", timeout=180)
    assert job["status"]["phase"] == "Failed"
    done = release.condition(job, "Completed")
    assert done and done["reason"] == "PodNeverStarted", job["status"]
    assert "ErrImagePull" in done["message"] or "ImagePullBackOff" in done["message"], done["message"]
    wait_until("the Pod deleted", lambda: not release.pods_of(job["metadata"]["name"]), timeout=60)
    model.reply("after the missing image")  # the release has one slot: this runs only if it was freed
    following = next(_issues)
    forge.set_issue(REPO, following, "Next", "")
    after, _ = deliver(release, model, following, "@pi next")
    assert after["status"]["phase"] == "Succeeded", json.dumps(after["status"])


def test_a_job_past_its_memory_limit_ends_oomkilled_with_nothing_promoted(
        release: Release, model: ScriptedModel, forge: FakeGitHubAPI) -> None:
    issue = next(_issues)
    forge.set_issue(REPO, issue, "Memory", "")
    model.reply("a first conversation")
    first, _ = deliver(release, model, issue, "@pi remember")
    assert first["status"]["phase"] == "Succeeded", json.dumps(first["status"])
    before = release.digest(key_of(issue))
    release.trigger("small", resources={"limits": {"memory": "320Mi"}})
    model.tool_call("bash", {"command": "python3 -c 's = \"x\" * (1 << 30); print(len(s))'"}).reply("done")
    job, _ = deliver(release, model, issue, "@pi use a lot of memory", trigger="small")
    assert job["status"]["phase"] == "Failed", json.dumps(job["status"])
    done = release.condition(job, "Completed")
    assert done and done["reason"] == "OOMKilled", job["status"]
    assert "320Mi" in done["message"]
    assert release.digest(key_of(issue)) == before
