"""The operator's workqueue (``reconcile/workqueue.py``) and back-off (``reconcile/backoff.py``), on real threads.

Nothing sleeps in place of a wait: a reconcile that must be held blocks on an event the test sets, and the
waits for the queue end as soon as it is idle. Back-offs are tens of milliseconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from pidispatch import metrics
from pidispatch.handlers.feed import Event, Feed
from pidispatch.reconcile.backoff import Backoff, RateLimiter
from pidispatch.reconcile.workqueue import WorkQueue
from testkit.wait import wait_until

FAST = Backoff(first=0.01, cap=0.04, attempts=4)


class Calls:
    """A reconcile that records (key, item, time), raising while ``fail(key, item)`` says so."""

    def __init__(self, fail: Callable[[str, int], bool] = lambda _k, _i: False,
                 hold: threading.Event | None = None, held: Callable[[str], bool] = lambda _k: True) -> None:
        self.calls: list[tuple[str, int, float]] = []
        self.fail, self.hold, self.held = fail, hold, held
        self.lock = threading.Lock()
        self.busy: dict[str, int] = {}
        self.overlap = False

    def __call__(self, key: str, item: int) -> None:
        with self.lock:
            self.busy[key] = self.busy.get(key, 0) + 1
            self.overlap |= self.busy[key] > 1
            self.calls.append((key, item, time.monotonic()))
        try:
            if self.hold is not None and self.held(key):
                self.hold.wait(10)
            if self.fail(key, item):
                raise RuntimeError(f"{key} failed")
        finally:
            with self.lock:
                self.busy[key] -= 1

    def of(self, key: str) -> list[int]:
        with self.lock:
            return [item for k, item, _ in self.calls if k == key]


@pytest.fixture
def queues() -> Iterator[list[WorkQueue[str, int]]]:
    made: list[WorkQueue[str, int]] = []
    yield made
    for q in made:
        q.stop(timeout=2)


def started(queues: list[WorkQueue[str, int]], reconcile: Callable[[str, int], None], *, start: bool = True,
            **kwargs: object) -> WorkQueue[str, int]:
    q: WorkQueue[str, int] = WorkQueue(reconcile, name="test", **kwargs)  # type: ignore[arg-type]
    queues.append(q)
    if start:
        q.start()
    return q


def settle(q: WorkQueue[str, int], timeout: float = 5.0) -> None:
    wait_until("the queue is idle", q.idle, timeout=timeout, interval=0.005)


# ---- per-key serialisation and coalescing ---------------------------------------------------------------


def test_a_key_is_never_in_two_workers_while_other_keys_go_on(queues: list[WorkQueue[str, int]]) -> None:
    hold = threading.Event()
    calls = Calls(hold=hold, held=lambda key: key == "slow")
    q = started(queues, calls, workers=4)
    q.add("slow", 0)
    wait_until("slow is in a worker", lambda: calls.of("slow") == [0], timeout=5, interval=0.005)
    adders = [threading.Thread(target=lambda i=i: [q.add("slow", i * 100 + j) for j in range(100)])
              for i in range(4)]
    for t in adders:
        t.start()
    for i in range(20):
        q.add(f"other-{i}", i)
    for t in adders:
        t.join()
    # the other keys are done by the other workers while slow's first pass is held
    wait_until("every other key is done", lambda: len(calls.calls) == 21, timeout=5, interval=0.005)
    assert calls.of("slow") == [0], "the events for a key in a worker wait for it"
    hold.set()
    settle(q)
    assert not calls.overlap
    assert len(calls.of("slow")) == 2, "400 events while one pass ran: one more pass, not 400"


def test_a_key_being_processed_is_processed_again_with_its_latest_item(queues: list[WorkQueue[str, int]]) -> None:
    hold = threading.Event()
    calls = Calls(hold=hold)
    q = started(queues, calls)
    q.add("a", 1)
    wait_until("a is in a worker", lambda: calls.of("a") == [1], timeout=5, interval=0.005)
    for item in range(2, 51):
        q.add("a", item)
    hold.set()
    settle(q)
    assert calls.of("a") == [1, 50]


def test_events_for_a_waiting_key_coalesce_in_one_pass_and_keys_keep_their_order(
        queues: list[WorkQueue[str, int]]) -> None:
    calls = Calls()
    q = started(queues, calls, start=False, workers=1)
    for item in range(5):
        q.add("a", item)
        q.add("b", item)
    q.add("c", 0)
    q.start()
    settle(q)
    assert [(k, i) for k, i, _ in calls.calls] == [("a", 4), ("b", 4), ("c", 0)]


def test_merge_decides_what_a_new_item_makes_of_a_waiting_one(queues: list[WorkQueue[str, int]]) -> None:
    calls = Calls()
    q = started(queues, calls, start=False, merge=lambda waiting, new: waiting + new)
    for item in (1, 2, 3):
        q.add("a", item)
    q.start()
    settle(q)
    assert calls.of("a") == [6]


# ---- rate-limited retries -------------------------------------------------------------------------------


def test_the_back_off_doubles_up_to_its_cap_and_the_attempts_are_capped_too() -> None:
    backoff = Backoff(first=1.0, cap=60.0, attempts=12)
    assert [backoff.delay(n) for n in range(1, 14)] == [1, 2, 4, 8, 16, 32, 60, 60, 60, 60, 60, 60, None]
    assert backoff.delay(0) == 0.0
    limiter: RateLimiter[str] = RateLimiter(Backoff(first=0.5, cap=1.0, attempts=2))
    assert [limiter.when("k") for _ in range(3)] == [(1, 0.5), (2, 1.0), (3, None)]
    assert limiter.failures("k") == 0, "a dropped key starts afresh"
    assert limiter.when("k") == (1, 0.5)
    limiter.forget("k")
    assert limiter.when("k") == (1, 0.5)


def test_a_failing_key_is_retried_after_growing_delays_then_dropped_with_a_log_line_and_a_metric(
        queues: list[WorkQueue[str, int]], caplog: pytest.LogCaptureFixture) -> None:
    calls = Calls(fail=lambda key, _item: key == "bad")
    dropped = metrics.WORKQUEUE_DROPPED.labels("test")._value.get()
    q = started(queues, calls, backoff=FAST)
    with caplog.at_level(logging.WARNING, logger="pidispatch.operator"):
        q.add("bad", 7)
        q.add("good", 1)
        settle(q)
    times = [t for k, _, t in calls.calls if k == "bad"]
    assert calls.of("bad") == [7] * 5, "the first pass and FAST's 4 retries"
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    for gap, delay in zip(gaps, [0.01, 0.02, 0.04, 0.04], strict=True):  # doubled, then held at the cap
        assert delay <= gap < delay + 1.0
    assert calls.of("good") == [1]
    assert metrics.WORKQUEUE_DROPPED.labels("test")._value.get() == dropped + 1
    assert any(r.levelno == logging.ERROR and "bad failed 5 times in a row, dropped" in r.getMessage()
               for r in caplog.records)
    q.add("bad", 8)  # a later event starts afresh
    settle(q)
    assert calls.of("bad") == [7] * 5 + [8] * 5


def test_a_success_forgets_the_failures_and_cancels_the_waiting_retry(queues: list[WorkQueue[str, int]]) -> None:
    calls = Calls(fail=lambda _key, item: item < 0)
    q = started(queues, calls, backoff=Backoff(first=30.0, cap=60.0, attempts=3))
    q.add("a", -1)
    wait_until("a failed once", lambda: q.limiter.failures("a") == 1, timeout=5, interval=0.005)
    assert not q.idle(), "its retry waits 30 s"
    q.add("a", 2)  # a newer event: processed at once, not after the back-off
    settle(q)
    assert calls.of("a") == [-1, 2]
    assert q.limiter.failures("a") == 0


def test_a_retry_takes_the_newest_item_known_by_then(queues: list[WorkQueue[str, int]]) -> None:
    hold = threading.Event()
    calls = Calls(fail=lambda _key, item: item == 1, hold=hold)
    q = started(queues, calls, backoff=FAST)
    q.add("a", 1)
    wait_until("a is in a worker", lambda: calls.of("a") == [1], timeout=5, interval=0.005)
    q.add("a", 2)
    hold.set()
    settle(q)
    assert calls.of("a") == [1, 2], "the dirty pass took 2; the retry found nothing newer to do"


# ---- resync, the fence, stop ------------------------------------------------------------------------------


def test_the_resync_replays_every_known_key_but_not_a_deletion_or_a_discarded_key(
        queues: list[WorkQueue[str, int]]) -> None:
    calls = Calls()
    q = started(queues, calls, resync_seconds=0.05)
    q.add("a", 1)
    q.add("b", 1)
    q.add("b", 2)
    q.add("gone", 1, remember=False)
    q.add("vanished", 1)
    q.discard("vanished")
    wait_until("two resyncs", lambda: len(calls.of("a")) >= 3 and len(calls.of("b")) >= 3, timeout=5,
               interval=0.005)
    assert set(calls.of("a")) == {1} and set(calls.of("b")[1:]) == {2}
    assert calls.of("gone") == [1] and calls.of("vanished") == [1], "processed once, never replayed"


def test_resync_by_hand_queues_every_known_key_once(queues: list[WorkQueue[str, int]]) -> None:
    calls = Calls()
    q = started(queues, calls, start=False)
    q.add("a", 1)
    q.resync()  # a is waiting already: it keeps its one turn
    q.start()
    settle(q)
    q.resync()
    settle(q)
    assert calls.of("a") == [1, 1]


def test_an_item_taken_while_not_acting_is_dropped_and_not_retried(queues: list[WorkQueue[str, int]]) -> None:
    acting = threading.Event()
    calls = Calls()
    q = started(queues, calls, acting=acting.is_set)
    q.add("a", 1)
    settle(q)
    assert calls.calls == []
    acting.set()
    q.add("a", 2)
    settle(q)
    assert calls.of("a") == [2]


def test_stop_finishes_the_item_in_hand_drops_the_rest_and_takes_nothing_more(
        queues: list[WorkQueue[str, int]]) -> None:
    hold = threading.Event()
    calls = Calls(hold=hold)
    q = started(queues, calls, workers=1)
    q.add("a", 1)
    wait_until("a is in the worker", lambda: calls.of("a") == [1], timeout=5, interval=0.005)
    q.add("b", 1)
    stopper = threading.Thread(target=q.stop)
    stopper.start()
    hold.set()
    stopper.join(5)
    assert not stopper.is_alive()
    q.add("c", 1)
    assert [k for k, _, _ in calls.calls] == ["a"]
    assert not any(t.is_alive() for t in q._threads)


# ---- the operator's feed: kinds, deletions --------------------------------------------------------------


class Reconcilers:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str]] = []

    def on_job(self, event_type: str | None, body: dict[str, object]) -> None:
        self.calls.append(("job", event_type, str(body["metadata"]["uid"])))  # type: ignore[index]

    def on_pod(self, pod: dict[str, object]) -> None:
        self.calls.append(("pod", None, str(pod["metadata"]["name"])))  # type: ignore[index]

    def on_sessionkey(self, event_type: str | None, body: dict[str, object]) -> None:
        self.calls.append(("sessionkey", event_type, str(body["metadata"]["name"])))  # type: ignore[index]

    def on_trigger(self, body: dict[str, object]) -> None:
        self.calls.append(("trigger", None, str(body["metadata"]["name"])))  # type: ignore[index]

    def on_trigger_deleted(self, name: str) -> None:
        self.calls.append(("trigger", "DELETED", name))

    def job_turn(self, name: str) -> None:
        pass  # nothing handed to any Job here

    def attach(self, keys: object) -> None:
        pass


def body(name: str, uid: str = "") -> dict[str, object]:
    return {"metadata": {"name": name, "uid": uid}}


def test_the_feed_routes_each_kind_and_keeps_a_job_deleted_while_its_recreation_waited() -> None:
    to = Reconcilers()
    feed = Feed(to, resync_seconds=None)
    feed.event("Job", "DELETED", body("j", "uid-1"))
    feed.event("Job", "ADDED", body("j", "uid-2"))
    feed.event("Job", "MODIFIED", body("j", "uid-2"))
    feed.event("Pod", "MODIFIED", body("p"))
    feed.event("Pod", "DELETED", body("p"))  # forgotten, not reconciled: the MODIFIED still is
    feed.event("SessionKey", "DELETED", body("k"))
    feed.event("Trigger", "MODIFIED", body("t"))
    feed.event("Trigger", "DELETED", body("t"))
    feed.start()
    try:
        wait_until("the feed is idle", feed.queue.idle, timeout=5, interval=0.005)
    finally:
        feed.stop()
    assert to.calls == [("job", "DELETED", "uid-1"), ("job", "MODIFIED", "uid-2"), ("pod", None, "p"),
                        ("sessionkey", "DELETED", "k"), ("trigger", "DELETED", "t")]
    assert Event("DELETED", body("j", "uid-1")).uid == "uid-1"


def test_the_feed_replays_jobs_and_triggers_on_a_resync_but_keeps_no_sessionkey_or_pod_body() -> None:
    """A SessionKey's body is reconciled and then let go: a store of 100 000 keys must not become the
    operator's memory (the SessionKey refresh reads them a page at a time). A Pod's too: the dispatcher's resync
    reads each running Job's Pod afresh, and a 500-Job burst's Pods kept were 20 MiB. Jobs and Triggers are
    replayed."""
    to = Reconcilers()
    feed = Feed(to, resync_seconds=None)
    for kind in ("Job", "Pod", "SessionKey", "Trigger"):
        feed.event(kind, "ADDED", body(kind.lower(), "uid"))  # type: ignore[arg-type]
    feed.start()
    try:
        wait_until("the feed is idle", feed.queue.idle, timeout=5, interval=0.005)
        to.calls.clear()
        feed.queue.resync()
        wait_until("the resync is handled", feed.queue.idle, timeout=5, interval=0.005)
    finally:
        feed.stop()
    assert sorted(to.calls) == [("job", "ADDED", "uid"), ("trigger", None, "trigger")]


def test_the_feed_keeps_no_managed_fields_and_leaves_the_callers_body_alone() -> None:
    """Server-side apply's ``managedFields`` is about half a Job's body and nothing reads it: the feed drops it
    as an event enters, from a copy, so what the resync keeps is the rest."""
    seen: list[dict[str, object]] = []

    class Keep(Reconcilers):
        def on_job(self, event_type: str | None, body: dict[str, object]) -> None:
            seen.append(body)

    sent = {"metadata": {"name": "j", "uid": "u", "managedFields": [{"manager": "kubectl"}]}, "spec": {"x": 1}}
    feed = Feed(Keep(), resync_seconds=None)
    feed.event("Job", "ADDED", sent)
    feed.start()
    try:
        wait_until("the feed is idle", feed.queue.idle, timeout=5, interval=0.005)
    finally:
        feed.stop()
    assert seen == [{"metadata": {"name": "j", "uid": "u"}, "spec": {"x": 1}}]
    assert "managedFields" in sent["metadata"]  # type: ignore[operator]


# ---- requeue after, and the dispatcher's turns through the feed ---------------------------------------------


def test_add_after_brings_a_key_back_later_and_a_success_meanwhile_does_not_cancel_it(
        queues: list[WorkQueue[str, int]]) -> None:
    """A reconcile that must wait returns and asks for its key again (the ledger's settle time); the key is
    served in between, and what a resync replays is left as it was."""
    calls = Calls()
    q = started(queues, calls)
    q.add("a", 1)
    settle(q)
    asked = time.monotonic()
    q.add_after("a", 2, 0.3)
    q.add("a", 3, remember=None)  # a nudge: processed, not remembered
    wait_until("the nudge", lambda: calls.of("a") == [1, 3], timeout=5, interval=0.005)
    assert not q.idle(), "the requeue still waits"
    settle(q)
    assert calls.of("a") == [1, 3, 2]
    assert calls.calls[-1][2] - asked >= 0.3
    q.resync()
    settle(q)
    assert calls.of("a")[-1] == 1, "the resync replays the last remembered item, not the nudge or the requeue"


class Turns(Reconcilers):
    def __init__(self) -> None:
        super().__init__()
        self.keys: object = None

    def job_turn(self, name: str) -> None:
        self.calls.append(("turn", None, name))

    def attach(self, keys: object) -> None:
        self.keys = keys


def test_a_jobs_turn_follows_its_event_and_a_bare_turn_keeps_the_waiting_event() -> None:
    """The dispatcher hands work back to a Job's key (``Feed.job``): a bare turn folded into a waiting event
    keeps that event's body, every Job reconcile ends with the Job's turn, and the feed attached itself."""
    to = Turns()
    feed = Feed(to, resync_seconds=None)
    assert to.keys is feed
    feed.event("Job", "ADDED", body("j", "uid-1"))
    feed.job("j")  # folded into the waiting ADDED
    feed.job("k")  # a key with no event: its turn alone
    feed.start()
    try:
        wait_until("the feed is idle", feed.queue.idle, timeout=5, interval=0.005)
        feed.job_after("k", 0.05)
        wait_until("the later turn", lambda: to.calls.count(("turn", None, "k")) == 2, timeout=5, interval=0.005)
    finally:
        feed.stop()
    assert [c for c in to.calls if "k" not in c] == [("job", "ADDED", "uid-1"), ("turn", None, "j")], (
        "one pass for j: its event, then its turn")
