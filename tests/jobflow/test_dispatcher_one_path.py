"""The dispatcher and the operator's one queue, with real threads (docs/architecture.md#event-path).

Every step that acts on a Job (its start, its end) runs in the queue's worker for that Job's key, never in the
pump's thread, a Pod's key or a thread of its own: per-key serialisation is then the only thing that keeps two
paths off one Job, and no per-name lock is needed. And the wait for the gateway's ledger to settle is a
requeue of the Job's key after a delay, not a sleep that holds one of the queue's workers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pidispatch.api.views import JobView
from pidispatch.contract import JOB_LABEL
from pidispatch.contract import gateway_wire as protocol
from pidispatch.handlers.feed import Event, Feed, Key
from pidispatch.jobflow import complete as completion
from pidispatch.jobflow import dispatcher as dispatching
from pidispatch.jobflow.dispatcher import Dispatcher
from pidispatch.jobflow.handoff import Handed, Inbox
from pidispatch.jobflow.podview import PodView
from pidispatch.jobflow.queue import JobQueue
from pidispatch.jobflow.slots import Slots
from pidispatch.settings import OperatorSettings, Settings
from pidispatch.settings.gateway import Gateway
from testkit.jobflow import Clock, controller, new_job, phase, pump
from testkit.memoryapi import NS, PODS, TRIGGERS, MemoryApi
from testkit.wait import wait_until

CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"

_current = threading.local()  # the key the queue's worker on this thread is reconciling


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, Key | None]]]:
    """Records (step, Job name, key in hand) for every start and end of a Job, with the key the calling thread
    was reconciling (``None``: not a worker of the queue)."""
    seen: list[tuple[str, str, Key | None]] = []
    reconcile = Feed._reconcile

    def in_key(self: Feed, key: Key, event: Event) -> None:
        _current.key = key
        try:
            reconcile(self, key, event)
        finally:
            _current.key = None

    def recorded(step: str, fn: Any, name_at: int, name: Any = str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen.append((step, name(args[name_at]), getattr(_current, "key", None)))
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(Feed, "_reconcile", in_key)
    monkeypatch.setattr(dispatching.starting, "start_job", recorded("start", dispatching.starting.start_job, 5))
    monkeypatch.setattr(dispatching.completion, "ending", recorded("end", completion.ending, 2))
    monkeypatch.setattr(dispatching.Dispatcher, "_resync_job",
                        recorded("resync", dispatching.Dispatcher._resync_job, 1, lambda job: job.name))
    monkeypatch.setattr(JobQueue, "mark_queued", recorded("mark", JobQueue.mark_queued, 1))
    yield seen


def running(d: Dispatcher, feed: Feed) -> None:
    d.start()
    feed.start()


def end_pod(api: MemoryApi, feed: Feed, job: str, finished: float | None = None) -> None:
    [pod] = [p for p in api.pods() if p["metadata"]["labels"].get(JOB_LABEL) == job]
    path = f"{PODS}/{pod['metadata']['name']}"
    terminated: dict[str, Any] = {"exitCode": 0}
    if finished is not None:
        terminated["finishedAt"] = datetime.fromtimestamp(finished, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    api.patch(path + "/status", {"status": {"phase": "Succeeded", "containerStatuses": [
        {"name": "pi", "state": {"terminated": terminated}}]}})
    feed.event("Pod", "MODIFIED", api.get(path))


def pod_of(api: MemoryApi, job: str) -> bool:
    return any(p["metadata"]["labels"].get(JOB_LABEL) == job for p in api.pods())


def test_every_start_and_end_of_a_job_runs_in_its_own_keys_worker(api: MemoryApi, clock: Clock, tmp_path: Path,
                                                                   keyed: list[tuple[str, str, Key | None]]) -> None:
    """Two Jobs, one slot: ``b`` waits (and is marked Queued), the resync lists both, ``a``'s Pod ends, and ``b``
    gets the slot. Before, ``a``'s end ran in its Pod's key (beside any worker of ``("Job", "a")``), ``b``'s
    start in the pump's own thread, its mark in the marker's and the resync's work in the resync's, so only a
    per-name lock kept them apart; now each runs in ``("Job", name)``'s worker."""
    d = controller(api, clock, tmp_path, capacity=1)
    feed = Feed(d, workers=4, resync_seconds=None)
    running(d, feed)
    try:
        feed.event("Job", "ADDED", new_job(api, "a"))
        wait_until("a's Pod", lambda: pod_of(api, "a"), timeout=10, interval=0.01)
        feed.event("Job", "ADDED", new_job(api, "b", issue=2))
        wait_until("b marked Queued", lambda: phase(api, "b") == "Queued", timeout=10, interval=0.02)
        assert not pod_of(api, "b"), "one slot: b waits"
        d.resync()
        wait_until("the resync's turns", lambda: {("resync", "a"), ("resync", "b")} <= {s[:2] for s in keyed},
                   timeout=10, interval=0.01)
        end_pod(api, feed, "a")
        wait_until("b's Pod", lambda: pod_of(api, "b"), timeout=10, interval=0.01)
        wait_until("a ended", lambda: phase(api, "a") == "Succeeded", timeout=10, interval=0.01)
    finally:
        feed.stop()
        d.stop()
    assert {(step, name) for step, name, _ in keyed} >= {("start", "a"), ("start", "b"), ("end", "a"),
                                                          ("mark", "b"), ("resync", "a"), ("resync", "b")}
    strays = [(step, name, key) for step, name, key in keyed if key != ("Job", name)]
    assert not strays, f"steps on a Job outside its key's worker: {strays}"


def gateway_dispatcher(api: MemoryApi, clock: Clock, tmp_path: Path) -> Dispatcher:
    key = tmp_path / "gateway.key"
    key.write_bytes(b"g" * 48)
    settings = OperatorSettings(store=Settings(), staging_dir=str(tmp_path / "staging"), max_concurrent_jobs=1,
                                gateway=Gateway(url="https://pd-gateway.ns.svc", proxy="http://pd-gateway.ns.svc:3128",
                                                ca_configmap="pd-gateway-ca", key_file=str(key),
                                                default_max_tokens=50_000))
    d = Dispatcher(settings, api, NS)  # type: ignore[arg-type]
    d.slots = Slots(1, clock=clock)
    return d


def test_the_ledgers_settle_time_holds_no_worker(api: MemoryApi, clock: Clock, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A job behind the gateway whose Pod has just finished: its end waits for the gateway's ledger to settle
    (``usage.LEDGER_SETTLE_SECONDS``), but with one worker, another key's event is handled meanwhile (before, the
    worker slept in ``usage.settled_ledger``); and the ledger written during the wait is the one read."""
    d = gateway_dispatcher(api, clock, tmp_path)
    handled: list[float] = []
    on_trigger = d.on_trigger
    monkeypatch.setattr(d, "on_trigger", lambda body: (handled.append(time.monotonic()), on_trigger(body)))
    feed = Feed(d, workers=1, resync_seconds=None)
    d.on_job("ADDED", new_job(api, "a"))  # a free slot: started in the event's own turn
    assert pod_of(api, "a")
    uid = api.job("a")["metadata"]["uid"]
    feed.start()
    try:
        ended = time.time()
        end_pod(api, feed, "a", finished=ended)
        # The worker has taken the Pod's event: nothing waits for it, and the queue is not idle (the end in hand, or
        # the Job's key waiting out the settle time).
        wait_until("the Pod's event taken", lambda: feed.queue.depth == 0 and not feed.queue.idle(), timeout=10,
                   interval=0.005)
        sent = time.monotonic()
        feed.event("Trigger", "MODIFIED", api.get(f"{TRIGGERS}/fix"))
        wait_until("the Trigger's event", lambda: handled, timeout=10, interval=0.01)
        assert handled[0] - sent < 1.0, "the only worker was held by the ledger's settle time"
        assert phase(api, "a") not in ("Succeeded", "Failed"), "the ledger is not read before it settles"
        api.create(CONFIGMAPS, {"metadata": {"name": protocol.ledger_name(uid)},
                                "data": {"gateway-0": '{"input": 7, "output": 3, "requests": 1, "cost": 0.5}'}})
        wait_until("a ended", lambda: phase(api, "a") == "Succeeded", timeout=10, interval=0.02)
        assert time.time() >= int(ended) + 3.0 - 0.05, "read no sooner than the settle time after the Pod finished"
        assert api.job("a")["status"]["tokens"]["input"] == 7, "the ledger as written during the wait"
    finally:
        feed.stop()


def test_the_dispatcher_keeps_nothing_handed_for_jobs_that_came_and_went(api: MemoryApi, clock: Clock,
                                                                         tmp_path: Path) -> None:
    """Jobs admitted, started, and deleted: nothing is left in the inbox through which the loops hand work to a
    Job's key (as the per-name lock map it replaces kept nothing)."""
    d = controller(api, clock, tmp_path, capacity=4)
    for n in range(6):
        d.admit(JobView.of(new_job(api, f"j{n}", issue=n + 1)))
    pump(d)
    assert len(api.list(PODS)) == 4, "four started, two wait for a slot"
    d.resync()  # hands each listed Job to its key (here, in place)
    for n in range(6):
        d.on_job("DELETED", api.job(f"j{n}"))
    assert len(d.inbox) == 0


def test_work_given_back_keeps_what_was_handed_since() -> None:
    """A turn that failed gives back what it left undone; anything handed meanwhile is newer and wins."""
    inbox = Inbox()
    inbox.grant("j")
    inbox.pod("j", PodView.of({"metadata": {"name": "new"}}))
    undone = Handed(granted=True, pod_seen=True, pod=PodView.of({"metadata": {"name": "old"}}))
    inbox.give_back("j", undone)
    back = inbox.take("j")
    assert back is not None and back.granted and back.pod_seen and back.pod is not None and back.pod.name == "new"
    assert inbox.take("j") is None
    assert inbox.settle_until("j", 5.0) == 5.0 and inbox.settle_until("j", 9.0) == 5.0, "the first deadline holds"
    inbox.drop("j")
    assert len(inbox) == 0
