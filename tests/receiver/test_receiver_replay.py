"""Replay: the same signed body under a new ``X-GitHub-Delivery`` creates no second Job.

Anyone who saw one delivery (a proxy's log, a leaked request dump) holds a body and a valid signature;
changing the delivery id needs no secret. The Job's name is derived from the Trigger and the SHA-256 of
the raw body, so the API server itself refuses the second one (409): nothing to remember in the
receiver, the same across its restarts and its replicas. GitHub's own redelivery (the same body under
the same id) is a duplicate as before; a second comment of the same words is another body, another Job.
The real receiver on a loopback socket, as in ``tests/receiver/test_receiver.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pidispatch.receiver import delivery as core
from testkit.fakegithub import Delivery
from testkit.receiver import MemoryCluster, Running, trigger


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster([trigger("fix", "issue_comment.created", phrase="@pi"),
                          trigger("fix-too", "issue_comment.created", phrase="@pi")])


@pytest.fixture
def running(cluster: MemoryCluster) -> Iterator[Running]:
    served = Running(cluster)
    yield served
    served.stop()


def replayed(delivery: Delivery) -> Delivery:
    """The same payload (so the same bytes and signature) under a new delivery id."""
    again = delivery.redelivered()
    return Delivery(again.event, again.payload)


def test_a_replay_under_a_new_delivery_id_creates_no_second_job(running: Running, cluster: MemoryCluster) -> None:
    first = running.hooks.send(running.hooks.issue_comment(7, "@pi fix"))
    assert first.status == 202 and len(first.json["jobs"]) == 2, first.json
    for _ in range(3):
        replay = replayed(first.delivery)
        assert replay.id != first.delivery.id and replay.body == first.delivery.body
        again = running.hooks.send(replay)
        assert again.status == 202, again.json
        assert again.json == {"jobs": [], "duplicates": first.json["jobs"]}, "the first delivery's Jobs"
    assert sorted(cluster.jobs) == sorted(first.json["jobs"])
    assert {j["spec"]["deliveryId"] for j in cluster.jobs.values()} == {first.delivery.id}, "untouched"
    registry = running.receiver.metrics.registry
    counts = [registry.get_sample_value("pidispatch_receiver_deliveries_total", {"result": r})
              for r in ("created", "duplicate")]
    assert counts == [1, 3]


def test_a_replay_after_the_receiver_restarts_creates_nothing(cluster: MemoryCluster) -> None:
    before = Running(cluster)
    try:
        first = before.hooks.send(before.hooks.issue_comment(7, "@pi fix"))
    finally:
        before.stop()
    after = Running(cluster)  # a new process: nothing carried over but the cluster
    try:
        again = after.hooks.send(replayed(first.delivery))
        assert again.json == {"jobs": [], "duplicates": first.json["jobs"]}
    finally:
        after.stop()
    assert len(cluster.jobs) == 2


def test_githubs_redelivery_is_still_a_duplicate(running: Running, cluster: MemoryCluster) -> None:
    first = running.hooks.send(running.hooks.issue_comment(7, "@pi fix"))
    again = running.hooks.send(first.delivery.redelivered())
    assert again.json == {"jobs": [], "duplicates": first.json["jobs"]}
    assert len(cluster.jobs) == 2


def test_the_same_words_in_a_new_comment_are_a_new_job(running: Running, cluster: MemoryCluster) -> None:
    """Another comment has another id and timestamp: another body, so another pair of Jobs."""
    first = running.hooks.send(running.hooks.issue_comment(7, "@pi fix"))
    second = running.hooks.send(running.hooks.issue_comment(7, "@pi fix"))
    assert len(second.json["jobs"]) == 2 and set(second.json["jobs"]).isdisjoint(first.json["jobs"])
    assert len(cluster.jobs) == 4


def test_a_replay_of_a_form_encoded_body_creates_nothing(running: Running, cluster: MemoryCluster) -> None:
    first = running.hooks.send(running.hooks.issue_comment(7, "@pi fix"), form=True)
    again = running.hooks.send(replayed(first.delivery), form=True)
    assert len(first.json["jobs"]) == 2 and again.json["jobs"] == []
    assert len(cluster.jobs) == 2


def test_the_memory_is_the_jobs_own(running: Running, cluster: MemoryCluster) -> None:
    """The receiver holds no per-delivery state: the dedupe lasts as long as the Jobs do (the chart's
    ``jobs.ttlSecondsAfterFinished``; unset, for good), and costs the receiver no memory."""
    kept = dict(vars(running.receiver))
    first = running.hooks.send(running.hooks.issue_comment(7, "@pi fix"))
    for n in range(20):
        running.hooks.send(running.hooks.issue_comment(100 + n, "@pi fix"))
    assert vars(running.receiver).keys() == kept.keys()
    assert all(vars(running.receiver)[k] is v for k, v in kept.items()), "no attribute replaced or grown"
    cluster.jobs.clear()  # the Jobs deleted (their TTL passed): the body is then new again
    assert len(running.hooks.send(replayed(first.delivery)).json["jobs"]) == 2


# -- names -----------------------------------------------------------------------------------------------------
def test_job_names_are_deterministic_and_readable_when_short() -> None:
    digest = core.body_digest(b'{"action":"created"}')
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert core.job_name(digest, "fix") == f"fix-{digest[:32]}"
    assert core.job_name(digest.upper(), "fix") == f"fix-{digest[:32]}", "one digest, one name"
    assert core.job_name(digest, "fix") != core.job_name(digest, "fix-too")
    assert core.job_name(digest, "fix") != core.job_name(core.body_digest(b'{"action":"created"} '), "fix")
    long = "a-trigger-name-that-is-far-too-long-to-fit-with-a-digest"
    hashed = core.job_name(digest, long)
    assert len(hashed) <= 63 and hashed == core.job_name(digest, long)
    assert re.fullmatch(r"a-trigger-name-that-is-far-too-long-to-fit-[0-9a-f]{20}", hashed), hashed
    dotted = core.job_name(digest, "team.fix")
    assert re.fullmatch(r"team-fix-[0-9a-f]{20}", dotted), "a dotted Trigger name is hashed, not mangled into a clash"
    assert core.job_name(digest, "team-fix") != dotted


_TRIGGER_NAMES = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,80}[a-z0-9])?", fullmatch=True)


@given(st.lists(st.tuples(st.binary(max_size=64), _TRIGGER_NAMES), min_size=2, max_size=6, unique=True))
def test_job_names_are_valid_and_distinct_for_distinct_pairs(pairs: list[tuple[bytes, str]]) -> None:
    names: dict[str, set[tuple[bytes, str]]] = {}
    for body, name in pairs:
        job = core.job_name(core.body_digest(body), name)
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", job) and len(job) <= 63, job
        names.setdefault(job, set()).add((body, name))
    assert all(len(v) == 1 for v in names.values()), names
