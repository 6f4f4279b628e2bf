"""The gateway's forge path with real ``gh`` (docs/gateway.md#graphql): ``GH_HOST`` the gateway,
``GH_ENTERPRISE_TOKEN`` the capability, ``--repo HOST:PORT/OWNER/NAME`` (gh matches a git remote by host
without its port). What gh 2.23 sends for ``pr view``, ``pr diff``, ``pr comment``, ``issue comment``,
``pr create`` and ``api user`` goes through for the job's repository; a fork's job comments only on its subject."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.fakegithub_api import fingerprint
from testkit.gateway_forge import OTHER, REPO, TOKEN, ForgeWorld, forge_world, run

DEBUG = {"GH_DEBUG": "api"}  # gh prints every request and answer it makes, headers and bodies


@pytest.fixture
def world(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[ForgeWorld]:
    caplog.set_level(logging.DEBUG)
    w = forge_world(tmp_path)
    try:
        yield w
    finally:
        w.stop()


def gh(world: ForgeWorld, capability: str, *args: str, repo: str = REPO) -> tuple[int, str]:
    done = run(world.env(capability), "gh", *args, "--repo", f"{world.gateway.host}/{repo}", extra=DEBUG)
    return done.returncode, done.stdout + done.stderr


def neither_secret_crossed(world: ForgeWorld, capability: str, outputs: list[str], logs: str) -> None:
    for headers in world.api.headers_seen:
        assert capability not in json.dumps(headers)
    assert capability not in json.dumps(world.api.graphql)
    assert capability not in json.dumps([r.body for r in world.api.requests])
    assert all(r.token_sha256 in (None, fingerprint(TOKEN)) for r in world.api.requests)
    for output in outputs:
        assert TOKEN not in output
    assert TOKEN not in logs and capability not in logs


def test_a_same_repository_job_views_comments_and_opens_a_pull_request(world: ForgeWorld,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    capability = world.capability()
    world.repos.commit(REPO, "pi/issue-7", {"fix.txt": "fixed\n"}, "Fix the cache test")
    outputs = []
    status, out = gh(world, capability, "pr", "view", "8")
    outputs.append(out)
    assert status == 0, out
    assert "Add a feature" in out
    status, out = gh(world, capability, "pr", "diff", "8")
    outputs.append(out)
    assert status == 0, out
    status, out = gh(world, capability, "pr", "comment", "8", "--body", "Reviewed.")
    outputs.append(out)
    assert status == 0, out
    status, out = gh(world, capability, "issue", "comment", "7", "--body", "Looking into it.")
    outputs.append(out)
    assert status == 0, out
    assert [c["body"] for c in world.api.comments(REPO, 8)] == ["Reviewed."]
    assert [c["body"] for c in world.api.comments(REPO, 7)] == ["Looking into it."]
    status, out = gh(world, capability, "pr", "create", "--head", "pi/issue-7", "--base", "main", "--title",
                     "Fix the cache test", "--body", "Fixes #7.")
    outputs.append(out)
    assert status == 0, out
    assert [p.head_ref for p in world.api.created_pulls(REPO) if p.head_ref == "pi/issue-7"] == ["pi/issue-7"]
    done = run(world.env(capability), "gh", "api", "user", extra=DEBUG)
    outputs.append(done.stdout + done.stderr)
    assert done.returncode == 0 and json.loads(done.stdout)["login"] == "token-owner"
    neither_secret_crossed(world, capability, outputs, caplog.text)


def test_a_fork_job_comments_on_its_subject_and_nowhere_else(world: ForgeWorld,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    capability = world.capability(fork=True, subject=8)
    status, viewed = gh(world, capability, "pr", "view", "8")
    assert status == 0, viewed
    status, commented = gh(world, capability, "pr", "comment", "8", "--body", "A review of the fork's change.")
    assert status == 0, commented
    assert [c["body"] for c in world.api.comments(REPO, 8)] == ["A review of the fork's change."]
    status, elsewhere = gh(world, capability, "issue", "comment", "7", "--body", "Not mine to comment on.")
    assert status != 0 and "fork-read-only" in elsewhere
    assert world.api.comments(REPO, 7) == []
    world.repos.commit(REPO, "pi/pr-8", {"x.txt": "x\n"}, "X")
    status, created = gh(world, capability, "pr", "create", "--head", "pi/pr-8", "--base", "main", "--title", "X",
                         "--body", "X")
    assert status != 0 and "fork-read-only" in created
    assert not [p for p in world.api.created_pulls(REPO) if p.head_ref == "pi/pr-8"]
    assert not [g for g in world.api.graphql if "createPullRequest" in str(g.get("query"))]
    refusals = world.gateway.ledger.figures["uid-forge-1"].refusals
    assert refusals["fork-read-only"] == 2
    neither_secret_crossed(world, capability, [viewed, commented, elsewhere, created], caplog.text)


def test_a_fork_jobs_rest_comment_goes_to_its_subject_only(world: ForgeWorld) -> None:
    capability = world.capability(fork=True, subject=8)
    env = world.env(capability)
    done = run(env, "gh", "api", f"repos/{REPO}/issues/8/comments", "-f", "body=Through REST.")
    assert done.returncode == 0, done.stderr
    done = run(env, "gh", "api", f"repos/{REPO}/issues/7/comments", "-f", "body=Not here.")
    assert done.returncode != 0 and "fork-read-only" in done.stdout + done.stderr
    assert [c["body"] for c in world.api.comments(REPO, 8)] == ["Through REST."]
    assert world.api.comments(REPO, 7) == []


def test_another_repository_is_refused_on_every_path(world: ForgeWorld) -> None:
    capability = world.capability()
    status, out = gh(world, capability, "issue", "comment", "1", "--body", "Hello.", repo=OTHER)
    assert status != 0 and "other-repository" in out
    status, out = gh(world, capability, "pr", "view", "1", repo=OTHER)
    assert status != 0 and "other-repository" in out
    done = run(world.env(capability), "gh", "api", f"repos/{OTHER}/issues/1")
    assert done.returncode != 0 and "other-repository" in done.stdout + done.stderr
    assert not [r for r in world.api.requests if OTHER in r.path]
    assert not [g for g in world.api.graphql if "other" in json.dumps(g)]
    assert world.api.comments(OTHER, 1) == []
