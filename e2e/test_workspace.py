"""Jobs do real work (issue 14): the workspace, git and gh, end to end on the local control plane.

A local forge on loopback over HTTPS with a throwaway CA (``testkit/gitforge.py``: real repositories behind
``git http-backend``, requiring a token) and the fake GitHub API in GitHub Enterprise's layout
(``/api/v3``, GraphQL at ``/api/graphql``) with a GitHub App. The chart is installed with
``github.webUrl``, ``github.apiUrl`` and ``github.caBundle.configMap``. Job Pods run ``pidispatch runner``
with the pinned pi 0.73.1; the scripted model drives pi's own ``bash`` tool, which runs real ``git`` and
Debian's ``gh``.

1. an issue job clones at the default branch's tip, the agent commits on ``pi/issue-7``, pushes, and
   opens a pull request with ``gh pr create``;
2. a comment on that pull request: the job clones at the PR's head (delivery 1's commit is there),
   resumes the conversation, pushes a second commit;
3. after someone else pushed to the branch, the resume envelope names the moved head;
and the installation tokens are in none of: the workspace's ``.git/config``, the transcript, the Pod
specs, Events, the operator's and the jobs' logs. A commit the forge no longer has fails its Job
``CheckoutCommitGone``, once, with no retry.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.hosttools import require
from e2e.framework.kube import Kube
from e2e.framework.release import ROOT, Release, base_values, create_secret, fresh_namespace, merge
from pidispatch.store.keys import issue_key
from testkit.fakegithub_api import FakeGitHubAPI, generate_app_key
from testkit.gitforge import Repos, make_tls
from testkit.pitool import pi_binary
from testkit.scripted_model import ScriptedModel, text_of, write_agent_dir

pytestmark = pytest.mark.e2e

REPO = "acme/widgets"
APP_ID, INSTALLATION = 5151, 88


@pytest.fixture(scope="module", autouse=True)
def host_tools() -> None:
    """The agent's ``bash`` runs this machine's ``git`` and ``gh`` (e2e/framework/hosttools.py): without them no pull
    request is opened, while the scripted reply still says one was."""
    require("git", "gh")


@pytest.fixture(scope="module")
def forge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGitHubAPI]:
    root = tmp_path_factory.mktemp("forge")
    ca, cert, key = make_tls(root / "tls")
    repos = Repos(root / "repos")
    repos.create(REPO, {"README.md": "# widgets\n", "cache.py": "def get(k):\n    return None\n"})
    pem, public = generate_app_key()
    with FakeGitHubAPI(app_id=APP_ID, public_key=public, installation_id=INSTALLATION, installation_repos=(REPO,),
                       repos=repos, tls=(str(cert), str(key)), prefix="/api/v3") as api:
        api.app_pem = pem  # type: ignore[attr-defined]
        api.ca = ca  # type: ignore[attr-defined]
        yield api


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as m:
        yield m


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube, kubelet: object, forge: FakeGitHubAPI, model: ScriptedModel,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    root = tmp_path_factory.mktemp("pi")
    agent = write_agent_dir(root / "agent", model.base_url)
    (root / "home").mkdir()
    ns = fresh_namespace(kube, "workspace")
    create_secret(kube, ns, "gh-app", {"private-key.pem": forge.app_pem})  # type: ignore[attr-defined]
    kube.create(f"/api/v1/namespaces/{ns}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "forge-ca"},
        "data": {"ca.crt": Path(forge.ca).read_text()}})  # type: ignore[attr-defined]
    # The job image's extensions directory (run.command): the one test command, /review.
    extensions = root / "extensions"
    extensions.mkdir()
    shutil.copy(ROOT / "testkit" / "extensions" / "review_command.ts", extensions)
    values = merge(base_values(), {
        "sessions": {"enabled": True},
        "job": {"command": ["pidispatch", "runner"],
                "env": {"PI_BIN": str(pi_binary()), "PI_CODING_AGENT_DIR": str(agent), "HOME": str(root / "home"),
                        "PI_COMMAND_EXTENSIONS_DIR": str(extensions)},
                "git": {"name": "pi-e2e[bot]", "email": "pi-e2e[bot]@users.noreply.github.com"}},
        "github": {"authSource": "app", "apiUrl": forge.url, "webUrl": forge.web_url, "timeoutSeconds": 5,
                   "caBundle": {"configMap": "forge-ca"},
                   "app": {"id": APP_ID, "installationId": INSTALLATION, "privateKeySecret": {"name": "gh-app"}}}})
    r = Release(cluster, kube, ns, values).install()
    r.trigger("fix")
    try:
        yield r
    finally:
        r.uninstall()
        kube.delete_ignore_missing(f"/api/v1/namespaces/{ns}")


def deliver(r: Release, model: ScriptedModel, name: str, **spec: Any) -> tuple[dict[str, Any], list[dict]]:
    before = len(model.requests)
    job = r.run(name, timeout=180, **spec)
    return job, model.requests[before:]


def said(requests: list[dict]) -> str:
    return "\n".join(text_of(m.get("content")) for body in requests for m in body.get("messages", []))


def tool_results(requests: list[dict]) -> str:
    return "\n".join(text_of(m.get("content")) for body in requests for m in body.get("messages", [])
                     if m.get("role") == "tool")


def workspace_dirs(cluster: Cluster, r: Release, pod_name: str) -> list[Path]:
    uid = r.kube.get(f"/api/v1/namespaces/{r.ns}/pods/{pod_name}")["metadata"]["uid"]
    return [p for p in cluster.kubelet_dir.glob(f"pods/*{uid}*/volumes/workspace") if p.is_dir()] + \
        [p for p in cluster.kubelet_dir.glob(f"pods/{uid}/volumes/workspace") if p.is_dir()]


PUSH_AND_OPEN = ("set -e; git log --oneline -1; echo 'lock around the cache' > fix.txt; git add fix.txt; "
                 "git commit -qm 'Fix the flaky cache test'; git push -q; "
                 "gh pr create --repo \"$GH_HOST/acme/widgets\" --head pi/issue-7 --base main "
                 "--title 'Fix the flaky cache test' --body 'Fixes #7'")
SECOND = ("set -e; test -f fix.txt; echo 'assert get(1) is None' > test_cache.py; git add test_cache.py; "
          "git commit -qm 'Add a regression test'; git push -q; git log --oneline -3")


def test_deliveries_clone_push_open_a_pull_request_resume_and_see_the_moved_head(
        release: Release, forge: FakeGitHubAPI, model: ScriptedModel, cluster: Cluster) -> None:
    r, repos = release, forge.repos
    forge.set_issue(REPO, 7, "The cache test is flaky", "It fails one run in ten on CI.")
    main = repos.tip(REPO, "main")

    # -- delivery 1: the issue is labelled ------------------------------------------------------------
    model.tool_call("bash", {"command": PUSH_AND_OPEN}).reply("Pushed the fix and opened a pull request.")
    first, seen1 = deliver(r, model, "d1", issue=7, comment="@pi the cache test is flaky, fix it")
    assert first["status"]["phase"] == "Succeeded", (json.dumps(first["status"]), r.pod_log(first["status"]["podName"]))
    assert first["status"]["checkout"] == {"ref": "refs/heads/main", "sha": main, "branch": "pi/issue-7"}
    prompt = said(seen1[:1])
    assert "The cache test is flaky" in prompt and "It fails one run in ten" in prompt, "the issue's text"
    assert f"at commit {main}, on the branch pi/issue-7" in prompt
    pushed1 = repos.tip(REPO, "pi/issue-7")
    assert pushed1 is not None and repos.log(REPO, "pi/issue-7")[0].endswith("Fix the flaky cache test")
    assert first["status"]["workspace"] == {"head": pushed1, "pushed": pushed1}
    [pull] = forge.created_pulls(REPO)
    assert (pull.head_ref, pull.base_ref, pull.title) == ("pi/issue-7", "main", "Fix the flaky cache test")
    assert f"{forge.web_url}/{REPO}/pull/{pull.number}" in tool_results(seen1), "gh printed the new PR's URL"
    # What the job left, as the operator read it back from the forge (docs/workspace.md#what-a-job-records).
    pr_view = {"number": pull.number, "url": f"{forge.web_url}/{REPO}/pull/{pull.number}"}
    assert first["status"]["outputs"] == {"branch": "pi/issue-7", "commit": pushed1, "pullRequest": pr_view}
    author = repos.log(REPO, "pi/issue-7")[0]
    del author
    key = issue_key("github", REPO, 7)
    assert r.sessionkey(key)["status"]["lastCommit"] == {"sha": pushed1, "pushed": True}
    assert r.sessionkey(key)["status"]["lastPullRequest"] == pr_view

    # -- delivery 2: a comment on that pull request ----------------------------------------------------
    forge.set_pull(REPO, pull.number, head_ref="pi/issue-7", title=pull.title, body=pull.body)
    model.tool_call("bash", {"command": SECOND}).reply("Added the regression test.")
    second, seen2 = deliver(r, model, "d2", pullRequest=pull.number, comment="@pi also add a regression test")
    assert second["status"]["phase"] == "Succeeded", (json.dumps(second["status"]),
                                                      r.pod_log(second["status"]["podName"]))
    assert second["status"]["checkout"] == {"ref": "refs/heads/pi/issue-7", "sha": pushed1, "branch": "pi/issue-7"}
    assert second["status"]["session"]["resumed"] is True, second["status"]
    assert "the cache test is flaky, fix it" in said(seen2), "delivery 1's conversation came along"
    assert "The branch moved" not in said(seen2), "nothing moved between the two deliveries"
    log = repos.log(REPO, "pi/issue-7")
    assert [line.split(" ", 1)[1] for line in log[:2]] == ["Add a regression test", "Fix the flaky cache test"]
    pushed2 = repos.tip(REPO, "pi/issue-7")
    assert second["status"]["outputs"] == {"branch": "pi/issue-7", "commit": pushed2, "pullRequest": pr_view}, \
        "the pull request the job ran on, updated"

    # -- delivery 3: someone else pushed to the branch first -----------------------------------------
    other = repos.commit(REPO, "pi/issue-7", {"NOTES.md": "a colleague was here\n"}, "A colleague's commit")
    model.reply("I see the colleague's commit.")
    third, seen3 = deliver(r, model, "d3", pullRequest=pull.number, comment="@pi please have a look again")
    assert third["status"]["phase"] == "Succeeded", json.dumps(third["status"])
    assert third["status"]["checkout"]["sha"] == other and third["status"]["session"]["resumed"] is True
    envelope = text_of([m for m in seen3[0]["messages"] if m.get("role") == "user"][-1].get("content"))
    assert f"you left it at {pushed2}, it is now at {other}: 1 new commit by someone else" in envelope, envelope
    assert "outputs" not in third["status"], "the job pushed nothing: no outputs, and no forge lookup"

    # -- the tokens, nowhere they must not be ------------------------------------------------------------
    tokens = [forge.issued_token(sha) for sha, _ in forge.issued()]
    assert tokens and all(tokens)
    places: dict[str, str] = {"operator log": r.operator_log(), "transcript": (r.key_dir(key) / "current.jsonl")
                              .read_text(errors="replace")}
    for job in (first, second, third):
        pod = job["status"]["podName"]
        places[f"{pod} spec"] = json.dumps(r.kube.get(f"/api/v1/namespaces/{r.ns}/pods/{pod}"))
        places[f"{pod} log"] = r.pod_log(pod)
        for ws in workspace_dirs(cluster, r, pod):
            places[f"{pod} .git/config"] = (ws / ".git" / "config").read_text()
    places["events"] = json.dumps(r.kube.list(f"/api/v1/namespaces/{r.ns}/events"))
    assert any(name.endswith(".git/config") for name in places), "the workspaces were found"
    leaked = [where for where, text in places.items() for token in tokens if token and token in text]
    assert leaked == []


def test_a_commit_the_forge_no_longer_has_fails_the_job_by_name_and_is_not_retried(
        release: Release, forge: FakeGitHubAPI) -> None:
    r, repos = release, forge.repos
    forge.set_issue(REPO, 21, "Gone", "")
    base = repos.tip(REPO, "main")
    resolved = repos.commit(REPO, "pi/issue-21", {"a.txt": "1\n"}, "what the API still names")
    repos.commit(REPO, "pi/issue-21", {"b.txt": "2\n"}, "force-pushed over it", force_from=base)
    repos.prune(REPO)
    forge.stale_refs[(REPO, "refs/heads/pi/issue-21")] = resolved  # the API lags behind the force-push
    name = f"gone-{uuid.uuid4().hex[:5]}"
    job = r.run(name, issue=21, timeout=120)
    assert job["status"]["phase"] == "Failed"
    completed = r.condition(job, "Completed")
    assert completed is not None and completed["reason"] == "CheckoutCommitGone", completed
    assert "force-pushed" in completed["message"]
    assert len(r.pods_of(name)) == 1, "not retried"


def test_a_context_file_linked_outside_the_workspace_fails_the_job_before_pi_starts(
        release: Release, forge: FakeGitHubAPI, model: ScriptedModel) -> None:
    """Issue 31: AGENTS.md -> /proc/self/environ would put the job's environment, its token among it, into the
    system prompt sent to the model provider. The Job ends CheckoutForbiddenPath, named, and pi never asks."""
    r = release
    forge.set_issue(REPO, 22, "Linked out", "")
    forge.repos.commit_tree(REPO, "pi/issue-22", lambda work: (work / "AGENTS.md").symlink_to("/proc/self/environ"),
                            "an AGENTS.md that links out")
    before = len(model.requests)
    name = f"linked-{uuid.uuid4().hex[:5]}"
    job = r.run(name, issue=22, timeout=120)
    assert job["status"]["phase"] == "Failed"
    completed = r.condition(job, "Completed")
    assert completed is not None and completed["reason"] == "CheckoutForbiddenPath", completed
    assert "AGENTS.md" in completed["message"] and "outside the workspace" in completed["message"]
    assert len(model.requests) == before, "pi started"
    assert len(r.pods_of(name)) == 1, "not retried"


RACE = ("set -e; branch=$(git branch --show-current); echo \"attempt on $branch\" > race.txt; git add race.txt; "
        "git commit -qm \"Attempt on $branch\"; git push -q; "
        "gh pr create --repo \"$GH_HOST/acme/widgets\" --head \"$branch\" --base main "
        "--title \"[r${branch##*-r}/2] Fix the race\" --body 'Fixes #31'")


def test_two_replicas_push_two_branches_and_open_two_pull_requests(release: Release, forge: FakeGitHubAPI,
                                                                   model: ScriptedModel) -> None:
    """``run.replicas: 2`` (issue 34, item 6): each attempt clones the default branch's tip, works on its own
    ``pi/issue-<n>-r<i>`` and opens its own pull request; neither sees the other's commit. The Jobs are the
    receiver's two (``tests/api/test_replicas.py`` proves the receiver plans them), run one after the other so
    the scripted model's queue meets each in turn."""
    r, repos = release, forge.repos
    forge.set_issue(REPO, 31, "A race in the cache", "Two writers, one key.")
    r.trigger("race", resume=False, replicas=2)
    main = repos.tip(REPO, "main")
    seen: dict[int, list[dict]] = {}
    for i in (1, 2):
        model.tool_call("bash", {"command": RACE}).reply(f"Attempt {i} pushed.")
        job, seen[i] = deliver(r, model, f"race-r{i}", trigger="race", issue=31, comment="@pi race",
                               replica=i, replicas=2)
        assert job["status"]["phase"] == "Succeeded", (json.dumps(job["status"]), r.pod_log(job["status"]["podName"]))
        assert job["status"]["checkout"] == {"ref": "refs/heads/main", "sha": main, "branch": f"pi/issue-31-r{i}"}, \
            "each attempt starts fresh"
        assert f"on the branch pi/issue-31-r{i}" in said(seen[i][:1]) and f"[r{i}/2]" in said(seen[i][:1])
        assert (job["status"].get("session") or {}).get("resumed") is not True, "replicas never resume"
    assert repos.tip(REPO, "pi/issue-31") is None, "no replica is the unsuffixed original"
    for i in (1, 2):
        assert repos.log(REPO, f"pi/issue-31-r{i}")[0].endswith(f"Attempt on pi/issue-31-r{i}")
        assert repos.count(REPO, main, f"pi/issue-31-r{i}") == (1, 0), "built on main, not on the sibling"
    pulls = [(p.head_ref, p.title) for p in forge.created_pulls(REPO) if p.head_ref.startswith("pi/issue-31")]
    assert sorted(pulls) == [("pi/issue-31-r1", "[r1/2] Fix the race"), ("pi/issue-31-r2", "[r2/2] Fix the race")]


TRIAGE = ("---\nname: triage\ndescription: Sort an issue into an area.\n---\n"
          "TRIAGE-FLOW-E2E: name the area the issue belongs to.\n")


def test_a_flow_trigger_runs_the_repositorys_skill_through_the_operator(release: Release, forge: FakeGitHubAPI,
                                                                        model: ScriptedModel) -> None:
    """``run.flow`` (issue 34, item 6) through the operator: the Trigger is Ready, the Pod gets ``PI_FLOW``, the
    operator names the default branch's tip for the flow, the runner copies ``.pi/skills/triage`` out of that
    commit (not the ``pi/issue-41`` it checked out, whose copy was rewritten), and pi sends the skill's body with
    the briefing as its arguments. ``tests/runner/test_flow_runner.py`` and ``tests/runner/test_flow_base.py`` have the
    refusals."""
    r, repos = release, forge.repos
    forge.set_issue(REPO, 41, "Which area?", "The login page is slow.")
    repos.commit(REPO, "main", {".pi/skills/triage/SKILL.md": TRIAGE}, "the triage flow")
    rewritten = TRIAGE.replace("TRIAGE-FLOW-E2E", "REWRITTEN-ON-THE-BRANCH")
    sha = repos.commit(REPO, "pi/issue-41", {".pi/skills/triage/SKILL.md": rewritten}, "a push to the branch")
    r.trigger("triage", resume=False, flow="triage")
    model.reply("Area: frontend.")
    job, seen = deliver(r, model, "flow-41", trigger="triage", issue=41, comment="@pi triage")
    assert job["status"]["phase"] == "Succeeded", (json.dumps(job["status"]), r.pod_log(job["status"]["podName"]))
    assert job["status"]["checkout"] == {"ref": "refs/heads/pi/issue-41", "sha": sha, "branch": "pi/issue-41"}
    [first] = [text_of(m.get("content")) for m in seen[0]["messages"] if m.get("role") == "user"]
    assert first.startswith('<skill name="triage"') and "TRIAGE-FLOW-E2E" in first, first[:300]
    assert "REWRITTEN-ON-THE-BRANCH" not in first, "the flow came from the default branch, not the job's branch"
    assert "The login page is slow." in first.split("</skill>", 1)[1], "the briefing follows as the arguments"


def test_a_command_trigger_runs_the_images_command_through_the_operator(release: Release, forge: FakeGitHubAPI,
                                                                        model: ScriptedModel) -> None:
    """``run.command`` (issue 34, item 6) through the operator: the Pod gets ``PI_COMMAND``, the image's
    extension (``job.env``'s ``PI_COMMAND_EXTENSIONS_DIR``) registers ``/review``, and its handler's message,
    built from the command's arguments and the event file, is what the model receives."""
    r = release
    forge.set_issue(REPO, 42, "Review me", "")
    r.trigger("review-cmd", resume=False, command="/review focus on tests")
    model.reply("Reviewed.")
    job, seen = deliver(r, model, "cmd-42", trigger="review-cmd", issue=42, comment="@pi /other please")
    assert job["status"]["phase"] == "Succeeded", (json.dumps(job["status"]), r.pod_log(job["status"]["podName"]))
    [first] = [text_of(m.get("content")) for m in seen[0]["messages"] if m.get("role") == "user"]
    assert first.startswith('REVIEW-COMMAND args="focus on tests" comment="@pi /other please"'), first
