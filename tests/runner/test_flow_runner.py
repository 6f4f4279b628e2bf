"""``run.flow`` in the job: the repository's ``.pi/skills/<flow>`` becomes the prompt (issue 34, item 6).

The real runner as a process, real git over smart HTTP (the fake forge), the real pi 0.73.1 with the scripted
model. The flow is committed on the branch the operator named for it; the checkout leaves ``.pi`` out of the
working tree, so the runner copies the flow's directory out of git into a private directory and starts pi with
``--skill`` and ``/skill:<flow> <briefing>``; pi expands it. What reaches the model is asserted, not what the
runner meant.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pidispatch.contract import flow_problem
from pidispatch.runner.flow import MAX_FILES
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.runner import Job, Result, real_pi_job
from testkit.scripted_model import text_of
from testkit.workspace import PAT, REPO, served_forge

pytestmark = pytest.mark.pi  # runs the real pi (make pi): not in `make unit`

BRANCH = "pi/issue-7"
SKILL = ("---\nname: triage\ndescription: Sort a new issue into area and priority.\n---\n"
         "TRIAGE-FLOW-BODY: read the issue, label it, and say why. See notes/areas.md.\n")
NOTES = "frontend, backend, docs\n"


@pytest.fixture
def forge(tmp_path: Path) -> Iterator[FakeGitHubAPI]:
    with served_forge(tmp_path) as api:
        yield api


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    with real_pi_job(tmp_path) as j:
        yield j


def commit(forge: FakeGitHubAPI, files: dict[str, str]) -> str:
    return forge.repos.commit(REPO, BRANCH, files, "the flow")


def start(job: Job, forge: FakeGitHubAPI, sha: str, *, flow: str = "triage", fork: bool = False,
          comment: str = "please triage this") -> Result:
    # The flow's commit is the checked-out one here (read from the workspace's git); tests/runner/test_flow_base.py
    # has the default branch's commit beside another head.
    checkout = {"url": f"{forge.web_url}/{REPO}.git", "ref": f"refs/heads/{BRANCH}", "sha": sha,
                "branch": None if fork else BRANCH, "flow": {"ref": f"refs/heads/{BRANCH}", "sha": sha}}
    extra: dict[str, str | None] = {"PI_CHECKOUT": json.dumps(checkout), "GH_TOKEN": PAT, "PI_FLOW": flow,
                                    "PI_REPOSITORY": REPO}
    if fork:
        extra.update({"PI_ISSUE": None, "PI_PULL_REQUEST": "9", "PI_JOB_SPEC": json.dumps(
            {"trigger": "fix", "forge": "github", "repository": REPO, "pullRequest": 9, "fork": True,
             "comment": comment, "sender": "alice"})})
    return job.run(session=False, comment=comment, extra=extra)  # type: ignore[arg-type]


def test_the_flow_is_the_prompt_pi_sends_with_the_briefing_as_its_arguments(job: Job, forge: FakeGitHubAPI) -> None:
    sha = commit(forge, {".pi/skills/triage/SKILL.md": SKILL, ".pi/skills/triage/notes/areas.md": NOTES})
    job.model.reply("triaged")
    done = start(job, forge, sha)
    assert done.code == 0, done.stderr
    [first] = job.model.user_texts(0)
    assert first.startswith('<skill name="triage" location="'), first[:200]
    assert "TRIAGE-FLOW-BODY: read the issue" in first and "name: triage" not in first  # the body, no frontmatter
    assert "please triage this" in first.split("</skill>", 1)[1], "the briefing follows the skill as its arguments"
    location = Path(first.split('location="', 1)[1].split('"', 1)[0])
    assert not location.is_relative_to(job.workspace), "the flow is copied outside the workspace"
    assert not location.exists(), "the flow's private copy outlived the run"
    assert not (job.workspace / ".pi").exists(), "the checkout still leaves .pi out"
    [loaded] = done.events("flow_loaded")
    assert (loaded["flow"], loaded["sha"]) == ("triage", sha)


def test_the_agent_reads_the_files_beside_the_flows_skill(job: Job, forge: FakeGitHubAPI) -> None:
    """The skill says "References are relative to" its copy: the flow's other files are there to read."""
    sha = commit(forge, {".pi/skills/triage/SKILL.md": SKILL, ".pi/skills/triage/notes/areas.md": NOTES})
    job.model.tool_call("bash", {"command": "cat ${TMPDIR:-/tmp}/pi-flow-*/triage/notes/areas.md"})
    job.model.reply("read")
    done = start(job, forge, sha)
    assert done.code == 0, done.stderr
    [first] = job.model.user_texts(0)
    assert first.split("References are relative to ", 1)[1].split(".\n", 1)[0].endswith("/triage")
    results = [text_of(m.get("content")) for m in job.model.messages(1) if m.get("role") == "tool"]
    assert any(NOTES.strip() in r for r in results), results


@pytest.mark.parametrize(("files", "says"), [
    ({"README.md": "no flow here\n"}, "has no .pi/skills/triage/SKILL.md at refs/heads/pi/issue-7 (commit"),
    ({".pi/skills/triage/SKILL.md": "no frontmatter, just text\n"}, "has no frontmatter"),
    ({".pi/skills/triage/SKILL.md": "---\nname: triage\n---\nbody\n"}, "has no description"),
    ({".pi/skills/triage/SKILL.md": "---\nname: other\ndescription: x\n---\nbody\n"}, "names the skill 'other'"),
], ids=["missing", "no frontmatter", "no description", "another name"])
def test_a_flow_pi_would_not_run_as_this_skill_is_refused_before_pi(job: Job, forge: FakeGitHubAPI,
                                                                     files: dict[str, str], says: str) -> None:
    done = start(job, forge, commit(forge, files))
    assert done.code == 2, done.stderr
    assert says in done.stderr
    assert done.report["outcome"] == "refused"
    assert job.model.requests == [], "pi was started"


def link_in_the_flow(work: Path) -> None:
    flow = work / ".pi" / "skills" / "triage"
    flow.mkdir(parents=True)
    (flow / "SKILL.md").write_text(SKILL)
    (flow / "secrets.md").symlink_to("/proc/self/environ")


def flow_as_a_link(work: Path) -> None:
    (work / "elsewhere").mkdir()
    (work / "elsewhere" / "SKILL.md").write_text(SKILL)
    (work / ".pi" / "skills").mkdir(parents=True)
    (work / ".pi" / "skills" / "triage").symlink_to("../../elsewhere")


@pytest.mark.parametrize(("build", "says"), [
    (link_in_the_flow, ".pi/skills/triage/secrets.md is a symbolic link"),
    (flow_as_a_link, "has no .pi/skills/triage/SKILL.md"),
], ids=["a link inside", "the flow's directory a link"])
def test_a_link_in_a_flow_is_never_followed(job: Job, forge: FakeGitHubAPI, build: Callable[[Path], None],
                                            says: str) -> None:
    sha = forge.repos.commit_tree(REPO, BRANCH, build, "a linked flow")
    done = start(job, forge, sha)
    assert done.code == 2 and says in done.stderr, done.stderr
    assert job.model.requests == []


def test_a_flow_too_large_to_be_a_skill_is_refused(job: Job, forge: FakeGitHubAPI) -> None:
    files = {".pi/skills/triage/SKILL.md": SKILL}
    files.update({f".pi/skills/triage/f{i}.md": "x\n" for i in range(MAX_FILES)})
    done = start(job, forge, commit(forge, files))
    assert done.code == 2 and f"more than {MAX_FILES}" in done.stderr, done.stderr


def test_a_forks_pull_request_never_runs_a_flow(job: Job, forge: FakeGitHubAPI) -> None:
    sha = commit(forge, {".pi/skills/triage/SKILL.md": SKILL})
    done = start(job, forge, sha, fork=True)
    assert done.code == 2, done.stderr
    assert "never runs on a fork's pull request" in done.stderr
    assert job.model.requests == []


def test_a_flow_without_a_checkout_is_a_configuration_error(job: Job) -> None:
    done = job.run(session=False, extra={"PI_FLOW": "triage"})
    assert done.code == 2 and "needs the workspace" in done.stderr, done.stderr


@pytest.mark.parametrize("name", ["Triage", "tri_age", "-triage", "triage-", "tri--age", "a" * 65, "../x", ""])
def test_only_a_pi_skill_name_names_a_flow(name: str) -> None:
    assert flow_problem(name) is not None
    assert flow_problem("triage") is None and flow_problem("fix-ci-2") is None
