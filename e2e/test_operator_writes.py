"""What the operator writes on the way to a Pod, on the local control plane: the short-wait ``Queued``
mark and a queued Job's three status writes, no Event for a routine promotion, one SessionKey status write
per job, and a Job re-created under a queued Job's name.

The operator keeps the watch's body of a waiting Job and starts it from that body (no GET); these tests
check the cases where that body could mislead it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import Release, base_values, installed, merge
from pidispatch.store.keys import issue_key
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def one_slot(cluster: Cluster, kube: Kube, kubelet) -> Iterator[Release]:
    # base_values() refreshes SessionKeys every 5 s, so a job of 12 s sees at least two refreshes.
    values = merge(base_values(), {"sessions": {"enabled": True}, "maxConcurrentJobs": 1})
    with installed(cluster, kube, "writes", values) as r:
        yield r


class Recorder(threading.Thread):
    """Every watch event of one object (by name) from now on, as ``(type, phase or status)``."""

    def __init__(self, r: Release, plural: str, name: str) -> None:
        super().__init__(daemon=True)
        self.kube, self.path, self.name = r.kube, r.path(plural), name
        self.rv = self.kube.get(self.path)["metadata"]["resourceVersion"]
        self.events: list[tuple[str, dict]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            for ev in self.kube.watch(self.path, resource_version=self.rv, timeout_seconds=5):
                obj = ev["object"]
                self.rv = obj["metadata"].get("resourceVersion", self.rv)
                if ev["type"] != "BOOKMARK" and obj["metadata"].get("name") == self.name:
                    self.events.append((ev["type"], obj.get("status") or {}))

    def __enter__(self) -> Recorder:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.join(timeout=20)


def test_a_job_that_waits_is_marked_queued_then_runs(one_slot: Release) -> None:
    r = one_slot
    r.job("long-first", issue=101, comment="@pi sleep=8")
    wait_until("long-first Running", lambda: (r.get("jobs", "long-first").get("status") or {}).get("phase")
               == "Running", timeout=60)
    with Recorder(r, "jobs", "waits") as seen:
        r.job("waits", issue=102)
        queued = wait_until("waits Queued", lambda: (lambda s: s if s.get("phase") == "Queued" else None)(
            r.get("jobs", "waits").get("status") or {}), timeout=60)
        assert queued["queuedAt"]
        assert r.condition(r.get("jobs", "waits"), "Started")["reason"] == "WaitingForSlot"
        assert r.wait_job("waits", timeout=120)["status"]["phase"] == "Succeeded"
    phases = [status.get("phase") for kind, status in seen.events if kind == "MODIFIED"]
    # Three status writes in all (issue 18: a queued job costs at most 6 writes on a new key: these 3, its
    # Pod, its SessionKey and that SessionKey's status), whatever the resyncs and refreshes did meanwhile.
    assert phases == ["Queued", "Running", "Succeeded"], phases
    # A routine promotion posts no Event (the Completed condition says it); only what needs a person does.
    events = [e for e in r.kube.list(f"/api/v1/namespaces/{r.ns}/events")
              if e["involvedObject"].get("name") == "waits"]
    assert events == [], [(e["type"], e["reason"]) for e in events]
    assert r.wait_job("long-first")["status"]["phase"] == "Succeeded"


def test_a_new_key_gets_one_status_write_however_long_its_job(one_slot: Release) -> None:
    r = one_slot
    key = issue_key("github", "acme/widgets", 201)
    with Recorder(r, "sessionkeys", key) as seen:
        job = r.run("slow-new-key", issue=201, comment="@pi sleep=12", timeout=120)
        assert job["status"]["phase"] == "Succeeded"
        wait_until("the SessionKey's status", lambda: (r.sessionkey(key) or {}).get("status", {}).get("lastJob"),
                   timeout=30)
    writes = [status for kind, status in seen.events if kind == "MODIFIED"]
    # Created with the Pod (no status), then one status write at the job's end; the 5 s refreshes that
    # ran during the job left it alone.
    assert [kind for kind, _ in seen.events][:1] == ["ADDED"], seen.events
    assert len(writes) == 1, writes
    assert writes[0]["lastJob"] == "slow-new-key"
    assert writes[0]["bytes"]


def test_a_queued_job_deleted_and_recreated_under_its_name_runs_as_the_new_one(one_slot: Release) -> None:
    r = one_slot
    r.job("holder", issue=301, comment="@pi sleep=6")
    wait_until("holder Running", lambda: (r.get("jobs", "holder").get("status") or {}).get("phase") == "Running",
               timeout=60)
    old = r.job("reborn", issue=302)  # waits behind holder; the operator keeps this body
    r.kube.delete(r.path("jobs", "reborn"))
    wait_until("the first reborn gone", lambda: r.kube.get_or_none(r.path("jobs", "reborn")) is None, timeout=30)
    new = r.job("reborn", issue=303)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    job = r.wait_job("reborn", timeout=120)
    assert job["metadata"]["uid"] == new["metadata"]["uid"]
    assert job["status"]["phase"] == "Succeeded"
    pods = r.pods_of("reborn")
    assert [ref["uid"] for p in pods for ref in p["metadata"]["ownerReferences"]] == [new["metadata"]["uid"]]
    # The new Job's own key, not the deleted one's: its SessionKey exists, the old issue's never did.
    assert r.sessionkey(issue_key("github", "acme/widgets", 303)) is not None
    assert r.sessionkey(issue_key("github", "acme/widgets", 302)) is None
