"""Which commit a job's workspace holds: ``Forge.checkout`` against the fake API over real repositories.

The commit always comes from the API (never the payload): an issue job at ``pi/issue-<n>``'s tip when it
exists, else the default branch's; a same-repository pull request at its head on its branch; a fork's
read-only at ``refs/pull/<n>/head``. What the forge says is not there is final (``Unresolvable``); an
outage is a ``GitHubError`` the dispatcher retries. ``Forge.moved`` counts how a branch moved.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pidispatch.forge.checkout import Unresolvable
from pidispatch.forge.github import Forge, GitHubError
from pidispatch.settings import GitHubSettings
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.gitforge import Repos

REPO = "acme/widgets"
PAT = "github_pat_forge_checkout"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeGitHubAPI]:
    repos = Repos(tmp_path / "forge")
    repos.create(REPO, default_branch="trunk")
    with FakeGitHubAPI(pats={PAT}, repos=repos) as fake:
        yield fake


@pytest.fixture
def forge(api: FakeGitHubAPI, tmp_path: Path) -> Forge:
    token = tmp_path / "token"
    token.write_text(PAT)
    return Forge(GitHubSettings(api_url=api.url, token_file=str(token), timeout_seconds=2), "pat")


def test_an_issue_without_its_branch_starts_at_the_default_branchs_tip(api: FakeGitHubAPI, forge: Forge) -> None:
    api.set_issue(REPO, 7, "Flaky", "It fails.")
    c = forge.checkout(REPO, 7, None)
    assert (c.ref, c.sha, c.branch) == ("refs/heads/trunk", api.repos.tip(REPO, "trunk"), "pi/issue-7")
    assert (c.subject.title, c.subject.body) == ("Flaky", "It fails.")


def test_an_issue_whose_branch_exists_continues_from_its_tip(api: FakeGitHubAPI, forge: Forge) -> None:
    api.set_issue(REPO, 8, "t")
    tip = api.repos.commit(REPO, "pi/issue-8", {"a": "1"}, "earlier work")
    c = forge.checkout(REPO, 8, None)
    assert (c.ref, c.sha, c.branch) == ("refs/heads/pi/issue-8", tip, "pi/issue-8")


def test_a_cron_job_works_on_its_triggers_branch_from_the_default_tip_then_its_own(api: FakeGitHubAPI,
                                                                                   forge: Forge) -> None:
    c = forge.checkout(REPO, None, None, "pi/cron-ns-nightly")  # no issue to read: no subject
    assert (c.ref, c.sha, c.branch, c.subject) == ("refs/heads/trunk", api.repos.tip(REPO, "trunk"),
                                                   "pi/cron-ns-nightly", None)
    tip = api.repos.commit(REPO, "pi/cron-ns-nightly", {"a": "1"}, "last night's work")
    c = forge.checkout(REPO, None, None, "pi/cron-ns-nightly")
    assert (c.ref, c.sha, c.branch) == ("refs/heads/pi/cron-ns-nightly", tip, "pi/cron-ns-nightly")


def test_a_same_repository_pull_request_is_checked_out_at_its_head(api: FakeGitHubAPI, forge: Forge) -> None:
    tip = api.repos.commit(REPO, "feature/x", {"a": "1"}, "feature")
    api.set_pull(REPO, 5, head_ref="feature/x", title="Feature", body="b" * 20000)
    c = forge.checkout(REPO, None, 5)
    assert (c.ref, c.sha, c.branch) == ("refs/heads/feature/x", tip, "feature/x")
    assert c.head is not None and c.head.repository == REPO
    assert c.subject.title == "Feature" and len(c.subject.body) < 8300, "the body is capped"


def test_a_forks_pull_request_is_read_only_at_its_pull_ref(api: FakeGitHubAPI, forge: Forge) -> None:
    fork_head = api.repos.commit(REPO, "scratch", {"f": "1"}, "fork work")
    api.repos.set_ref(REPO, "refs/pull/6/head", fork_head)
    api.set_pull(REPO, 6, head_ref="main", head_repo="mallory/widgets")
    c = forge.checkout(REPO, None, 6)
    assert (c.ref, c.sha, c.branch) == ("refs/pull/6/head", fork_head, None)


def test_what_the_forge_says_is_not_there_is_final(api: FakeGitHubAPI, forge: Forge) -> None:
    with pytest.raises(Unresolvable):
        forge.checkout(REPO, 404, None)  # no such issue
    with pytest.raises(Unresolvable):
        forge.checkout(REPO, None, 404)  # no such pull request


def test_an_outage_is_retried_not_final(api: FakeGitHubAPI, forge: Forge) -> None:
    api.set_pull(REPO, 9, status=500)
    with pytest.raises(GitHubError) as caught:
        forge.checkout(REPO, None, 9)
    assert not isinstance(caught.value, Unresolvable) and caught.value.status == 500


def test_moved_counts_the_commits_between_two_heads(api: FakeGitHubAPI, forge: Forge) -> None:
    old = api.repos.commit(REPO, "pi/issue-3", {"a": "1"}, "ours")
    new = api.repos.commit(REPO, "pi/issue-3", {"b": "2"}, "theirs")
    m = forge.moved(REPO, old, new)
    assert (m.status, m.ahead_by, m.behind_by) == ("ahead", 1, 0)
    rebased = api.repos.commit(REPO, "pi/issue-3", {"c": "3"}, "rebased", force_from=api.repos.tip(REPO, "trunk"))
    m = forge.moved(REPO, new, rebased)
    assert (m.status, m.ahead_by, m.behind_by) == ("diverged", 1, 2)
    assert forge.moved(REPO, "f" * 40, new).status == "unknown", "a commit the forge does not know"


def test_a_flow_job_s_flow_comes_from_the_default_branch_s_tip_whatever_it_checks_out(api: FakeGitHubAPI,
                                                                                      forge: Forge) -> None:
    """A pull request's head and ``pi/issue-<n>`` are checked out, and the flow is read from ``trunk``'s tip
    (docs/triggers.md#a-flow-the-repositorys-own-skill); a job without a flow is told nothing of it."""
    trunk = api.repos.commit(REPO, "trunk", {".pi/skills/triage/SKILL.md": "base"}, "the flow")
    head = api.repos.commit(REPO, "feature/x", {".pi/skills/triage/SKILL.md": "head"}, "the author's")
    api.set_pull(REPO, 5, head_ref="feature/x")
    api.set_issue(REPO, 8, "t")
    issue_tip = api.repos.commit(REPO, "pi/issue-8", {".pi/skills/triage/SKILL.md": "pushed"}, "a job's push")
    api.set_issue(REPO, 7, "t")
    for c, sha in ((forge.checkout(REPO, None, 5, flow=True), head), (forge.checkout(REPO, 8, None, flow=True),
                                                                       issue_tip),
                   (forge.checkout(REPO, 7, None, flow=True), trunk),
                   (forge.checkout(REPO, None, None, "pi/cron-ns-nightly", flow=True), trunk)):
        assert c.sha == sha
        assert c.flow is not None and (c.flow.ref, c.flow.sha) == ("refs/heads/trunk", trunk)
        assert c.env("https://forge/acme/widgets.git")["flow"] == {"ref": "refs/heads/trunk", "sha": trunk}
    plain = forge.checkout(REPO, None, 5)
    assert plain.flow is None and "flow" not in plain.env("https://forge/acme/widgets.git")
