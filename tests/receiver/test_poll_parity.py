"""The same events through both intakes make the same Jobs: once as signed webhook deliveries to the real receiver
on a loopback socket, once written on the fake forge and read by the poller over HTTP. Each path has its own
in-memory cluster with the same Triggers; the Jobs they hold are compared field by field. What may differ is only
what names how the event arrived: the ``deliveryId`` (GitHub's ``X-GitHub-Delivery``, or ``poll-<kind>-<id>``) and
the digest in the Job's name (the body's SHA-256, or the forge event's identity): both ``<trigger>-<32 hex>``.

The events: comments on an issue and on a pull request by a trusted author, a stranger's and a bot's comment, a
label added to an issue, review comments on a pull request of the repository and on a fork's, an issue and a pull
request closed (their conversations' SessionKeys annotated for retirement on both sides)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from pidispatch.receiver.poll.cursor import MemoryCursors
from pidispatch.receiver.poll.forge import ForgeReader
from pidispatch.receiver.poll.poller import Poller
from pidispatch.store.keys import branch_key, issue_key
from testkit.fakegithub import Delivery
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.receiver import MemoryCluster, Running, trigger

REPO = "acme/widgets"
PAT = "ghp_parity"
RESUME = {"model": "fake/fake-model", "resume": True}


def triggers() -> list[dict[str, Any]]:
    return [trigger("fix", "issue_comment.created", phrase="@pi", repository=REPO, run=RESUME),
            trigger("fix-twice", "issue_comment.created", phrase="@pi", repository=REPO,
                    run={"model": "fake/fake-model", "replicas": 2}),
            trigger("triage", "issues.labeled", label="pi", repository=REPO),
            trigger("review", "pull_request_review_comment.created", phrase="@pi", repository=REPO),
            trigger("strangers-too", "issue_comment.created", phrase="@pi please", repository=REPO,
                    authorAssociations=["OWNER", "NONE"])]


@pytest.fixture
def forge() -> Iterator[FakeGitHubAPI]:
    with FakeGitHubAPI(pats={PAT}) as fake:
        yield fake


def by_webhook(cluster: MemoryCluster) -> None:
    running = Running(cluster)
    try:
        hooks = running.hooks
        stranger = hooks.issue_comment(3, "@pi please look", sender="stranger")
        stranger.payload["comment"]["author_association"] = "NONE"
        deliveries: list[Delivery] = [
            hooks.issue_comment(3, "@pi fix this", sender="octocat"),
            hooks.issue_comment(9, "@pi on the pull request", on_pull_request=True, sender="octocat"),
            stranger,
            hooks.issue_comment(3, "@pi from a bot", sender="helper[bot]", bot=True),
            hooks.issues_labeled(4, "pi", sender="octocat"),
            hooks.pull_request_review_comment(hooks.pull_request(10), "@pi this line", sender="octocat"),
            hooks.pull_request_review_comment(hooks.pull_request(11, fork="someone/widgets"), "@pi that line",
                                              sender="octocat"),
            hooks.issues_event(5, "closed", sender="octocat"),
            hooks.pull_request_event(hooks.pull_request(9), "closed", sender="octocat"),
        ]
        for delivery in deliveries:
            sent = hooks.send(delivery)
            assert sent.status == 202, sent.json
    finally:
        running.stop()


def by_polling(cluster: MemoryCluster, forge: FakeGitHubAPI) -> None:
    for number, head in ((9, REPO), (10, REPO), (11, "someone/widgets")):
        forge.set_pull(REPO, number, head_repo=head)
    poller = Poller(ForgeReader(forge.url, lambda repository: f"token {PAT}"), cluster, MemoryCursors(), interval=30)
    asyncio.run(poller.pass_once())  # the first pass: where the cursor starts
    forge.add_issue_comment(REPO, 3, "@pi fix this", login="octocat")
    forge.add_issue_comment(REPO, 9, "@pi on the pull request", login="octocat")
    forge.add_issue_comment(REPO, 3, "@pi please look", login="stranger", association="NONE")
    forge.add_issue_comment(REPO, 3, "@pi from a bot", login="helper[bot]", bot=True)
    forge.label_issue(REPO, 4, "pi", actor="octocat")
    forge.add_review_comment(REPO, 10, "@pi this line", login="octocat")
    forge.add_review_comment(REPO, 11, "@pi that line", login="octocat")
    forge.close_issue(REPO, 5, actor="octocat")
    forge.close_issue(REPO, 9, actor="octocat")  # a pull request: its close read with the pull request
    result = asyncio.run(poller.pass_once())
    assert not result.wait.limited, result.wait


def jobs(cluster: MemoryCluster) -> list[str]:
    """Each Job as canonical JSON, without what names how its event arrived."""
    out = []
    for name, job in cluster.jobs.items():
        spec = {k: v for k, v in job["spec"].items() if k != "deliveryId"}
        shape = re.sub(r"-[0-9a-f]{32}(-r\d)?$", lambda m: "-<digest>" + (m.group(1) or ""), name)
        out.append(json.dumps({"name": shape, "labels": job["metadata"]["labels"], "spec": spec}, sort_keys=True))
    return sorted(out)


def test_the_same_events_make_the_same_jobs_by_webhook_and_by_polling(forge: FakeGitHubAPI) -> None:
    key, branch = issue_key("github", REPO, 5), branch_key("github", REPO, "feature")
    hooked, polled = MemoryCluster(triggers()), MemoryCluster(triggers())
    for cluster in (hooked, polled):
        cluster.sessionkeys.update({key: {}, branch: {}})
    by_webhook(hooked)
    by_polling(polled, forge)
    assert jobs(polled) == jobs(hooked)
    # fix and fix-twice (2 replicas) on two comments, strangers-too on one, triage, review on two
    assert len(hooked.jobs) == 10, sorted(hooked.jobs)
    assert polled.sessionkeys == hooked.sessionkeys == {
        key: {"pi-dispatch.dev/retire": "issue-closed"},
        branch: {"pi-dispatch.dev/retire": "pull-request-closed", "pi-dispatch.dev/retire-pull-request": "9"}}
