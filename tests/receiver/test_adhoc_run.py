"""``pidispatch run`` (docs/cli.md#pidispatch-run) against the fake forge's real HTTP server and the in-memory
apiserver: the Job it creates is the one the receiver plans for the same facts, and every refusal says why."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

import pytest

from pidispatch import cli
from pidispatch.receiver import adhoc, adhoc_run
from pidispatch.receiver import delivery as core
from pidispatch.receiver.poll.forge import ForgeReader
from testkit.fakegithub import Webhooks
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.memoryapi import JOBS, NS, TRIGGERS, MemoryApi
from testkit.receiver import check_against_crd, trigger

REPO = "acme/widgets"
PAT = "ghp_adhoc_run_test_token"


@pytest.fixture
def forge() -> Iterator[FakeGitHubAPI]:
    with FakeGitHubAPI(pats={PAT}) as fake:
        fake.set_issue(REPO, 7, "Something is broken")
        fake.set_pull(REPO, 12)
        fake.set_pull(REPO, 13, head_repo="stranger/widgets")
        yield fake


def ready(body: dict[str, Any], status: str = "True", reason: str = "Accepted") -> dict[str, Any]:
    body["status"] = {"conditions": [{"type": "Ready", "status": status, "reason": reason, "message": "m",
                                       "lastTransitionTime": "2026-12-07T00:00:00Z"}]}  # as the API has it
    return body


@pytest.fixture
def api() -> MemoryApi:
    memory = MemoryApi()
    for body in (ready(trigger("fix", "issue_comment.created", phrase="@pi", repository=REPO)),
                 ready(trigger("many", "issue_comment.created", phrase="@pi", repositories=["acme/*"])),
                 ready(trigger("twice", "issues.labeled", label="pi", repository=REPO,
                               run={"model": "fake/fake-model", "replicas": 2})),
                 ready(trigger("broken", "issue_comment.created", phrase="@pi", repository=REPO), "False",
                       "PlacementConflict"),
                 trigger("fresh", "issue_comment.created", phrase="@pi", repository=REPO)):
        memory.objects[f"{TRIGGERS}/{body['metadata']['name']}"] = body
    return memory


def args(**given: Any) -> argparse.Namespace:
    base = {"trigger": "fix", "issue": None, "pull_request": None, "repo": None, "comment": None, "namespace": None,
            "token": None, "api_url": None, "wait": False, "timeout": 60.0, "json": False}
    return argparse.Namespace(**{**base, **given})


def reader(forge: FakeGitHubAPI, token: str = PAT) -> ForgeReader:
    return ForgeReader(forge.url, lambda repository: f"Bearer {token}")


def jobs(api: MemoryApi) -> list[dict[str, Any]]:
    return api.list(JOBS)


def test_an_issue_run_creates_the_job_the_receiver_plans_for_that_comment(
        api: MemoryApi, forge: FakeGitHubAPI, capsys: pytest.CaptureFixture[str]) -> None:
    assert adhoc_run.run(args(issue=7, comment="@pi fix the parser"), api, NS, reader(forge)) == 0
    (job,) = jobs(api)
    assert capsys.readouterr().out == job["metadata"]["name"] + "\n"
    check_against_crd(job)
    # The receiver's plan for a comment with the same text, by the token's owner, on the same issue.
    payload = Webhooks("http://unused", b"s", repository=REPO, sender="token-owner").issue_comment(
        7, "@pi fix the parser").payload
    event = core.parse_delivery("issue_comment", payload)
    assert isinstance(event, core.Event)
    (received,) = core.plan_jobs([api.get(f"{TRIGGERS}/fix")], event, "d-1", None, "0" * 64)
    assert received.body is not None
    differs = {"deliveryId"}
    assert {k: v for k, v in job["spec"].items() if k not in differs} == \
        {k: v for k, v in received.body["spec"].items() if k not in differs}
    assert job["spec"]["sender"] == "token-owner" and job["spec"]["deliveryId"].startswith("run-")
    assert job["metadata"]["labels"] == {core.CREATED_BY_LABEL: adhoc.CREATED_BY}
    assert job["metadata"]["name"].startswith("fix-")


def test_each_run_is_a_new_job(api: MemoryApi, forge: FakeGitHubAPI) -> None:
    for _ in range(2):
        assert adhoc_run.run(args(issue=7), api, NS, reader(forge)) == 0
    assert len({j["metadata"]["name"] for j in jobs(api)}) == 2


def test_a_pull_request_run_reads_its_fork_from_the_forge(api: MemoryApi, forge: FakeGitHubAPI,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert adhoc_run.run(args(pull_request=12, json=True), api, NS, reader(forge)) == 0
    assert adhoc_run.run(args(pull_request=13), api, NS, reader(forge)) == 0
    specs = sorted((j["spec"] for j in jobs(api)), key=lambda s: s["pullRequest"])
    assert [(s["pullRequest"], s["fork"], "issue" in s) for s in specs] == [(12, False, False), (13, True, False)]
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["namespace"] == NS and [j["name"] for j in first["jobs"]] == \
        [j["metadata"]["name"] for j in jobs(api) if j["spec"]["pullRequest"] == 12]


def test_replicas_are_planned_as_the_receiver_plans_them(api: MemoryApi, forge: FakeGitHubAPI) -> None:
    assert adhoc_run.run(args(trigger="twice", issue=7), api, NS, reader(forge)) == 0
    assert sorted((j["spec"]["replica"], j["spec"]["replicas"]) for j in jobs(api)) == [(1, 2), (2, 2)]
    assert all(j["metadata"]["name"].endswith(("-r1", "-r2")) for j in jobs(api))


@pytest.mark.parametrize(("given", "says"), [
    ({"trigger": "nope", "issue": 7}, "Trigger nope does not exist in namespace ns"),
    ({"trigger": "broken", "issue": 7}, "Trigger broken is not Ready (PlacementConflict)"),
    ({"trigger": "fresh", "issue": 7}, "Trigger fresh is not Ready yet"),
    ({"issue": 7, "repo": "other/repo"}, "Trigger fix does not serve other/repo"),
    ({"trigger": "many", "issue": 7}, "serves more than one repository: name one with --repo"),
    ({"issue": 8}, f"issue {REPO}#8 does not exist"),
    ({"pull_request": 99}, f"pull request {REPO}#99 does not exist"),
    ({"issue": 12}, f"{REPO}#12 is a pull request: run it with --pull-request 12"),  # GitHub's issue GET answers
])
def test_refusals_say_why_and_create_nothing(api: MemoryApi, forge: FakeGitHubAPI, capsys: pytest.CaptureFixture[str],
                                             given: dict[str, Any], says: str) -> None:
    assert adhoc_run.run(args(**given), api, NS, reader(forge)) == 1
    out = capsys.readouterr()
    assert says in out.err and out.out == "" and out.err.count("\n") == 1
    assert jobs(api) == []


def test_many_repositories_with_repo_named(api: MemoryApi, forge: FakeGitHubAPI) -> None:
    assert adhoc_run.run(args(trigger="many", issue=7, repo=REPO), api, NS, reader(forge)) == 0
    assert [j["spec"]["repository"] for j in jobs(api)] == [REPO]


def test_a_token_the_forge_refuses_creates_nothing(api: MemoryApi, forge: FakeGitHubAPI,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert adhoc_run.run(args(issue=7), api, NS, reader(forge, "ghp_wrong")) == 1
    assert "cannot read issue acme/widgets#7 from the forge" in capsys.readouterr().err
    assert "ghp_wrong" not in capsys.readouterr().err
    assert jobs(api) == []


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(("phases", "code"), [
    (["Succeeded"], 0), (["Failed"], 1), (["Refused"], 3), (["Succeeded", "Failed"], 1), ([None, None], 4)])
def test_wait_exits_with_how_the_jobs_ended(api: MemoryApi, forge: FakeGitHubAPI, capsys: pytest.CaptureFixture[str],
                                            phases: list[str | None], code: int) -> None:
    clock = Clock()
    trigger_name = "twice" if len(phases) == 2 else "fix"

    def sleep(seconds: float) -> None:  # the operator moves the Jobs on while the command waits
        for job, phase in zip(sorted(jobs(api), key=lambda j: j["metadata"]["name"]), phases, strict=True):
            api.patch(f"{JOBS}/{job['metadata']['name']}/status", {"status": {"phase": phase or "Running"}})
        clock.sleep(seconds)

    given = args(trigger=trigger_name, issue=7, wait=True, timeout=10.0, json=True)
    assert adhoc_run.run(given, api, NS, reader(forge), sleep=sleep, clock=clock) == code
    result = json.loads(capsys.readouterr().out)
    assert sorted((j["phase"] for j in result["jobs"]), key=str) == sorted(phases, key=str)


@pytest.fixture
def events_logger_restored() -> Iterator[None]:
    """``cli.main`` points the events logger at stderr (a handler, no propagation), as the CLI's process wants;
    in this process the tests after this one log through the same logger, so it is put back as it was."""
    from pidispatch.events import logger

    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


@pytest.mark.usefixtures("events_logger_restored")
def test_the_cli_needs_a_token_and_one_subject(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("GH_TOKEN", "GITHUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["run", "--trigger", "fix", "--issue", "7"]) == cli.CONFIG_ERROR
    assert "no forge token" in capsys.readouterr().err
    for argv in (["run", "--trigger", "fix"], ["run", "--trigger", "fix", "--issue", "0"],
                 ["run", "--trigger", "fix", "--issue", "7", "--pull-request", "7"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == cli.CONFIG_ERROR
