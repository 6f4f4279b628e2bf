"""``status.outputs``: what a job left on the forge, read back at its end (docs/workspace.md#what-a-job-records).

Against the fake forge's REST API over real git repositories: the runner's report only names the pushed commit
and the Pod's checkout the branch; the branch, the commit and the pull request recorded are what the forge
answers with the operator's own credential, in at most two GETs, none when nothing was pushed, none without a
forge client. Then through the dispatcher on the in-memory apiserver: the outputs ride the Job's end-of-job status
write, the printer column reads them, and the SessionKey's last job shows the pull request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.crds import job_crd, sessionkey_crd
from pidispatch.api.models import JobOutputs, JobPullRequest, JobSession, JobStatus, SessionKeyStatus, problem
from pidispatch.api.views import JobView
from pidispatch.contract import JOB_LABEL
from pidispatch.forge.github import Forge
from pidispatch.jobflow.complete import Completion, with_outputs
from pidispatch.jobflow.outputs import own_pull, read_outputs
from pidispatch.jobflow.podview import PodView
from pidispatch.jobflow.sessionkey import last_job_facts
from pidispatch.jobflow.summarize import Ended, summarize
from pidispatch.jobflow.summarize_sessionkey import StoreReading, sessionkey_status
from pidispatch.report import RunnerReport, Workspace
from pidispatch.settings import GitHubSettings
from pidispatch.store.inspect import inspect_key
from pidispatch.store.staging import HostRecord
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.gitforge import Repos
from testkit.jobflow import Clock, api_with_trigger, controller, new_job, phase, pump
from testkit.memoryapi import PODS, MemoryApi
from testkit.store import KEY, PI, Store

REPO = "acme/widgets"
PAT = "github_pat_outputs"
BRANCH = "pi/issue-7"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeGitHubAPI]:
    repos = Repos(tmp_path / "forge")
    repos.create(REPO)
    with FakeGitHubAPI(pats={PAT}, repos=repos) as fake:
        yield fake


@pytest.fixture
def forge(api: FakeGitHubAPI, tmp_path: Path) -> Forge:
    token = tmp_path / "token"
    token.write_text(PAT)
    return Forge(GitHubSettings(api_url=api.url, token_file=str(token), timeout_seconds=2), "pat")


def gets(api: FakeGitHubAPI) -> list[str]:
    return [r.path for r in api.requests if r.method == "GET"]


def test_a_push_with_a_pull_request_is_confirmed_by_one_get(api: FakeGitHubAPI, forge: Forge) -> None:
    pushed = api.repos.commit(REPO, BRANCH, {"fix.py": "ok"}, "the fix")
    api.set_pull(REPO, 12, head_ref=BRANCH)
    before = len(api.requests)
    found = read_outputs(forge, REPO, BRANCH, pushed)
    assert found == JobOutputs(branch=BRANCH, commit=pushed,
                               pullRequest=JobPullRequest(number=12, url=f"{api.web_url}/{REPO}/pull/12"))
    assert [r.path.split("?")[0] for r in api.requests[before:]] == [f"/repos/{REPO}/pulls"], \
        "the pull request's head is the pushed commit: the branch needs no second read"
    assert not api.violations


def test_a_push_without_a_pull_request_reads_the_branch_too(api: FakeGitHubAPI, forge: Forge) -> None:
    pushed = api.repos.commit(REPO, BRANCH, {"fix.py": "ok"}, "the fix")
    api.set_pull(REPO, 3, head_ref="someone-elses-branch")
    before = len(api.requests)
    assert read_outputs(forge, REPO, BRANCH, pushed) == JobOutputs(branch=BRANCH, commit=pushed)
    assert [r.path.split("?")[0] for r in api.requests[before:]] == [
        f"/repos/{REPO}/pulls", f"/repos/{REPO}/git/ref/heads/{BRANCH}"]
    assert not api.violations


def test_a_forks_branch_of_the_same_name_is_not_the_jobs_pull_request(api: FakeGitHubAPI, forge: Forge) -> None:
    pushed = api.repos.commit(REPO, BRANCH, {"fix.py": "ok"}, "the fix")
    api.set_pull(REPO, 5, head_ref=BRANCH, head_repo="mallory/widgets")
    assert read_outputs(forge, REPO, BRANCH, pushed) == JobOutputs(branch=BRANCH, commit=pushed)


def test_a_claimed_push_the_forge_does_not_have_is_unconfirmed_and_records_nothing_else(
        api: FakeGitHubAPI, forge: Forge) -> None:
    api.repos.commit(REPO, BRANCH, {"fix.py": "ok"}, "the fix")
    api.set_pull(REPO, 12, head_ref=BRANCH)
    found = read_outputs(forge, REPO, BRANCH, "f" * 40)  # the agent's word: a commit that is not the tip
    assert found is not None and found.unconfirmed and "another commit" in found.unconfirmed
    assert (found.branch, found.commit, found.pullRequest) == (None, None, None)


def test_a_branch_gone_from_the_forge_is_unconfirmed(api: FakeGitHubAPI, forge: Forge) -> None:
    found = read_outputs(forge, REPO, "pi/issue-404", "e" * 40)
    assert found is not None and found.unconfirmed and "not on the forge" in found.unconfirmed
    assert found.branch is None


def test_an_unreachable_forge_is_unconfirmed_naming_the_endpoint_not_the_branch(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(PAT)
    dead = Forge(GitHubSettings(api_url="http://127.0.0.1:9", token_file=str(token), timeout_seconds=1), "pat")
    found = read_outputs(dead, REPO, BRANCH, "e" * 40)
    assert found is not None and found.unconfirmed and "/repos/{owner}/{repo}/pulls" in found.unconfirmed


def test_no_push_no_branch_or_no_forge_client_reads_nothing(api: FakeGitHubAPI, forge: Forge) -> None:
    before = len(api.requests)
    assert read_outputs(forge, REPO, BRANCH, None) is None  # pushed nothing
    assert read_outputs(forge, REPO, None, "e" * 40) is None  # a fork's pull request: no branch of its own
    assert read_outputs(None, REPO, BRANCH, "e" * 40) is None  # no credentials: never the agent's word
    assert len(api.requests) == before


# ---- the Job's one end-of-job write, the printer columns, the SessionKey's last job ----------------------------

OUTPUTS = JobOutputs(branch=BRANCH, commit="c" * 40, pullRequest=JobPullRequest(number=12, url="https://x/pull/12"))


def ended(outputs: JobOutputs | None) -> Ended:
    return Ended("Succeeded", JobSession(resumed=False, reason="absent"), None, "PodSucceeded",
                 "The job Pod succeeded.", outputs=outputs)


def test_the_outputs_are_part_of_the_end_of_job_patch() -> None:
    job = JobView.of({"metadata": {"name": "j", "generation": 1}, "spec": {}, "status": {"phase": "Running"}})
    patch = summarize(job, ended(OUTPUTS), "2026-12-07T00:00:00Z")
    assert patch["phase"] == "Succeeded"
    assert patch["outputs"] == {"branch": BRANCH, "commit": "c" * 40,
                                "pullRequest": {"number": 12, "url": "https://x/pull/12"}}
    assert "outputs" not in summarize(job, ended(None), "2026-12-07T00:00:00Z")


def test_the_printer_columns_show_the_pull_request() -> None:
    columns = {c["name"]: c["jsonPath"] for c in job_crd()["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["PR"] == ".status.outputs.pullRequest.number"
    keys = {c["name"]: c["jsonPath"] for c in sessionkey_crd()["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert keys["PR"] == ".status.lastPullRequest.number"


def test_the_sessionkeys_last_job_shows_its_pull_request(store: Store) -> None:
    store.put()
    host = HostRecord(key=KEY, forge="github", repository=REPO, branch=BRANCH, venue="kubernetes", pi_version=PI)
    last = last_job_facts("j", host, JobSession(reason="resumed"), None, None, OUTPUTS)
    status = sessionkey_status(StoreReading.of(inspect_key(store.settings, KEY)), None, last, 2).to_patch()
    assert status["lastJob"] == "j" and status["lastPullRequest"] == {"number": 12, "url": "https://x/pull/12"}
    assert problem(SessionKeyStatus, status) is None, "the operator writes a status its own CRD would refuse"
    without = sessionkey_status(StoreReading.of(inspect_key(store.settings, KEY)), None,
                                last_job_facts("j", host, None, None)).to_patch()
    assert "lastPullRequest" not in without, "a job that found no pull request leaves the last one shown"
    assert problem(JobStatus, {"outputs": OUTPUTS.model_dump(mode="json", exclude_none=True)}) is None


# ---- through the dispatcher: the start hands the Pod its branch, the end records what the forge confirms ------

def end_pod(api: MemoryApi, job: str, message: str) -> dict[str, Any]:
    [pod] = [p for p in api.pods() if p["metadata"]["labels"].get(JOB_LABEL) == job]
    path = f"{PODS}/{pod['metadata']['name']}"
    api.patch(path + "/status", {"status": {"phase": "Succeeded", "containerStatuses": [
        {"name": "pi", "state": {"terminated": {"exitCode": 0, "message": message}}}]}})
    return api.get(path)


def test_a_jobs_end_records_the_pull_request_the_forge_confirms_in_its_one_end_write(
        api: FakeGitHubAPI, forge: Forge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster_api = api_with_trigger()
    clock = Clock()
    d = controller(cluster_api, clock, tmp_path / "staging")
    d.forge = forge
    api.set_issue(REPO, 7, "Flaky", "It fails.")
    d.on_job("ADDED", new_job(cluster_api, "j", issue=7))
    pump(d)
    assert phase(cluster_api, "j") == "Running"
    assert cluster_api.job("j")["status"]["checkout"]["branch"] == BRANCH, "the start records where the job pushes"
    pushed = api.repos.commit(REPO, BRANCH, {"fix.py": "ok"}, "the agent's fix")
    api.set_pull(REPO, 8, head_ref=BRANCH)
    writes: list[str] = []
    patch = cluster_api.patch

    def counted(path: str, body: Any, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("/jobs/j/status"):
            writes.append(path)
        return patch(path, body, *args, **kwargs)

    monkeypatch.setattr(cluster_api, "patch", counted)
    before = len(api.requests)
    pod = end_pod(cluster_api, "j", json.dumps({"workspace": {"head": pushed, "pushed": pushed},
                                                "outcome": "completed"}))
    d.complete("j", PodView.of(pod))
    status = cluster_api.job("j")["status"]
    assert status["phase"] == "Succeeded"
    assert status["outputs"] == {"branch": BRANCH, "commit": pushed,
                                 "pullRequest": {"number": 8, "url": f"{api.web_url}/{REPO}/pull/8"}}
    assert len(writes) == 1, "the outputs ride the end-of-job status write, not one of their own"
    assert len([r for r in api.requests[before:] if r.method != "GET"]) == 0
    assert len(api.requests[before:]) == 1, "one GET: the pull request's head confirms the branch"


def test_an_unexpected_failure_reading_the_outputs_never_holds_up_the_jobs_end(
        forge: Forge, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(forge.client, "pulls_with_head", broken)
    done = Completion(ended(None), None, RunnerReport(workspace=Workspace(head="c" * 40, pushed="c" * 40)), False)
    job = JobView.of({"metadata": {"name": "j"},
                      "spec": {"trigger": "fix", "forge": "github", "repository": REPO, "issue": 7},
                      "status": {"checkout": {"ref": "refs/heads/main", "sha": "d" * 40, "branch": BRANCH}}})
    found = with_outputs(done, forge, job, None).ended.outputs
    assert found is not None and found.unconfirmed and "RuntimeError" in found.unconfirmed
    assert found.branch is None
    assert with_outputs(done, None, job, None) is done, "no forge client: no outputs, no lookup"


def listed(number: int, state: str, sha: str, repo: str = REPO) -> dict[str, Any]:
    return {"number": number, "state": state, "html_url": f"https://x/pull/{number}",
            "head": {"ref": BRANCH, "sha": sha, "repo": {"full_name": repo}}}


def test_which_pull_request_of_the_listing_is_the_jobs() -> None:
    pushed = "c" * 40
    assert own_pull([listed(9, "closed", "a" * 40), listed(4, "open", "b" * 40)], REPO, BRANCH, pushed)["number"] == 4
    assert own_pull([listed(9, "closed", "a" * 40)], REPO, BRANCH, pushed) is None, \
        "a pull request closed before this push is not the job's"
    assert own_pull([listed(9, "closed", pushed)], REPO, BRANCH, pushed)["number"] == 9, "merged with the push"
    assert own_pull([listed(5, "open", pushed, "mallory/widgets")], REPO, BRANCH, pushed) is None
    assert own_pull({"message": "not a list"}, REPO, BRANCH, pushed) is None
