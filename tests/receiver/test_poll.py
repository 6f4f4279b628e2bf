"""The poller (``receiver/poll/``) against the fake forge's real HTTP server: where it starts, what it takes in once
and only once (across passes, restarts and a crash before the cursor's write), its conditional requests (304s spend
nothing), and how it waits on the forge's rate-limit headers. Jobs go to the in-memory cluster seam, checked against
the CRD as the API server would (``testkit/receiver.py``)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator

import pytest

from pidispatch.api.views import TriggerView
from pidispatch.receiver.poll import ratelimit
from pidispatch.receiver.poll.cursor import COMMENTS, ISSUE_EVENTS, MemoryCursors
from pidispatch.receiver.poll.forge import ForgeReader
from pidispatch.receiver.poll.poller import EVERY, PassResult, Poller, pollable
from testkit.fakegithub_api import FakeGitHubAPI
from testkit.receiver import MemoryCluster, trigger

REPO = "acme/widgets"
PAT = "ghp_polling_test_token"


@pytest.fixture
def forge() -> Iterator[FakeGitHubAPI]:
    with FakeGitHubAPI(pats={PAT}) as fake:
        yield fake


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster([trigger("fix", "issue_comment.created", phrase="@pi", repository=REPO),
                          trigger("triage", "issues.labeled", label="pi", repository=REPO),
                          trigger("review", "pull_request_review_comment.created", phrase="@pi", repository=REPO)])


def poller(forge: FakeGitHubAPI, cluster: MemoryCluster, store: MemoryCursors, interval: float = 30.0) -> Poller:
    reader = ForgeReader(forge.url, lambda repository: f"token {PAT}")
    return Poller(reader, cluster, store, interval=interval)


def run(p: Poller) -> PassResult:
    return asyncio.run(p.pass_once())


def test_the_first_pass_starts_at_now_and_each_event_makes_its_jobs_once(forge: FakeGitHubAPI,
                                                                            cluster: MemoryCluster) -> None:
    early = forge.add_issue_comment(REPO, 1, "@pi from before the poller")  # before its first pass: not taken in
    early["created_at"] = early["updated_at"] = "2020-01-01T00:00:00Z"
    forge.label_issue(REPO, 2, "pi")
    store = MemoryCursors()
    p = poller(forge, cluster, store)
    first = run(p)
    assert first.created == [] and cluster.jobs == {}
    forge.add_issue_comment(REPO, 3, "@pi fix this")
    forge.label_issue(REPO, 4, "pi")
    second = run(p)
    assert sorted(j["spec"]["trigger"] for j in cluster.jobs.values()) == ["fix", "triage"]
    assert {(j["spec"].get("issue"), j["spec"]["deliveryId"].split("-")[1]) for j in cluster.jobs.values()} == {
        (3, "comment"), (4, "event")}
    assert sorted(second.created) == sorted(cluster.jobs)
    writes = store.writes
    third = run(p)
    assert third.created == [] and third.outcomes == {}
    assert third.not_modified == third.requests == 3, "nothing new: every listing answered 304"
    assert store.writes == writes, "nothing moved: the cursor is not written again"


def test_a_restart_and_a_second_poller_take_nothing_in_twice(forge: FakeGitHubAPI, cluster: MemoryCluster) -> None:
    store = MemoryCursors()
    run(poller(forge, cluster, store))
    forge.add_issue_comment(REPO, 5, "@pi once")
    run(poller(forge, cluster, store))
    made = dict(cluster.jobs)
    assert len(made) == 1
    again = run(poller(forge, cluster, store))  # a restart: a new poller on the stored cursor
    assert again.created == [] and cluster.jobs == made


def test_a_crash_before_the_cursor_is_written_makes_duplicates_not_jobs(forge: FakeGitHubAPI,
                                                                        cluster: MemoryCluster) -> None:
    store = MemoryCursors()
    run(poller(forge, cluster, store))
    before = copy.deepcopy(store.stored)
    forge.add_issue_comment(REPO, 6, "@pi twice?")
    forge.label_issue(REPO, 7, "pi")
    run(poller(forge, cluster, store))
    made = dict(cluster.jobs)
    assert len(made) == 2
    store.stored = before  # the writes after the Jobs' creation never happened
    replayed = run(poller(forge, cluster, store))
    assert replayed.created == [] and replayed.outcomes == {"duplicate": 2}, replayed.outcomes
    assert cluster.jobs == made


def test_an_edited_old_comment_starts_nothing(forge: FakeGitHubAPI, cluster: MemoryCluster) -> None:
    old = forge.add_issue_comment(REPO, 8, "an old comment")
    old["created_at"] = old["updated_at"] = "2020-01-01T00:00:00Z"
    store = MemoryCursors()
    run(poller(forge, cluster, store))
    forge.edit_issue_comment(old, "@pi now it mentions pi")
    result = run(poller(forge, cluster, store))
    assert result.created == [] and cluster.jobs == {}


def test_the_webhook_rules_hold_bots_strangers_and_pull_request_labels_start_nothing(
        forge: FakeGitHubAPI, cluster: MemoryCluster) -> None:
    forge.set_pull(REPO, 9)
    store = MemoryCursors()
    run(poller(forge, cluster, store))
    forge.add_issue_comment(REPO, 1, "@pi from a bot", login="helper[bot]", bot=True)
    forge.add_issue_comment(REPO, 1, "@pi from a stranger", login="stranger", association="NONE")
    forge.label_issue(REPO, 9, "pi")  # a pull request's label: GitHub's pull_request.labeled
    result = run(poller(forge, cluster, store))
    assert cluster.jobs == {} and result.outcomes == {"ignored": 2}, result.outcomes


def test_a_review_comment_carries_the_pull_request_as_the_forge_reads_it(forge: FakeGitHubAPI,
                                                                        cluster: MemoryCluster) -> None:
    forge.set_pull(REPO, 10)
    forge.set_pull(REPO, 11, head_repo="someone/widgets")
    store = MemoryCursors()
    run(poller(forge, cluster, store))
    forge.add_review_comment(REPO, 10, "@pi tidy this line")
    forge.add_review_comment(REPO, 11, "@pi and this one")
    run(poller(forge, cluster, store))
    specs = sorted((j["spec"]["pullRequest"], j["spec"]["fork"]) for j in cluster.jobs.values())
    assert specs == [(10, False), (11, True)]


def test_a_304_spends_nothing_of_the_rate_limit(forge: FakeGitHubAPI, cluster: MemoryCluster) -> None:
    store = MemoryCursors()
    p = poller(forge, cluster, store)
    run(p)
    run(p)  # the listings' ETags are known now
    spent = forge.rate_remaining
    registry = p.metrics.registry
    counted = registry.get_sample_value("pidispatch_receiver_poll_requests_total", {"result": "not_modified"})
    quiet = run(p)
    assert quiet.not_modified == quiet.requests == 3
    assert forge.rate_remaining == spent
    assert registry.get_sample_value("pidispatch_receiver_poll_requests_total", {"result": "not_modified"}) == \
        (counted or 0) + 3
    assert [c.status for c in forge.polled[-3:]] == [304, 304, 304]
    assert all(c.conditional for c in forge.polled[-3:])


def test_retry_after_stops_the_pass_and_is_obeyed(forge: FakeGitHubAPI, cluster: MemoryCluster) -> None:
    store = MemoryCursors()
    p = poller(forge, cluster, store)
    run(p)
    forge.add_issue_comment(REPO, 12, "@pi after the wait")
    forge.refusals.append((429, {"retry-after": "42"}))
    limited = run(p)
    assert limited.wait.limited and limited.wait.seconds == 42 and cluster.jobs == {}
    assert p.metrics.registry.get_sample_value("pidispatch_receiver_poll_wait_seconds") == 42
    after = run(p)
    assert len(after.created) == 1, "the comment was kept for the next pass"
    counted = {k: p.metrics.registry.get_sample_value(f"pidispatch_receiver_{k}") for k in (
        "poll_requests_total", "poll_events_total", "jobs_created_total")}
    assert p.metrics.registry.get_sample_value("pidispatch_receiver_poll_requests_total", {"result": "limited"}) == 1
    assert p.metrics.registry.get_sample_value("pidispatch_receiver_poll_events_total", {"result": "created"}) == 1
    assert p.metrics.registry.get_sample_value("pidispatch_receiver_jobs_created_total") == 1, counted


def test_a_secondary_limit_without_retry_after_backs_off_longer_each_time(forge: FakeGitHubAPI,
                                                                          cluster: MemoryCluster) -> None:
    p = poller(forge, cluster, MemoryCursors())
    forge.refusals.extend([(403, {}), (403, {})])
    waits = [run(p).wait.seconds, run(p).wait.seconds]
    assert waits == [ratelimit.SECONDARY_MIN, ratelimit.SECONDARY_MIN * 2]
    assert run(p).wait.seconds == 30.0, "answered again: back to the interval"


def test_a_spent_budget_waits_for_its_reset(forge: FakeGitHubAPI, cluster: MemoryCluster) -> None:
    p = poller(forge, cluster, MemoryCursors())
    forge.rate_remaining = 0
    forge.rate_reset = __import__("time").time() + 600
    wait = run(p).wait
    assert wait.limited and 590 <= wait.seconds <= 602, wait


def test_x_poll_interval_stretches_the_interval(forge: FakeGitHubAPI, cluster: MemoryCluster) -> None:
    forge.poll_interval = 90
    assert run(poller(forge, cluster, MemoryCursors(), interval=20)).wait.seconds == 90


def test_the_cursor_is_kept_per_repository_and_listing(forge: FakeGitHubAPI, cluster: MemoryCluster) -> None:
    store = MemoryCursors()
    forge.label_issue(REPO, 2, "other")
    run(poller(forge, cluster, store))
    assert store.stored is not None
    events = store.stored.stream(REPO, ISSUE_EVENTS)
    comments = store.stored.stream(REPO, COMMENTS)
    assert events is not None and events.after is not None and events.after > 0
    assert comments is not None and comments.since is not None and comments.etag


def test_pollable_names_exact_repositories_and_leaves_patterns() -> None:
    triggers = [trigger("a", "issue_comment.created", phrase="@pi", repository="acme/widgets"),
                trigger("b", "issues.labeled", label="x", repositories=["Acme/Widgets", "acme/g*", "acme/tools"]),
                trigger("c", "cron", schedule="0 * * * *", repository="acme/cron-only"),
                trigger("d", "issue_comment.created", phrase="@pi")]
    assert pollable([TriggerView.of(t) for t in triggers]) == (["acme/tools", "acme/widgets"], [EVERY, "acme/g*"])


@pytest.mark.parametrize(("status", "headers", "seconds", "limited"), [
    (200, {}, 30.0, False),
    (200, {"X-Poll-Interval": "60"}, 60.0, False),
    (429, {"Retry-After": "5"}, 5.0, True),
    (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1600"}, 601.0, True),
    (403, {}, ratelimit.SECONDARY_MIN, True),
    (502, {}, ratelimit.FAULT_MIN, False),
    (0, {}, ratelimit.FAULT_MIN, False),
    # 600 requests left for an hour at 3 per pass, 500 kept in reserve: one pass every 108 s
    (200, {"x-ratelimit-remaining": "600", "x-ratelimit-reset": "4600"}, 108.0, False),
])
def test_the_wait_after_an_answer(status: int, headers: dict[str, str], seconds: float, limited: bool) -> None:
    wait = ratelimit.after(status, headers, now=1000.0, interval=30.0, requests_per_pass=3)
    assert (wait.seconds, wait.limited) == (seconds, limited), wait


class FlakyCluster(MemoryCluster):
    """The API server refuses the next ``failures`` creates for now (a 503's ClusterUnavailable)."""

    def __init__(self, triggers: list[dict[str, object]], failures: int) -> None:
        super().__init__(triggers)  # type: ignore[arg-type]
        self.failures = failures

    async def create_job(self, body: dict[str, object]) -> bool:  # type: ignore[override]
        if self.failures:
            self.failures -= 1
            from pidispatch.receiver.cluster import ClusterUnavailable
            raise ClusterUnavailable("cannot create Job: 503 the API server is busy")
        return await super().create_job(body)  # type: ignore[arg-type]


def test_an_event_the_api_server_could_not_take_is_read_again(forge: FakeGitHubAPI) -> None:
    cluster = FlakyCluster([trigger("fix", "issue_comment.created", phrase="@pi", repository=REPO),
                            trigger("triage", "issues.labeled", label="pi", repository=REPO)], failures=0)
    store = MemoryCursors()
    p = poller(forge, cluster, store)
    run(p)
    forge.add_issue_comment(REPO, 13, "@pi first")
    forge.add_issue_comment(REPO, 14, "@pi second")
    forge.label_issue(REPO, 15, "pi")
    cluster.failures = 2  # the first comment's create and the label's
    failed = run(p)
    assert failed.outcomes == {"unavailable": 2}, failed.outcomes
    assert cluster.jobs == {}
    again = run(p)
    assert sorted(j["spec"].get("issue") for j in cluster.jobs.values()) == [13, 14, 15], again.outcomes
    assert run(p).created == []
