"""The controller's queue, driven through its handlers in the orders kopf can deliver events.

An in-memory apiserver stands in for the cluster (``testkit.memoryapi.MemoryApi``): it keeps objects by
path, assigns uids and resourceVersions, honours a status patch's resourceVersion precondition, checks
label values as the real apiserver does, and can be told to refuse a Pod create. The e2e tests
(``e2e/test_operator_queue.py``) check the same fixes on the real control plane; these pin the exact
event orders, which a real cluster rarely produces on demand.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pidispatch.jobflow.dispatcher import Dispatcher
from pidispatch.kubeapi import ApiError
from pidispatch.manifests.pod import JOB_LABEL, job_label
from testkit.jobflow import Clock, condition, controller, new_job, phase, pump
from testkit.memoryapi import JOBS, PODS, MemoryApi


def end_pod(api: MemoryApi, c: Dispatcher, pod: dict[str, Any], outcome: str = "Succeeded") -> None:
    """The kubelet's part: the Pod ends, and its watch event reaches the controller."""
    path = f"{PODS}/{pod['metadata']['name']}"
    api.patch(path + "/status", {"status": {"phase": outcome}})
    c.on_pod(api.get(path))


def refuse_pods_of(job: str, status: int, times: int | None = None) -> Callable[[str, dict[str, Any]], None]:
    """An ``on_create`` that answers ``status`` to the Pod creates of ``job`` (``times`` times, or always)."""
    left = itertools.count() if times is None else iter(range(times))

    def refuse(path: str, body: dict[str, Any]) -> None:
        owners = [ref["name"] for ref in body["metadata"].get("ownerReferences") or []]
        if path == PODS and owners == [job] and next(left, None) is not None:
            raise ApiError(status, "POST", path, "pods \"x\" is forbidden: exceeded quota: no-pods")
    return refuse


# ---- 1. one bad Job must not block the queue ----------------------------------------------------------

LONG = "delivery-" + "x" * 61  # 70 characters: a legal Job name, too long for a label value


def test_a_job_with_a_long_name_runs_and_its_pod_is_found_by_its_label(api: MemoryApi, clock: Clock,
                                                                       tmp_path: Path) -> None:
    c = controller(api, clock, tmp_path)
    c.on_job("ADDED", new_job(api, LONG))
    pump(c)
    assert phase(api, LONG) == "Running"
    [pod] = api.pods()
    assert pod["metadata"]["labels"][JOB_LABEL] == job_label(LONG)
    end_pod(api, c, pod)
    assert phase(api, LONG) == "Succeeded"


@pytest.mark.parametrize("status", [422, 403, 400], ids=["invalid", "forbidden-by-quota", "bad-request"])
def test_a_pod_create_refused_for_good_fails_the_job_and_the_next_one_runs(
        api: MemoryApi, clock: Clock, tmp_path: Path, status: int) -> None:
    c = controller(api, clock, tmp_path)
    api.on_create = refuse_pods_of("refused", status)
    c.on_job("ADDED", new_job(api, "refused", issue=1))
    c.on_job("ADDED", new_job(api, "next", issue=2))
    pump(c)
    assert phase(api, "refused") == "Failed"
    started = condition(api, "refused", "Started")
    assert (started["status"], started["reason"]) == ("False", "PodRefused")
    assert f"({status}: " in started["message"] and "exceeded quota" in started["message"]
    assert phase(api, "next") == "Running"
    assert [p["metadata"]["ownerReferences"][0]["name"] for p in api.pods()] == ["next"]
    assert (c.slots.running, c.slots.queued) == (1, 0)
    assert not (tmp_path / api.job("refused")["metadata"]["uid"]).exists(), "its staging directory is left"


@pytest.mark.parametrize("status", [500, 503, 429, 0], ids=["apiserver-500", "unavailable", "throttled", "no-answer"])
def test_a_failing_start_backs_off_without_holding_the_queue(api: MemoryApi, clock: Clock, tmp_path: Path,
                                                             status: int) -> None:
    c = controller(api, clock, tmp_path)
    api.on_create = refuse_pods_of("flaky", status, times=2)
    for i, name in enumerate(["flaky", "second", "third"]):
        c.on_job("ADDED", new_job(api, name, issue=i + 1))
    pump(c)
    assert (phase(api, "flaky"), phase(api, "second"), phase(api, "third")) == (None, "Running", None)
    assert condition(api, "flaky", "Started")["reason"] == "StartRetrying"
    retry_writes = len([w for w in api.writes if w == ("PATCH", f"{JOBS}/flaky/status")])
    assert retry_writes == 1, "the retry is written on the Job once, not per attempt"

    # second ends; flaky's 1 s back-off has not ended, so third (ready) gets the slot
    end_pod(api, c, api.pods()[0])
    pump(c)
    assert (phase(api, "flaky"), phase(api, "third")) == (None, "Running")

    # third ends; flaky's back-off (1 s, then 2 s after its second failure) ends; it starts, FIFO intact
    end_pod(api, c, next(p for p in api.pods() if p["metadata"]["ownerReferences"][0]["name"] == "third"))
    clock.now += 1
    pump(c)  # second failure (times=2): deferred 2 s
    assert phase(api, "flaky") is None
    clock.now += 2
    pump(c)
    assert phase(api, "flaky") == "Running"
    assert condition(api, "flaky", "Started")["reason"] == "PodCreated"
    assert len([w for w in api.writes if w == ("PATCH", f"{JOBS}/flaky/status")]) == 2  # StartRetrying, Running


def test_a_start_failing_past_the_cap_leaves_the_line_until_the_resync_puts_it_back(
        api: MemoryApi, clock: Clock, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The pump's retries are capped (reconcile/backoff.py): a start that keeps failing (an outage that lasts,
    or a bug) no longer spins on one Job; the resync lines it up again with a fresh count."""
    from pidispatch import metrics
    from pidispatch.jobflow.queuepolicy import START_ATTEMPTS

    c = controller(api, clock, tmp_path)
    api.on_create = refuse_pods_of("doomed", 500)
    c.on_job("ADDED", new_job(api, "doomed"))
    dropped = metrics.WORKQUEUE_DROPPED.labels("JobStart")._value.get()
    with caplog.at_level(logging.WARNING, logger="pidispatch.operator"):
        for _ in range(START_ATTEMPTS + 1):
            clock.now += 60
            pump(c)
    assert (c.slots.running, c.slots.queued) == (0, 0), "out of line, its slot free"
    assert metrics.WORKQUEUE_DROPPED.labels("JobStart")._value.get() == dropped + 1
    assert any(r.levelno == logging.ERROR and f"failed {START_ATTEMPTS + 1} times in a row" in r.getMessage()
               for r in caplog.records)
    assert condition(api, "doomed", "Started")["reason"] == "StartRetrying"
    api.on_create = lambda path, body: None
    c.resync()
    pump(c)
    assert phase(api, "doomed") == "Running"


def test_the_happy_path_writes_nothing_more_than_before(api: MemoryApi, clock: Clock, tmp_path: Path) -> None:
    """Issue 7's budget: a job that starts at once costs the Pod create, Running and its end (no retry write)."""
    c = controller(api, clock, tmp_path)
    job = new_job(api, "plain")
    before = len(api.writes)
    c.on_job("ADDED", job)  # a free slot: started in the handler's own thread
    pump(c)
    end_pod(api, c, api.pods()[0])
    ours = [w for w in api.writes[before:] if not w[1].endswith(f"/pods/{api.pods()[0]['metadata']['name']}/status")]
    assert ours == [("POST", f"{PODS}/{api.pods()[0]['metadata']['name']}"),
                    ("PATCH", f"{JOBS}/plain/status"), ("PATCH", f"{JOBS}/plain/status")]


def test_a_job_with_a_free_slot_gets_its_pod_in_the_handlers_thread_and_one_without_waits(
        api: MemoryApi, clock: Clock, tmp_path: Path) -> None:
    """Issue 18's latency: the watch event's own call creates the Pod (no hand-off to the pump thread, whose
    loop is never run here); a Job that finds every slot taken only waits, and the pump starts it later."""
    c = controller(api, clock, tmp_path)
    c.on_job("ADDED", new_job(api, "first", issue=1))
    assert [p["metadata"]["name"] for p in api.pods()] == ["pij-first"]
    assert phase(api, "first") == "Running"
    c.on_job("ADDED", new_job(api, "second", issue=2))
    assert [p["metadata"]["name"] for p in api.pods()] == ["pij-first"]
    end_pod(api, c, api.pods()[0])
    pump(c)
    assert sorted(p["metadata"]["name"] for p in api.pods()) == ["pij-first", "pij-second"]


# ---- 2. a Job deleted and re-created under its name ---------------------------------------------------

def recreate(api: MemoryApi, name: str, issue: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Delete Job ``name`` (its Pods collected with it) and create a new one: (old body, new body)."""
    old = api.job(name)
    api.delete(f"{JOBS}/{name}")
    for pod in api.pods():
        if pod["metadata"]["ownerReferences"][0]["uid"] == old["metadata"]["uid"]:
            api.delete(f"{PODS}/{pod['metadata']['name']}")
    return old, new_job(api, name, issue=issue)


@pytest.fixture
def ended_job(api: MemoryApi, clock: Clock, tmp_path: Path) -> Iterator[Dispatcher]:
    """A controller that ran Job ``reborn`` to Succeeded (its terminal status seen by the watch)."""
    c = controller(api, clock, tmp_path)
    c.on_job("ADDED", new_job(api, "reborn", issue=1))
    pump(c)
    end_pod(api, c, api.pods()[0])
    c.on_job("MODIFIED", api.job("reborn"))
    assert phase(api, "reborn") == "Succeeded"
    yield c


def test_a_recreated_job_is_started_before_the_old_ones_deleted_arrives(api: MemoryApi, ended_job: Dispatcher
                                                                        ) -> None:
    c = ended_job
    old, new = recreate(api, "reborn", issue=2)
    c.on_job("ADDED", new)  # the new uid's ADDED first: kopf orders events per uid only
    pump(c)
    assert phase(api, "reborn") == "Running", "the old Job's terminal phase made the new Job's ADDED be ignored"
    c.on_job("DELETED", old)
    assert c.slots.running == 1 and c.table.phase("reborn") == "Running"


def test_a_late_deleted_of_the_old_job_does_not_free_the_new_jobs_slot(api: MemoryApi, ended_job: Dispatcher
                                                                       ) -> None:
    c = ended_job
    old, _ = recreate(api, "reborn", issue=2)
    c.resync()  # the new Job found by the list (its watch event not handled yet)
    pump(c)
    assert phase(api, "reborn") == "Running"
    c.on_job("ADDED", new_job(api, "behind", issue=3))  # capacity 1: waits for reborn
    c.on_job("DELETED", old)  # the old Job's DELETED, late
    pump(c)
    assert phase(api, "behind") is None, "the late DELETED freed the slot the new Job's Pod holds"
    assert (c.slots.running, c.slots.queued) == (1, 1)
    c.on_job("MODIFIED", old)  # any later event of the old uid is ignored too
    assert c.table.phase("reborn") == "Running"
    end_pod(api, c, api.pods()[0])
    pump(c)
    assert (phase(api, "reborn"), phase(api, "behind")) == ("Succeeded", "Running")


# ---- 3. the staging sweep logs what happened --------------------------------------------------------

@pytest.fixture
def undeletable(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """An orphaned staging directory (no Job has its uid, older than the grace) holding a file that cannot
    be removed: immutable as root (``chattr +i``), in a read-only directory otherwise."""
    staging = tmp_path / "staging"
    orphan = staging / "uid-orphan"
    (orphan / "session").mkdir(parents=True)
    stuck = orphan / "session" / "current.jsonl"
    stuck.write_text("{}")
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not supported here, and root removes anything else")
        undo = ["chattr", "-i", str(stuck)]
    else:
        os.chmod(orphan / "session", 0o500)
        undo = ["chmod", "0700", str(orphan / "session")]
    old = 1_000_000_000
    os.utime(orphan, (old, old))
    try:
        yield staging, orphan
    finally:
        subprocess.run(undo, check=True)


def test_the_sweep_says_so_when_a_staging_directory_could_not_be_removed(
        api: MemoryApi, clock: Clock, undeletable: tuple[Path, Path], caplog: pytest.LogCaptureFixture) -> None:
    staging, orphan = undeletable
    c = controller(api, clock, staging)
    with caplog.at_level(logging.INFO, logger="pidispatch.events"):
        c.sweep()
    events = [r.fields for r in caplog.records if hasattr(r, "fields")]
    assert orphan.exists()
    assert [e["event"] for e in events if e.get("job") == "uid-orphan"] == ["staging_sweep_failed"]
    failed = next(e for e in events if e["event"] == "staging_sweep_failed")
    assert "current.jsonl" in failed["first"] and failed["errors"] >= 1


def test_the_sweep_removes_an_orphaned_staging_directory_and_says_so(
        api: MemoryApi, clock: Clock, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    orphan = tmp_path / "uid-gone" / "session"
    orphan.mkdir(parents=True)
    os.utime(orphan.parent, (1_000_000_000, 1_000_000_000))
    c = controller(api, clock, tmp_path)
    with caplog.at_level(logging.INFO, logger="pidispatch.events"):
        c.sweep()
    assert not orphan.parent.exists()
    assert [r.fields["event"] for r in caplog.records if getattr(r, "fields", {}).get("job") == "uid-gone"] == [
        "staging_swept"]


def test_the_resync_ends_a_running_job_whose_pod_vanished_and_frees_its_slot(api: MemoryApi, clock: Clock,
                                                                              tmp_path: Path) -> None:
    """A Pod deleted while no operator watched (``helm uninstall``'s hook): the resync finds no Pod at all."""
    c = controller(api, clock, tmp_path)
    c.on_job("ADDED", new_job(api, "held", issue=1))
    pump(c)
    assert phase(api, "held") == "Running"
    api.delete(f"{PODS}/{api.pods()[0]['metadata']['name']}")  # its DELETED is not forwarded (handlers/)
    c.resync()
    assert phase(api, "held") == "Failed", "a vanished Pod's Job stays Running for ever"
    assert (c.slots.running, c.slots.queued) == (0, 0)
