"""Two operator replicas installed by the chart; the leader killed hard in the middle of a burst of 50 jobs.

The issue's proof (33, item 4): every Job converges (50 terminal, one Pod each, none lost or duplicated),
promotions equal successes, and the takeover is measured.

The burst runs on ten keys, five jobs each. On a key the jobs follow one another (the next is delivered
when the one before has ended), while the ten keys run side by side and queue for the four slots: so each
promotion is attributable to its own Job, and the store after each job says exactly what it did. A Job
promoted its transcript exactly once when the key afterwards holds one user turn more than the transcript
the job resumed from (one turn in all after a cold start), the store changed, and the resume chain grew by
one (or restarted at 0); a promotion done twice would count twice, one lost would leave the store as it was.

The kill: the leader's process is frozen (SIGSTOP, so its SIGTERM handler cannot release the Lease), its Pod
deleted with grace 0 (the test kubelet then SIGKILLs it; the Deployment makes a new standby) and its process
group SIGKILLed. The Lease still names it: the standby waits the lease out by its own clock, takes over,
runs the journal recovery once and every Job converges. Pods are counted by a watch over the whole run,
so a Pod created and deleted in between would count too. The takeover time (kill → the Lease names the
standby) is printed and reported in docs/benchmarks.md, never asserted.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.framework.cluster import Cluster
from e2e.framework.kube import Kube
from e2e.framework.release import TERMINAL, Release, base_values, installed, merge, received_digest
from pidispatch.contract import JOB_LABEL
from pidispatch.store.keys import issue_key
from testkit.wait import wait_until

pytestmark = pytest.mark.e2e

KEYS, PER_KEY = 10, 5
LEASE = "pi-dispatch"  # the chart names the Lease after the release (PI_DISPATCH_LEASE)
KILL_AFTER = 12  # terminal Jobs before the leader is killed: the burst is in full flight by then


class PodRecorder:
    """Every job Pod the namespace ever had, by Job label: a LIST, then a watch from its resourceVersion."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.uids: dict[str, set[str]] = defaultdict(set)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.failure: BaseException | None = None

    def __enter__(self) -> PodRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _note(self, pod: dict[str, Any]) -> None:
        job = (pod["metadata"].get("labels") or {}).get(JOB_LABEL)
        if job:
            self.uids[job].add(pod["metadata"]["uid"])

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.ns}/pods"
        try:
            while not self._stop.is_set():
                listed = self.kube.request("GET", path, params={"labelSelector": JOB_LABEL})
                for pod in listed.get("items") or []:
                    self._note(pod)
                version = listed["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    for event in self.kube.watch(path, resource_version=version, timeout_seconds=5,
                                                 labelSelector=JOB_LABEL):
                        if event["type"] == "ERROR":  # 410 Gone: LIST again
                            version = None
                            break
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._note(event["object"])
                    if version is None:
                        break
        except BaseException as exc:  # surfaced by the test: a recorder that stopped would miss Pods
            self.failure = exc


def operator_processes(pod: str) -> list[int]:
    """The pids of the operator container of ``pod``, run by the test kubelet as local processes."""
    needle = f"PI_DISPATCH_POD_NAME={pod}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                env = (entry / "environ").read_bytes()
            except OSError:
                continue
            if needle in env.split(b"\0"):
                found.append(int(entry.name))
    return found


def lease_holder(kube: Kube, ns: str) -> str | None:
    lease = kube.get_or_none(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{LEASE}")
    return ((lease or {}).get("spec") or {}).get("holderIdentity")


@pytest.fixture
def standby(multinode_cluster: Cluster) -> Iterator[Release]:
    # On the three-node cluster with the real scheduler: the store is ReadWriteOnce, so the standby is
    # co-scheduled with the leader (and the replacement Pod with the standby). The test kubelets run both
    # replicas as local processes of this machine: no metrics or health port, or they would clash.
    values = merge(base_values(), {"replicas": 2, "sessions": {"enabled": True}, "metrics": {"port": 0},
                                   "health": {"port": 0}})
    with installed(multinode_cluster, multinode_cluster.kube(), "leader", values) as r:
        def both_running() -> bool:
            pods = [p for p in r.operator_pods() if not p["metadata"].get("deletionTimestamp")]
            return len(pods) == 2 and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

        wait_until("two operator replicas Running", both_running, timeout=90)
        nodes = {p["spec"]["nodeName"] for p in r.operator_pods()}
        assert len(nodes) == 1, f"the standby of a ReadWriteOnce store is not on the leader's node: {nodes}"
        yield r


def store_state(r: Release, key: str) -> tuple[str | None, int, str, str | None]:
    """(digest, user turns, resume chain, venue) of the key's stored conversation."""
    d = r.key_dir(key)
    f = d / "current.jsonl"
    data = f.read_bytes() if f.exists() else b""
    chain = (d / "resume-chain").read_text().strip() if (d / "resume-chain").exists() else "0"
    venue = (d / "venue").read_text().strip() if (d / "venue").exists() else None
    return (hashlib.sha256(data).hexdigest() if data else None, data.count(b'"role":"user"'), chain, venue)


def test_the_leader_killed_in_a_burst_every_job_converges_once(standby: Release, multinode_cluster: Cluster) -> None:
    r = standby
    leader = lease_holder(r.kube, r.ns)
    names = {p["metadata"]["name"] for p in r.operator_pods()}
    assert leader in names, f"the Lease names {leader!r}, not one of the replicas {names}"
    keys = [issue_key("github", "acme/widgets", 4100 + k) for k in range(KEYS)]
    order: dict[str, list[str]] = {key: [] for key in keys}  # each key's jobs, delivered one after another
    after: dict[str, tuple[Any, ...]] = {}  # the key's store once the job had ended
    before: dict[str, tuple[Any, ...]] = {}  # ... and when the job was delivered
    killed_at: float | None = None
    took_over: list[float] = []

    def deliver(k: int) -> None:
        key = keys[k]
        name = f"burst-{k}-{len(order[key])}"
        before[name] = store_state(r, key)
        order[key].append(name)
        r.job(name, issue=4100 + k, comment="@pi sleep=1")

    def kill_leader() -> None:
        nonlocal killed_at
        pids = operator_processes(leader)
        assert pids, f"no process of the leader's Pod {leader} on the test kubelet"
        groups = {os.getpgid(pid) for pid in pids}  # the kubelet starts each container in a session of its own
        assert os.getpgrp() not in groups, "the leader's processes share this test's process group"
        for group in groups:
            os.killpg(group, signal.SIGSTOP)  # frozen first: its SIGTERM handler must not release the Lease
        killed_at = time.monotonic()
        r.kube.delete(f"/api/v1/namespaces/{r.ns}/pods/{leader}", {"gracePeriodSeconds": 0})
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass  # the kubelet was first

        def watch_lease() -> None:
            kube = multinode_cluster.kube()
            while time.monotonic() - (killed_at or 0) < 120:
                holder = lease_holder(kube, r.ns)
                if holder and holder != leader:
                    took_over.append(time.monotonic())
                    return
                time.sleep(0.05)  # how often to look while timing, not a wait for a condition

        threading.Thread(target=watch_lease, daemon=True).start()

    with PodRecorder(multinode_cluster.kube(), r.ns) as pods:
        for k in range(KEYS):
            deliver(k)

        def drive() -> bool:
            jobs = {j["metadata"]["name"]: j for j in r.kube.list(r.path("jobs"))}
            terminal = {n for n, j in jobs.items() if (j.get("status") or {}).get("phase") in TERMINAL}
            if killed_at is None and len(terminal) >= KILL_AFTER:
                kill_leader()
            for k, key in enumerate(keys):
                last = order[key][-1]
                if last in terminal and last not in after:
                    after[last] = store_state(r, key)
                    if len(order[key]) < PER_KEY:
                        deliver(k)
            return len(after) == KEYS * PER_KEY

        try:
            wait_until(f"{KEYS * PER_KEY} jobs delivered and ended", drive, timeout=600, interval=0.2)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\noperator log:\n{r.operator_log()[-6000:]}") from None
        wait_until("the takeover timed", lambda: took_over, timeout=30)
    assert pods.failure is None, f"the Pod recorder stopped: {pods.failure!r}"
    assert killed_at is not None

    jobs = {j["metadata"]["name"]: j for j in r.kube.list(r.path("jobs"))}
    assert len(jobs) == KEYS * PER_KEY, "a Job was lost or one appeared twice"
    phases = {n: j["status"]["phase"] for n, j in jobs.items()}
    assert set(phases.values()) == {"Succeeded"}, {n: p for n, p in phases.items() if p != "Succeeded"}

    from pidispatch.manifests.pod import job_label

    pod_counts = {n: len(pods.uids.get(job_label(n), ())) for n in jobs}
    assert all(c == 1 for c in pod_counts.values()), {n: c for n, c in pod_counts.items() if c != 1}

    promotions, interrupted = 0, []
    for key in keys:
        for name in order[key]:
            job = jobs[name]
            session = job["status"]["session"]
            digest, turns, chain, _venue = before[name]
            resumed = session["resumed"] is True
            if resumed:
                assert received_digest(r, job) == digest, f"{name} resumed something else than the stored transcript"
            now_digest, now_turns, now_chain, now_venue = after[name]
            if now_digest != digest:
                promotions += 1
            assert now_turns == (turns if resumed else 0) + 1, \
                f"{name}: the store does not hold its transcript ({now_turns} turns after {turns})"
            expected_chain = str(int(chain) + 1) if resumed else "0"
            if now_venue == "(pending)":  # its promotion was cut off after the swap: counted once, stamps partial
                interrupted.append(name)
                assert int(now_chain) <= int(expected_chain), f"{name} promoted more than once"
            else:
                assert now_chain == expected_chain, f"{name} promoted more or less than once (chain {now_chain})"
        key_dir = r.key_dir(key)
        assert not (key_dir / "lock").exists(), f"a lock was left on {key}"
        assert not list(key_dir.glob("*.incoming")), f"a temp or lock candidate was left on {key}"
    with_session = sum(1 for j in jobs.values() if j["status"]["phase"] == "Succeeded" and j["status"].get("session"))
    assert promotions == with_session == KEYS * PER_KEY

    resumed_count = sum(1 for j in jobs.values() if j["status"]["session"]["resumed"])
    takeover = took_over[0] - killed_at
    print(f"\nleader {leader} killed after {KILL_AFTER} of {KEYS * PER_KEY} jobs ended; the standby led "
          f"{takeover:.1f} s later (lease 15 s); {resumed_count} resumed, {promotions} promotions, "
          f"{len(interrupted)} promotion(s) cut off after the swap: {interrupted}")
