"""The job budget (docs/architecture.md#slot): FIFO by arrival, capacity kept, a burst never dropped."""

from __future__ import annotations

import random
import threading
import time

import pytest

from pidispatch.jobflow.queuepolicy import BACKOFF_CAP_SECONDS, START_ATTEMPTS, START_BACKOFF, waited_longer_than
from pidispatch.jobflow.slots import Slots


def drain(slots: Slots) -> list[str]:
    """Start every Job that fits now."""
    started = []
    while (job := slots.take_next()) is not None:
        started.append(job)
    return started


@pytest.mark.parametrize("capacity", [0, -1], ids=["zero", "negative"])
def test_capacity_must_be_positive(capacity: int) -> None:
    with pytest.raises(ValueError):
        Slots(capacity)


ORDER = [
    ("oldest arrival first", [("b", (2, "b")), ("a", (3, "a")), ("c", (1, "c"))], ["c", "b", "a"]),
    ("equal arrival breaks ties by name", [("zed", 5), ("alpha", 5), ("mid", 5)], ["alpha", "mid", "zed"]),
    ("controller's (creationTimestamp, name) key",
     [("j2", ("2030-01-01T00:00:02Z", "j2")), ("j10", ("2030-01-01T00:00:01Z", "j10")),
      ("j1", ("2030-01-01T00:00:02Z", "j1"))], ["j10", "j1", "j2"]),
    ("enqueue order does not matter", [("x", 1), ("w", 0), ("y", 2)], ["w", "x", "y"]),
]


@pytest.mark.parametrize(("arrivals", "expected"), [o[1:] for o in ORDER], ids=[o[0] for o in ORDER])
def test_fifo_by_order_then_name(arrivals: list, expected: list[str]) -> None:
    slots = Slots(len(arrivals))
    for job, order in arrivals:
        assert slots.enqueue(job, order) is True
    assert drain(slots) == expected


def test_capacity_is_respected() -> None:
    slots = Slots(2)
    for i in range(3):
        slots.enqueue(f"j{i}", i)
    assert drain(slots) == ["j0", "j1"]
    assert (slots.running, slots.queued, slots.free) == (2, 1, 0)
    assert slots.release("j0") is True
    assert drain(slots) == ["j2"]
    assert (slots.running, slots.queued, slots.free) == (2, 0, 0)


def test_held_jobs_count_even_above_capacity() -> None:
    """Jobs found running at start-up own a slot each, even when they exceed a lowered capacity."""
    slots = Slots(1)
    slots.hold("running-1")
    slots.hold("running-2")
    slots.enqueue("new", 0)
    assert (slots.running, slots.free, slots.take_next()) == (2, 0, None)
    slots.release("running-1")
    assert slots.take_next() is None, "still at capacity with one holder left"
    slots.release("running-2")
    assert slots.take_next() == "new"


def test_hold_moves_a_waiting_job_into_a_slot() -> None:
    slots = Slots(3)
    slots.enqueue("j", 0)
    slots.hold("j")
    assert (slots.queued, slots.running, slots.position("j")) == (0, 1, None)
    assert slots.take_next() is None


@pytest.mark.parametrize("state", ["waiting", "holding"])
def test_a_job_is_never_queued_twice(state: str) -> None:
    slots = Slots(1)
    slots.enqueue("j", 0)
    if state == "holding":
        assert slots.take_next() == "j"
    assert slots.enqueue("j", 0) is False
    assert slots.queued + slots.running == 1


RELEASES = [
    ("a waiting job leaves the queue", "waiting", True, (1, 0)),
    ("a holding job frees its slot", "holding", True, (0, 1)),
    ("an unknown job changes nothing", "unknown", False, (1, 1)),
]


@pytest.mark.parametrize(("which", "changed", "after"), [r[1:] for r in RELEASES], ids=[r[0] for r in RELEASES])
def test_release(which: str, changed: bool, after: tuple[int, int]) -> None:
    slots = Slots(1)
    slots.enqueue("holding", 0)
    assert slots.take_next() == "holding"
    slots.enqueue("waiting", 1)
    assert slots.release(which) is changed
    assert (slots.running, slots.queued) == after
    assert slots.release(which) is False, "a second release finds nothing to free"


def test_position_is_one_based_in_queue_order() -> None:
    slots = Slots(1)
    for job, order in (("c", 3), ("a", 1), ("b", 2), ("a2", 1)):
        slots.enqueue(job, order)
    assert [slots.position(j) for j in ("a", "a2", "b", "c")] == [1, 2, 3, 4]
    assert slots.take_next() == "a"
    assert [slots.position(j) for j in ("a", "a2", "b", "c", "nobody")] == [None, 1, 2, 3, None]
    slots.release("b")
    assert slots.position("c") == 2


@pytest.mark.parametrize(("capacity", "holders", "free"), [(3, 0, 3), (3, 2, 1), (3, 3, 0), (2, 5, 0)],
                         ids=["empty", "partly used", "full", "over capacity is zero, not negative"])
def test_free(capacity: int, holders: int, free: int) -> None:
    slots = Slots(capacity)
    for i in range(holders):
        slots.hold(f"h{i}")
    assert slots.free == free


def test_a_burst_of_500_drains_completely_in_order() -> None:
    slots = Slots(4)
    names = [f"job-{i:03d}" for i in range(500)]
    shuffled = random.Random(7).sample(names, len(names))
    for name in shuffled:
        assert slots.enqueue(name, (f"2030-01-01T00:{int(name[4:]) // 60:02d}:{int(name[4:]) % 60:02d}Z", name))
    started: list[str] = []
    while slots.queued or slots.running:
        started.extend(drain(slots))
        assert slots.running <= slots.capacity
        slots.release(started[-slots.running])  # the oldest still running ends first
    assert started == names
    assert (slots.running, slots.queued, slots.free) == (0, 0, 4)


def test_concurrent_enqueue_take_release_loses_nothing_and_starts_nothing_twice() -> None:
    capacity, producers, per_producer, workers = 3, 4, 150, 6
    total = producers * per_producer
    slots = Slots(capacity)
    starts: dict[str, int] = {}
    guard = threading.Lock()
    running = 0
    peak = 0
    finished = threading.Event()
    errors: list[BaseException] = []
    barrier = threading.Barrier(producers + workers)
    deadline = time.monotonic() + 60

    def produce(p: int) -> None:
        barrier.wait()
        for i in range(per_producer):
            assert slots.enqueue(f"p{p}-{i}", (i, p))

    def work() -> None:
        nonlocal running, peak
        barrier.wait()
        try:
            while not finished.is_set() and time.monotonic() < deadline:
                job = slots.take_next()
                if job is None:
                    time.sleep(0)  # yield to the others; nothing is awaited here
                    continue
                with guard:
                    starts[job] = starts.get(job, 0) + 1
                    running += 1
                    peak = max(peak, running)
                with guard:
                    running -= 1
                    done = len(starts) == total
                assert slots.release(job) is True
                if done:
                    finished.set()
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)
            finished.set()

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    threads += [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()) + 5)
    assert not any(t.is_alive() for t in threads), "threads still running at the deadline: a job was lost"
    assert not errors, errors
    assert len(starts) == total, f"{total - len(starts)} jobs never started"
    assert all(n == 1 for n in starts.values()), {j: n for j, n in starts.items() if n != 1}
    assert peak <= capacity
    assert (slots.running, slots.queued) == (0, 0)


@pytest.mark.parametrize(("since", "now", "due"), [
    ({}, 10.0, []),
    ({"a": 9.0}, 10.0, []),
    ({"a": 8.0}, 10.0, ["a"]),
    ({"b": 7.0, "a": 8.5, "c": 5.0}, 10.0, ["c", "b"]),
    ({"b": 7.0, "a": 7.0}, 10.0, ["a", "b"]),
], ids=["nobody-waiting", "waited-less-than-the-moment", "waited-exactly-the-moment",
        "only-the-long-waits-oldest-first", "same-time-by-name"])
def test_waited_longer_than_picks_the_jobs_due_for_a_queued_mark(since: dict[str, float], now: float,
                                                                  due: list[str]) -> None:
    assert waited_longer_than(since, now, 2.0) == due


# ---- back-off: a Job whose start failed waits, the Jobs behind it do not ---------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_deferred_job_lets_the_next_ones_start_and_keeps_its_place() -> None:
    clock = Clock()
    slots = Slots(1, clock=clock)
    for i, job in enumerate(["head", "second", "third"]):
        slots.enqueue(job, i)
    assert slots.take_next() == "head"
    slots.defer("head", 0, 5.0)  # its start failed: back in line, not before 5 s
    assert (slots.running, slots.queued, slots.position("head")) == (0, 3, 1)
    assert slots.take_next() == "second", "the deferred head held the queue"
    slots.release("second")
    clock.now += 5.0
    assert slots.take_next() == "head", "once ready, the deferred Job is first again (FIFO among ready Jobs)"
    slots.release("head")
    assert slots.take_next() == "third"


def test_next_ready_in_counts_only_running_back_offs() -> None:
    clock = Clock()
    slots = Slots(1, clock=clock)
    assert slots.next_ready_in() is None
    slots.enqueue("ready", 1)
    assert slots.next_ready_in() is None, "a ready Job is the wake-up event's business, not a timer's"
    slots.enqueue("late", 0)
    assert slots.take_next() == "late"
    slots.defer("late", 0, 4.0)
    clock.now += 1.5
    assert slots.next_ready_in() == 2.5
    clock.now += 2.5
    assert slots.next_ready_in() is None


@pytest.mark.parametrize("how", ["release", "hold"])
def test_release_or_hold_ends_a_back_off(how: str) -> None:
    clock = Clock()
    slots = Slots(1, clock=clock)
    slots.enqueue("j", 0)
    slots.take_next()
    slots.defer("j", 0, 60.0)
    getattr(slots, how)("j")
    assert slots.next_ready_in() is None
    if how == "release":
        slots.enqueue("j", 0)
        assert slots.take_next() == "j", "a re-queued Job inherited an old back-off"


@pytest.mark.parametrize(("failures", "seconds"), [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0),
                                                    (7, BACKOFF_CAP_SECONDS), (START_ATTEMPTS, BACKOFF_CAP_SECONDS),
                                                    (START_ATTEMPTS + 1, None)])
def test_backoff_doubles_from_one_second_to_the_cap(failures: int, seconds: float | None) -> None:
    """The start back-off, then ``None`` past its attempts: the Job leaves the line (``queue.retry_later``)."""
    assert START_BACKOFF.delay(failures) == seconds
