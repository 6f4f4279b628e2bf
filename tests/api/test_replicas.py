"""``run.replicas``: 2 or 3 independent attempts per delivery, each its own Job and, on an issue, its own branch
(issue 34, item 6; pi-dispatch's replicas: every replica suffixed, none the original).

The receiver in-process (the real aiohttp app, GitHub-format deliveries) plans n Jobs ``<name>-r<i>`` with
``spec.replica`` and ``spec.replicas``; the operator refuses a Job whose replica its Trigger does not give; the
checkout is resolved against the fake forge over real repositories (``pi/issue-<n>-r<i>``); the runner's prompt
names the attempt. The Trigger's load-time refusals: with resume (the store contract's own rule, unchanged) and
on a cron Trigger. The whole path on the local control plane is ``e2e/test_replicas.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.models import JobSpec, TriggerSpec, problem
from pidispatch.api.trigger import REPLICAS_ON_CRON, Refusal, first_refusal
from pidispatch.api.views import JobView, TriggerView
from pidispatch.api.vocabulary import TRIGGER_RULES
from pidispatch.forge.github import Forge
from pidispatch.jobflow import admit
from pidispatch.jobflow.checkout import resolve
from pidispatch.jobflow.key import job_key
from pidispatch.receiver import delivery as core
from pidispatch.runner.config import Event
from pidispatch.runner.prompt import first_prompt
from pidispatch.settings import GitHubSettings, Settings
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.gitforge import Repos
from testkit.receiver import MemoryCluster, Running, check_against_crd, trigger

REPO = "acme/widgets"
PAT = "github_pat_replicas"


def replicas_trigger(name: str = "race", n: int = 2, **run: Any) -> dict[str, Any]:
    return trigger(name, "issue_comment.created", phrase="@pi",
                   run={"model": "fake/fake-model", "replicas": n, **run})


# ---- the receiver: one delivery, n Jobs -------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3])
def test_one_delivery_on_a_replicas_trigger_creates_one_job_per_attempt(n: int) -> None:
    cluster = MemoryCluster([replicas_trigger(n=n), trigger("fix", "issue_comment.created", phrase="@pi")])
    running = Running(cluster)
    try:
        sent = running.hooks.send(running.hooks.issue_comment(7, "@pi race it"))
        assert sent.status == 202, sent.json
        base = core.job_name(core.body_digest(sent.delivery.body), "race")
        wanted = [core.job_name(core.body_digest(sent.delivery.body), "fix")] + [f"{base}-r{i}" for i in
                                                                                 range(1, n + 1)]
        assert sorted(sent.json["jobs"]) == sorted(wanted)
        for i in range(1, n + 1):
            job = cluster.jobs[f"{base}-r{i}"]
            check_against_crd(job)
            assert (job["spec"]["replica"], job["spec"]["replicas"], job["spec"]["issue"]) == (i, n, 7)
        assert "replica" not in cluster.jobs[wanted[0]]["spec"], "a Trigger without replicas makes one plain Job"
        again = running.hooks.send(sent.delivery.redelivered())
        assert again.json["jobs"] == [] and sorted(again.json["duplicates"]) == sorted(wanted), \
            "a redelivery meets each replica's own Job"
    finally:
        running.stop()


def test_a_replica_name_stays_a_dns_label_and_apart_from_its_siblings() -> None:
    digest = core.body_digest(b"{}")
    long = core.job_name(digest, "t" * 60)
    names = [core.replica_job_name(long, i) for i in (1, 2, 3)]
    assert len(set(names)) == 3 and all(core.name_problem(n) is None for n in names)


# ---- the operator: a replica its Trigger gives, or nothing --------------------------------------------------

def job_view(**spec: Any) -> JobView:
    return JobView.of({"metadata": {"name": "j", "uid": "u"},
                       "spec": {"trigger": "race", "forge": "github", "repository": REPO, "issue": 7, **spec}})


def trigger_view(**run: Any) -> TriggerView:
    return TriggerView.of({"metadata": {"name": "race"}, "spec": {"on": {"event": "issue_comment.created",
                                                                          "phrase": "@pi"}, "run": run}})


@pytest.mark.parametrize(("run", "spec", "refused"), [
    ({"replicas": 2}, {"replica": 2, "replicas": 2}, False),
    ({"replicas": 3}, {"replica": 1, "replicas": 3}, False),
    ({"replicas": 2}, {}, False),
    ({}, {"replica": 1, "replicas": 2}, True),
    ({"replicas": 2}, {"replica": 3, "replicas": 3}, True),
    ({"replicas": 3}, {"replica": 3, "replicas": 2}, True),
    ({"replicas": 2}, {"replica": 1}, True),
], ids=["a replica it gives", "the first of three", "one attempt made by hand", "no replicas on the Trigger",
        "more replicas than the Trigger's", "a replica past its own count", "a replica without its count"])
def test_a_job_may_be_only_a_replica_its_trigger_gives(run: dict[str, Any], spec: dict[str, Any],
                                                       refused: bool) -> None:
    verdict = admit.refusal(job_view(**spec), trigger_view(**run), Settings())
    if not refused:
        assert verdict is None, verdict
        return
    assert verdict is not None and verdict.condition_reason == "BeyondTrigger", verdict
    assert "pi/issue-<n>-r<i>" in verdict.message and "Re-create the Job" in verdict.message


def test_a_replica_never_has_a_session_key() -> None:
    spec = JobSpec.model_validate({"trigger": "t", "forge": "github", "repository": REPO, "issue": 7, "replica": 1,
                                   "replicas": 2})
    assert job_key(spec, True) is None
    assert job_key(spec.model_copy(update={"replica": None, "replicas": None}), True) is not None


# ---- the checkout: each issue replica on its own branch ---------------------------------------------------

@pytest.fixture
def forge(tmp_path: Path) -> Iterator[tuple[FakeGitHubAPI, Forge]]:
    repos = Repos(tmp_path / "forge")
    repos.create(REPO, default_branch="trunk")
    token = tmp_path / "token"
    token.write_text(PAT)
    with FakeGitHubAPI(pats={PAT}, repos=repos) as api:
        api.set_issue(REPO, 7, "Flaky", "It fails.")
        yield api, Forge(GitHubSettings(api_url=api.url, token_file=str(token), timeout_seconds=2), "pat")


def test_each_issue_replica_works_on_its_own_branch(forge: tuple[FakeGitHubAPI, Forge]) -> None:
    api, client = forge
    base = {"trigger": "race", "forge": "github", "repository": REPO, "issue": 7, "replicas": 2}
    first = resolve(client, JobSpec.model_validate({**base, "replica": 1}))
    assert (first.ref, first.branch) == ("refs/heads/trunk", "pi/issue-7-r1")
    tip = api.repos.commit(REPO, "pi/issue-7-r2", {"a": "1"}, "replica 2's earlier push")
    second = resolve(client, JobSpec.model_validate({**base, "replica": 2}))
    assert (second.ref, second.sha, second.branch) == ("refs/heads/pi/issue-7-r2", tip, "pi/issue-7-r2")
    plain = resolve(client, JobSpec.model_validate({k: v for k, v in base.items() if k != "replicas"}))
    assert plain.branch == "pi/issue-7"


# ---- the prompt: which attempt, on which branch -----------------------------------------------------------

def test_the_prompt_names_the_attempt_and_its_branch() -> None:
    issue = first_prompt(Event(repository=REPO, issue=7, comment="@pi race", replica=(2, 3)))
    assert "Do the work on the branch pi/issue-7-r2" in issue and "[r2/3]" in issue
    assert "attempt 2 of 3" in issue
    pull = first_prompt(Event(repository=REPO, pull_request=9, comment="@pi race", replica=(1, 2)))
    assert "attempt 1 of 2" in pull and "never force-push" in pull
    plain = first_prompt(Event(repository=REPO, issue=7, comment="@pi"))
    assert "pi/issue-7 " in plain and "attempt" not in plain


# ---- the Trigger -------------------------------------------------------------------------------------------

def test_replicas_act_and_keep_the_specs_resume_refusal() -> None:
    on = {"event": "issue_comment.created", "phrase": "@pi"}
    assert first_refusal({"on": on, "run": {"replicas": 2}}) is None
    assert first_refusal({"on": {**on, "repositories": ["acme/*"]}, "run": {"replicas": 3, "resume": True}}) == \
        Refusal("ResumeConflict", TRIGGER_RULES[2]["message"])
    assert problem(TriggerSpec, {"on": on, "run": {"replicas": 4}}) is not None


def test_replicas_on_a_cron_trigger_are_refused_at_load() -> None:
    spec = {"on": {"event": "cron", "schedule": "0 6 * * *", "repository": REPO}, "run": {"replicas": 2}}
    assert first_refusal(spec) == Refusal("ReplicasOnSchedule", REPLICAS_ON_CRON)
