"""Leader election (``pidispatch/election/leader.py``) against the real apiserver's Lease: one holder, a standby that
takes over when the holder stops renewing (judged by its own clock) or releases, and no two holders when
replicas race. Each replica's clock is a counter the test moves: what is judged is the algorithm and the
apiserver's optimistic concurrency, not the speed of this machine."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pidispatch.election.leader import LeaderElector, LeaseConfig
from pidispatch.kubeapi import Api

LEASE = "pi-dispatch-leader"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def admin(cluster: Any) -> Api:
    return Api(cluster.server, ca_file=str(cluster.ca_file), cert_file=str(cluster.pki / "admin.crt"),
               key_file=str(cluster.pki / "admin.key"), retries=0)


def replica(cluster: Any, namespace: str, identity: str, clock: Clock | None = None) -> LeaderElector:
    config = LeaseConfig(namespace=namespace, name=LEASE, identity=identity, lease_seconds=15,
                         renew_deadline_seconds=10, retry_seconds=2)
    return LeaderElector(admin(cluster), config, monotonic=clock or Clock())


def lease(cluster: Any, namespace: str) -> dict[str, Any]:
    return admin(cluster).get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}")


def test_one_holder_and_a_standby_that_waits_out_the_lease_by_its_own_clock(cluster: Any, namespace: str) -> None:
    a_clock, b_clock = Clock(), Clock()
    a, b = replica(cluster, namespace, "op-a", a_clock), replica(cluster, namespace, "op-b", b_clock)
    assert a.step() is True, "no Lease yet: the first replica creates it and leads"
    assert b.step() is False
    for _ in range(10):  # the holder renews; however long that goes on, the standby stays a standby
        a_clock.now += 2
        b_clock.now += 14
        assert a.step() is True and b.step() is False
    spec = lease(cluster, namespace)["spec"]
    assert spec["holderIdentity"] == "op-a" and spec["leaseTransitions"] == 0 and spec["leaseDurationSeconds"] == 15
    # The holder stops renewing (killed, its node lost): the record stands still.
    b_clock.now += 14
    assert b.step() is False, "14 s of no change by the standby's clock: the lease may still be live"
    b_clock.now += 1
    assert b.step() is True, "15 s: the standby takes over"
    spec = lease(cluster, namespace)["spec"]
    assert spec["holderIdentity"] == "op-b" and spec["leaseTransitions"] == 1
    a_clock.now += 2
    assert a.step() is False, "the old holder sees another's name and stands by"


def test_a_skewed_wall_clock_cannot_steal_a_live_lease(cluster: Any, namespace: str) -> None:
    """renewTime is written for people; the standby never compares it with its own time."""
    a = replica(cluster, namespace, "op-a")
    b = LeaderElector(admin(cluster), LeaseConfig(namespace=namespace, name=LEASE, identity="op-b"),
                      monotonic=Clock(), wall=lambda: "2099-01-01T00:00:00.000000Z")
    assert a.step() is True
    assert b.step() is False
    a.api.patch(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}",
                {"spec": {"renewTime": "2000-01-01T00:00:00.000000Z"}})  # a holder whose clock is 26 years behind
    assert b.step() is False, "an old renewTime is no expiry: the record changed just now, by b's clock"


def test_a_released_lease_is_taken_at_once(cluster: Any, namespace: str) -> None:
    a, b = replica(cluster, namespace, "op-a"), replica(cluster, namespace, "op-b")
    assert a.step() is True and b.step() is False
    a.release()
    spec = lease(cluster, namespace)["spec"]
    assert "holderIdentity" not in spec and spec["leaseDurationSeconds"] == 1
    assert b.step() is True, "a rollout or a drain hands over without waiting out the lease"
    assert a.leading is False


def _attempt(e: LeaderElector, start: threading.Barrier, won: list[str]) -> None:
    start.wait()
    if e.step():
        won.append(e.config.identity)


def test_racing_replicas_elect_exactly_one(cluster: Any, namespace: str) -> None:
    for round_ in range(3):
        electors = [replica(cluster, namespace, f"op-{round_}-{i}") for i in range(6)]
        if round_:
            for e in electors:  # each has seen the current record; then all find it expired at once
                e.step()
                e._monotonic.now += 15  # type: ignore[attr-defined]
        start = threading.Barrier(len(electors))
        won: list[str] = []
        threads = [threading.Thread(target=_attempt, args=(e, start, won)) for e in electors]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(won) == 1, f"round {round_}: {won} all believe they lead"
        assert lease(cluster, namespace)["spec"]["holderIdentity"] == won[0]


def test_a_holder_that_cannot_renew_stops_leading_at_the_deadline(cluster: Any, namespace: str) -> None:
    clock = Clock()
    a = replica(cluster, namespace, "op-a", clock)
    assert a.step() is True
    a.api = Api("https://127.0.0.1:1", retries=0, timeout=1)  # the apiserver unreachable from this replica
    clock.now += 9.9
    assert a.step() is True, "within the renew deadline a failed renewal is only a failed attempt"
    clock.now += 0.1
    assert a.step() is False, "at 10 s it stops: 5 s before any standby may take over"


def test_holds_says_no_at_the_renew_deadline_without_asking_the_apiserver(cluster: Any, namespace: str) -> None:
    """The fence's guard: a holder woken from a pause must learn at once, before its elector runs again."""
    clock = Clock()
    a = replica(cluster, namespace, "op-a", clock)
    assert a.holds() is False, "a replica that never led may not act"
    assert a.step() is True and a.holds() is True
    a.api = Api("https://127.0.0.1:1", retries=0, timeout=1)  # any call would fail: holds() makes none
    clock.now += 9.9
    assert a.holds() is True
    clock.now += 0.1
    assert a.holds() is False, "10 s after the last renewal: 5 s before a standby may take over, it stops"
    assert a.leading is True, "the elector itself has not run again: only the fence knows"


def test_run_starts_on_acquiring_and_releases_on_stop(cluster: Any, namespace: str) -> None:
    a = replica(cluster, namespace, "op-a")
    a.config = LeaseConfig(namespace=namespace, name=LEASE, identity="op-a", lease_seconds=3,
                           renew_deadline_seconds=2, retry_seconds=0.2)
    started, stop = threading.Event(), threading.Event()
    stopped: list[bool] = []
    thread = threading.Thread(target=a.run, args=(started.set, lambda: stopped.append(True), stop))
    thread.start()
    assert started.wait(30), "the only replica leads"
    stop.set()
    thread.join(30)
    assert not thread.is_alive() and stopped == [], "a planned stop is not a lost lease"
    assert "holderIdentity" not in lease(cluster, namespace)["spec"], "released on the way out"


@pytest.mark.parametrize(("retry", "deadline", "duration"), [(2, 10, 10), (10, 10, 15), (0, 1, 2)])
def test_a_lease_whose_holder_could_outlive_it_is_refused(retry: float, deadline: float, duration: float) -> None:
    with pytest.raises(ValueError, match="retry < renew deadline < lease duration"):
        LeaseConfig(namespace="ns", name=LEASE, identity="x", lease_seconds=duration,
                    renew_deadline_seconds=deadline, retry_seconds=retry)


# -- the operator's handlers follow the Lease (handlers/leadership.py, handlers/register.py) ------------------------

class Recorder:
    """Stands in for the Dispatcher: records that it started and every Job event handed to it, from the
    operator's own watch (``handlers/jobwatch.py``). The watch is of ConfigMaps here, standing in for the
    Jobs (the same list+watch on any collection), so this test needs no CRD."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.started = threading.Event()
        self.events: list[tuple[str | None, str]] = []
        self.api = api
        self.cluster = self
        self.ns = namespace

    def crd(self, plural: str) -> str:
        return f"/api/v1/namespaces/{self.ns}/configmaps"

    def start(self) -> None:
        self.started.set()

    def stop(self) -> None:
        pass

    def on_job(self, event_type: str | None, body: dict[str, Any]) -> None:
        self.events.append((event_type, body["metadata"]["name"]))

    def job_turn(self, name: str) -> None:  # nothing is handed to a Job here
        pass

    def attach(self, keys: Any) -> None:  # the queue the dispatcher hands its work back through
        pass


def operator_replica(cluster: Any, namespace: str, identity: str) -> tuple[Any, Recorder, Any]:
    import kopf

    from pidispatch.handlers.leadership import Leadership
    from pidispatch.handlers.register import register

    elector = LeaderElector(admin(cluster), LeaseConfig(namespace=namespace, name=LEASE, identity=identity,
                                                        lease_seconds=3, renew_deadline_seconds=2,
                                                        retry_seconds=0.2))
    lost: list[bool] = []
    leadership = Leadership(elector, on_lost=lambda: lost.append(True))
    registry, dispatcher = kopf.OperatorRegistry(), Recorder(admin(cluster), namespace)
    register(registry, dispatcher, None, leadership)  # type: ignore[arg-type]
    handlers = {h.fn.__name__: h.fn for h in [*registry._activities.get_all_handlers(),
                                              *registry._watching.get_all_handlers()]}
    return handlers, dispatcher, leadership


def test_only_the_replica_holding_the_lease_watches_the_jobs_and_the_standby_takes_over_on_release(
        cluster: Any, namespace: str) -> None:
    import kopf

    from testkit.wait import wait_until

    kube = admin(cluster)
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    kube.create(configmaps, {"metadata": {"name": "fix-1"}})
    a_handlers, a, a_lead = operator_replica(cluster, namespace, "op-a")
    a_handlers["startup"](settings=kopf.OperatorSettings())
    assert a.started.wait(30) and a_lead.wait(30), "the first replica leads and starts its dispatcher"
    b_handlers, b, b_lead = operator_replica(cluster, namespace, "op-b")
    b_handlers["startup"](settings=kopf.OperatorSettings())
    wait_until("the leader's watch lists fix-1", lambda: (None, "fix-1") in a.events, timeout=30)
    kube.create(configmaps, {"metadata": {"name": "fix-2"}})
    wait_until("the leader's watch sees fix-2 created", lambda: ("ADDED", "fix-2") in a.events, timeout=30)
    assert not b.started.wait(1.5) and not b_lead.leading, "the standby does not start while the lease is held"
    assert b.events == [], "the standby watches no Jobs: nothing is done twice"
    a_handlers["cleanup"]()  # a rollout or a drain: the leader stops and releases the Lease
    assert b.started.wait(10) and b_lead.wait(10), "the standby takes over at once, not after a lease"
    wait_until("the new leader lists both", lambda: {(None, "fix-1"), (None, "fix-2")} <= set(b.events), timeout=30)
    seen_by_a = list(a.events)
    kube.create(configmaps, {"metadata": {"name": "fix-3"}})
    wait_until("the new leader sees fix-3 created", lambda: ("ADDED", "fix-3") in b.events, timeout=30)
    assert a.events == seen_by_a, "the old leader's watch stopped with its leadership"
    b_handlers["cleanup"]()
