"""The fence (``pidispatch/election/fence.py``): a leader paused past its lease writes nothing once the standby leads.

Two real processes on a real filesystem. Leader A promotes a Job on a key and is SIGSTOP'd holding the
key's lock (a frozen node). Its lease runs out; B takes it, runs a starting leader's journal recovery
(which releases A's lock: A's journal says ``started``, and A is deposed) and promotes another Job on the
same key. A is woken while B holds the lock. Without the fence A would go on from where it stood, write
the ``(pending)`` sentinel and swap its transcript in under B's lock; with it, A ends before its next write.
The lease here is a file both processes read (the fence's guard); ``LeaderElector.holds``, the guard the
operator installs, is proven against the real apiserver in ``e2e/test_leader.py``.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from pidispatch.election import fence
from pidispatch.kubeapi import Api
from pidispatch.record import PromotionResult
from pidispatch.settings import Settings
from pidispatch.store.journal import promote_once, release_interrupted
from pidispatch.store.promote import promote
from pidispatch.store.staging import HOST, HostRecord, JobDir
from testkit.store import KEY, MODEL, PI, SPAWN, Store, sample
from testkit.wait import wait_until

OLD = sample("s1_after_turn1.jsonl")
A_TURN = sample("s1_after_turn2.jsonl")
B_TURN = A_TURN + sample("s2_tool_call.jsonl").split(b"\n", 1)[1]
BASE = {"current.jsonl", "pi-version", "venue", "resume-chain", "context"}
CONTEXT = (1234, 200000)


def host() -> HostRecord:
    return HostRecord(key=KEY, forge="github", repository="acme/widgets", branch="pi/issue-7", venue="kubernetes",
                      pi_version=PI, model=MODEL, mounted=True, resume=True, reason="resumed", bytes=len(OLD))


def job_dir(staging: Path, uid: str, content: bytes) -> JobDir:
    staging.mkdir(parents=True, exist_ok=True)
    jd = JobDir(str(staging), uid)
    jd.prepare()
    jd.write(HOST, host().to_json())
    Path(jd.session, "current.jsonl").write_bytes(content)
    return jd


class StopAt:
    """Seams that SIGSTOP this process at ``step``: it freezes there until someone sends SIGCONT."""

    def __init__(self, step: str) -> None:
        self.step = step

    def at(self, step: str) -> None:
        if step == self.step:
            os.kill(os.getpid(), signal.SIGSTOP)


class HoldAt:
    """Seams that park this thread at ``step`` until ``go`` is set (``there`` says it arrived)."""

    def __init__(self, step: str) -> None:
        self.step, self.there, self.go = step, threading.Event(), threading.Event()

    def at(self, step: str) -> None:
        if step == self.step:
            self.there.set()
            assert self.go.wait(60)


def _leader_a(root: str, staging: str, lease: str) -> None:
    """Leader A's completion of job-a, with the fence the operator installs on taking the Lease."""
    fence.install(lambda: Path(lease).read_text() == "a")
    promote_once(Settings(sessions_dir=root), JobDir(staging, "job-a"), host(), CONTEXT, job="job-a",
                 seams=fence.Fenced(StopAt("locked")))


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def snapshot(key_dir: Path) -> tuple[Any, ...]:
    """What a write into the key directory would change: its names and the transcript's and venue's inodes."""
    st = os.lstat(key_dir / "current.jsonl")
    return (sorted(p.name for p in key_dir.iterdir() if not p.name.endswith(".incoming")), st.st_ino, st.st_size,
            (key_dir / "venue").read_text(), os.lstat(key_dir / "lock").st_ino)


def test_a_leader_woken_past_its_lease_writes_nothing_under_the_new_leader_s_lock(store: Store, tmp_path: Path,
                                                                                   events) -> None:
    settings = store.settings
    assert promote(settings, KEY, str(store.staged_job(OLD)), host_resume=False, pi_version=PI, model=MODEL).promoted
    staging, key_dir, lease = store.stage_root, store.key_dir(), tmp_path / "lease"
    lease.write_text("a")
    job_dir(staging, "job-a", A_TURN)
    jd_b = job_dir(staging, "job-b", B_TURN)

    a = SPAWN.Process(target=_leader_a, args=(str(store.root), str(staging), str(lease)))
    a.start()
    try:
        wait_until("leader A frozen holding the key's lock", lambda: a.pid is not None and stopped(a.pid),
                   timeout=60)
        assert (key_dir / "lock").exists()

        # A's lease runs out; B takes it and runs a starting leader's journal recovery: A's lock goes.
        lease.write_text("b")
        assert release_interrupted(settings, str(staging)) == 1
        assert not (key_dir / "lock").exists()

        held = HoldAt("locked")
        b_result: list[PromotionResult] = []
        b = threading.Thread(target=lambda: b_result.append(
            promote_once(settings, jd_b, host(), CONTEXT, job="job-b", seams=held)))
        b.start()
        assert held.there.wait(60), "B never took the key's lock"
        before = snapshot(key_dir)

        os.kill(a.pid, signal.SIGCONT)  # A wakes while B holds the lock
        a.join(60)
        assert a.exitcode == fence.EXIT_DEPOSED, f"the deposed leader was not stopped by the fence ({a.exitcode})"
        assert snapshot(key_dir) == before, "the deposed leader wrote into the key under the new leader's lock"
    finally:
        if a.is_alive():
            os.kill(a.pid, signal.SIGKILL)
        a.join(10)
    held.go.set()
    b.join(60)
    assert (b_result[0].promoted, b_result[0].reason) == (True, "promoted")
    assert (key_dir / "current.jsonl").read_bytes() == B_TURN
    assert ((key_dir / "resume-chain").read_text(), (key_dir / "venue").read_text()) == ("1", "kubernetes")

    # B, now the only leader, completes A's Job too: A's transcript is older than B's and is never promoted.
    again = promote_once(settings, JobDir(str(staging), "job-a"), host(), CONTEXT, job="job-a")
    assert (again.promoted, again.reason) == (False, "locked")
    assert (key_dir / "current.jsonl").read_bytes() == B_TURN and (key_dir / "resume-chain").read_text() == "1"
    assert {p.name for p in key_dir.iterdir()} - BASE == set(), "a lock, candidate or temp was left behind"


class Deposed(Exception):
    pass


def _raise(what: str) -> None:
    raise Deposed(what)


@pytest.fixture
def fenced() -> Any:
    yield
    fence.uninstall()


@pytest.mark.parametrize(("guard", "stops"), [(None, False), (lambda: True, False), (lambda: False, True)],
                         ids=["no-fence-installed-acts", "lease-held-acts", "lease-past-its-deadline-stops"])
def test_check(fenced: Any, guard: Any, stops: bool) -> None:
    if guard is not None:
        fence.install(guard, on_lost=_raise)
    if stops:
        with pytest.raises(Deposed, match="the write"):
            fence.check("the write")
    else:
        fence.check("the write")


def test_an_api_write_passes_the_fence_before_it_reaches_the_network_and_a_read_never_does(fenced: Any) -> None:
    api = Api("https://127.0.0.1:1", retries=0, timeout=1)  # nothing listens: a request that got out would fail
    api.write_guard = fence.write_guard
    fence.install(lambda: False, on_lost=_raise)
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        with pytest.raises(Deposed, match=f"{method} /api/v1/namespaces/ns/pods"):
            api.request(method, "/api/v1/namespaces/ns/pods", {})
    with pytest.raises(Exception, match="cannot reach the API server"):
        api.get("/api/v1/namespaces/ns/pods")
