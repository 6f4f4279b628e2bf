"""``pidispatch run`` end to end (docs/cli.md#pidispatch-run): the command, as a person runs it with a kubeconfig and a
GitHub token, creates a Job on the real kube-apiserver that the operator installed by its chart runs to Succeeded;
the issue is read from the fake GitHub API (``testkit/fakegithub_api.py``), the job Pod is the scripted stand-in."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import Release, base_values, installed, merge
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

REPO = "acme/widgets"
PAT = "ghp_e2e_pidispatch_run"


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet) -> Iterator[Release]:
    with installed(cluster, kube, "adhoc", merge(base_values(), {"sessions": {"enabled": True}})) as r:
        yield r


@pytest.fixture
def forge() -> Iterator[FakeGitHubAPI]:
    with FakeGitHubAPI(pats={PAT}) as fake:
        yield fake


def pidispatch_run(release: Release, forge: FakeGitHubAPI, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**release.cluster.env(), "GH_TOKEN": PAT}
    env.pop("PI_DISPATCH_NAMESPACE", None)
    return subprocess.run([sys.executable, "-m", "pidispatch", "run", "--namespace", release.ns,
                           "--api-url", forge.url, *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=180)


def test_a_job_created_by_pidispatch_run_runs_to_succeeded(release: Release, forge: FakeGitHubAPI) -> None:
    forge.set_issue(REPO, 4242, "The parser drops the last line")
    wait_until("Trigger fix Ready", lambda: any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (release.get("triggers", "fix").get("status") or {}).get("conditions") or []), timeout=60)

    done = pidispatch_run(release, forge, "--trigger", "fix", "--repo", REPO, "--issue", "4242",
                          "--comment", "@pi go", "--wait", "--timeout", "120", "--json")

    assert done.returncode == 0, (done.stdout, done.stderr, release.operator_log()[-3000:])
    (entry,) = json.loads(done.stdout)["jobs"]
    assert entry["phase"] == "Succeeded"
    job = release.get("jobs", entry["name"])
    assert job["status"]["phase"] == "Succeeded"
    assert job["spec"]["repository"] == REPO and job["spec"]["issue"] == 4242
    assert job["spec"]["sender"] == "token-owner" and job["spec"]["deliveryId"].startswith("run-")
    assert job["metadata"]["labels"]["app.kubernetes.io/created-by"] == "pidispatch-run"


def test_pidispatch_run_refuses_an_issue_that_does_not_exist(release: Release, forge: FakeGitHubAPI) -> None:
    before = {j["metadata"]["name"] for j in release.kube.list(release.path("jobs"))}
    done = pidispatch_run(release, forge, "--trigger", "fix", "--repo", REPO, "--issue", "9999")
    assert done.returncode == 1 and done.stdout == ""
    assert f"issue {REPO}#9999 does not exist" in done.stderr
    assert {j["metadata"]["name"] for j in release.kube.list(release.path("jobs"))} == before
