"""Promotion at most once per Job across crashes (``store/journal.py``), on a real filesystem.

Each kill is a real SIGKILL of a child process at a named step (the journal's own and the store's
promotion steps); the parent then does what a restarted operator does (``release_interrupted`` at
start-up, the Job's completion again) and checks the store: the Job's transcript landed exactly once,
no lock, candidate or temp is left, and no older transcript replaced a newer one.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from pidispatch.settings import Settings
from pidispatch.store import fsio, keyguard
from pidispatch.store.journal import promote_once, release_interrupted
from pidispatch.store.promote import promote
from pidispatch.store.resolve import resolve
from pidispatch.store.staging import FORGOTTEN, HOST, PROMOTION, HostRecord, JobDir
from testkit.store import KEY, MODEL, PI, KillAt, Store, run_to_death, sample

OLD = sample("s1_after_turn1.jsonl")
NEW = sample("s1_after_turn2.jsonl")
NEWER = NEW + sample("s2_tool_call.jsonl").split(b"\n", 1)[1]  # another job's later turn
BASE = {"current.jsonl", "pi-version", "venue", "resume-chain", "context"}
CONTEXT = (1234, 200000)


def host(resume: bool = True) -> HostRecord:
    return HostRecord(key=KEY, forge="github", repository="acme/widgets", branch="pi/issue-7", venue="kubernetes",
                      pi_version=PI, model=MODEL, mounted=True, resume=resume,
                      reason="resumed" if resume else "absent", bytes=len(OLD) if resume else 0)


def job_dir(staging: Path, uid: str, content: bytes, record: HostRecord | None = None) -> JobDir:
    """A Job's staging as its run left it: the host record written when it was staged, the transcript pi wrote."""
    staging.mkdir(parents=True, exist_ok=True)
    jd = JobDir(str(staging), uid)
    jd.prepare()
    jd.write(HOST, (record or host()).to_json())
    Path(jd.session, "current.jsonl").write_bytes(content)
    return jd


def _promote_once_then_die(root: str, staging: str, uid: str, step: str) -> None:
    promote_once(Settings(sessions_dir=root), JobDir(staging, uid), host(), CONTEXT, seams=KillAt(step))


def killed_at(store: Store, uid: str, step: str) -> None:
    run_to_death(_promote_once_then_die, str(store.root), str(store.stage_root), uid, step)


@pytest.fixture
def seeded(store: Store) -> Store:
    """A key whose last promotion (a cold start) left OLD, chain 0."""
    assert promote(store.settings, KEY, str(store.staged_job(OLD)), host_resume=False, pi_version=PI,
                   model=MODEL).promoted
    return store


def names_in(key_dir: Path) -> set[str]:
    return {p.name for p in key_dir.iterdir()}


# (step, the chain and venue once the Job's completion ran again): before the swap nothing landed and the
# promotion runs again in full; after it the swap counts and is not repeated (a kill before the venue stamp
# leaves (pending): the next delivery starts cold once, as the store contract says of an interrupted promotion).
STEPS = [
    ("journaled", "1", "kubernetes"),
    ("key-dir-ready", "1", "kubernetes"),
    ("locked", "1", "kubernetes"),
    ("temp-created", "1", "kubernetes"),
    ("temp-written", "1", "kubernetes"),
    ("sync-temp", "1", "kubernetes"),
    ("sync-before-swap", "1", "kubernetes"),
    ("sentinel-written", "1", "kubernetes"),
    ("swapped", "0", "(pending)"),
    ("stamped-pi-version", "0", "(pending)"),
    ("stamped-resume-chain", "1", "(pending)"),
    ("stamped-context", "1", "(pending)"),
    ("sync-after-swap", "1", "(pending)"),
    ("stamped-venue", "1", "kubernetes"),
    ("unlocked", "1", "kubernetes"),
    ("promoted", "1", "kubernetes"),
]


@pytest.mark.parametrize(("step", "chain", "venue"), STEPS, ids=[s for s, _, _ in STEPS])
def test_killed_at_any_step_the_job_s_transcript_lands_once_and_nothing_is_left_locked(
        seeded: Store, events, step: str, chain: str, venue: str) -> None:
    jd = job_dir(seeded.stage_root, "job-a", NEW)
    killed_at(seeded, "job-a", step)

    release_interrupted(seeded.settings, str(seeded.stage_root))  # the restarted operator, before any promotion
    key_dir = seeded.key_dir()
    assert not (key_dir / "lock").exists(), "the dead attempt's lock survived the restart"

    result = promote_once(seeded.settings, jd, host(), CONTEXT)
    assert (result.promoted, result.reason, result.bytes) == (True, "promoted", len(NEW))
    assert (key_dir / "current.jsonl").read_bytes() == NEW
    assert ((key_dir / "resume-chain").read_text(), (key_dir / "venue").read_text()) == (chain, venue), \
        "promoted more or less than once"
    assert names_in(key_dir) - BASE == set(), "a lock, candidate or temp of the dead attempt is left"

    again = promote_once(seeded.settings, jd, host(), CONTEXT)  # a second completion after another restart
    assert again == result
    assert (key_dir / "resume-chain").read_text() == chain

    nxt = resolve(seeded.settings, KEY, str(seeded.stage()), pi_version=PI, model=MODEL)
    assert nxt is not None and nxt.verdict.reason == ("resumed" if venue == "kubernetes" else "venue-changed")


@pytest.mark.parametrize("step", ["journaled", "locked", "temp-written", "sentinel-written"])
def test_an_interrupted_promotion_never_replaces_a_newer_transcript(seeded: Store, events, step: str) -> None:
    """Job A is killed before its swap; after the restart job B promotes on the key first. A's recovery
    must not then promote A's older transcript over B's (the hole: it used to)."""
    jd_a = job_dir(seeded.stage_root, "job-a", NEW)
    killed_at(seeded, "job-a", step)
    release_interrupted(seeded.settings, str(seeded.stage_root))

    jd_b = job_dir(seeded.stage_root, "job-b", NEWER)
    assert promote_once(seeded.settings, jd_b, host(), CONTEXT).promoted, "B was refused: A's lock survived"

    late = promote_once(seeded.settings, jd_a, host(), CONTEXT)
    assert (late.promoted, late.reason) == (False, "locked")
    key_dir = seeded.key_dir()
    assert (key_dir / "current.jsonl").read_bytes() == NEWER
    assert (key_dir / "resume-chain").read_text() == "1", "B's promotion only"
    assert names_in(key_dir) - BASE == set()
    recovered = [e for e in events() if e["event"] == "session_promotion_recovered"]
    assert recovered and recovered[-1]["superseded"] is True


def test_without_the_start_up_release_a_dead_attempt_s_lock_refuses_the_next_promotion(seeded: Store) -> None:
    """What ``release_interrupted`` is for: the dead attempt's lock is fresh, so it would hold for an hour."""
    job_dir(seeded.stage_root, "job-a", NEW)
    killed_at(seeded, "job-a", "locked")
    assert (seeded.key_dir() / "lock").exists()
    jd_b = job_dir(seeded.stage_root, "job-b", NEWER)
    assert promote_once(seeded.settings, jd_b, host(), CONTEXT).reason == "locked"
    assert release_interrupted(seeded.settings, str(seeded.stage_root)) == 1
    assert not (seeded.key_dir() / "lock").exists()


def test_a_lock_that_is_not_the_attempt_s_own_is_left_alone(seeded: Store, events) -> None:
    """Another writer's lock (a pi-dispatch host, ``pidispatch store promote``) is never removed by recovery."""
    jd = job_dir(seeded.stage_root, "job-a", NEW)
    killed_at(seeded, "job-a", "journaled")  # the intent is journaled, nothing taken yet
    (seeded.key_dir() / "lock").write_bytes(b"")  # then someone else's promotion takes the lock
    assert release_interrupted(seeded.settings, str(seeded.stage_root)) == 0
    assert (seeded.key_dir() / "lock").exists()
    assert promote_once(seeded.settings, jd, host(), CONTEXT).reason == "locked"
    assert (seeded.key_dir() / "current.jsonl").read_bytes() == OLD


def test_a_done_journal_is_returned_without_touching_the_store(seeded: Store) -> None:
    jd = job_dir(seeded.stage_root, "job-a", NEW)
    first = promote_once(seeded.settings, jd, host(), CONTEXT)
    assert first.promoted
    Path(jd.session, "current.jsonl").write_bytes(NEWER)  # whatever the staged file says now
    assert promote_once(seeded.settings, jd, host(), CONTEXT) == first
    assert (seeded.key_dir() / "current.jsonl").read_bytes() == NEW
    assert jd.read(PROMOTION)["state"] == "done"


def test_a_forgotten_job_promotes_nothing_and_does_not_recreate_the_key(store: Store) -> None:
    jd = job_dir(store.stage_root, "job-a", NEW, host(resume=False))
    jd.write(FORGOTTEN, {"key": KEY})
    result = promote_once(store.settings, jd, host(resume=False), None)
    assert (result.promoted, result.reason, result.forgotten) == (False, "absent", True)
    assert not store.key_dir().exists()
    assert promote_once(store.settings, jd, host(resume=False), None) == result, "journaled as done"


def test_promotion_holds_the_key_s_guard(seeded: Store) -> None:
    """A forget cannot run in the middle of a promotion (``keyguard``)."""
    seen: list[bool] = []

    class Probe:
        def at(self, step: str) -> None:
            if step == "locked":
                seen.append(keyguard.held(KEY))

    promote_once(seeded.settings, job_dir(seeded.stage_root, "job-a", NEW), host(), CONTEXT, seams=Probe())
    assert seen == [True]
    assert not keyguard.held(KEY)


def test_two_promotions_on_one_key_at_once_one_is_locked(seeded: Store) -> None:
    """The guard is shared among promotions: they still meet at the on-disk lock, and the second is
    ``locked`` (its turns are never interleaved with the first's), as promotion step 5 says
    (docs/store-contract.md#promotion-steps)."""
    jd_a = job_dir(seeded.stage_root, "job-a", NEW)
    jd_b = job_dir(seeded.stage_root, "job-b", NEWER)
    second: list[object] = []

    class AtLock:
        def at(self, step: str) -> None:
            if step == "locked" and not second:
                done = threading.Event()
                threading.Thread(target=lambda: (second.append(promote_once(seeded.settings, jd_b, host(),
                                                                            CONTEXT)), done.set())).start()
                assert done.wait(30), "the second promotion waited for the first instead of meeting its lock"

    first = promote_once(seeded.settings, jd_a, host(), CONTEXT, seams=AtLock())
    assert first.promoted
    assert [(r.promoted, r.reason) for r in second] == [(False, "locked")]  # type: ignore[attr-defined]
    assert (seeded.key_dir() / "current.jsonl").read_bytes() == NEW


def test_a_journal_an_older_operator_wrote_is_recovered_without_its_names(seeded: Store) -> None:
    """Before the lock candidates, a started journal held the lock's identity, not names: after an upgrade
    it is judged as before (the swap landed, or not) and touches nothing it cannot prove is its own."""
    jd = job_dir(seeded.stage_root, "job-a", NEW)
    digest = hashlib.sha256(NEW).hexdigest()
    before = list(fsio.Identity.of(os.lstat(seeded.key_dir() / "current.jsonl")))
    jd.write(PROMOTION, {"state": "started", "size": len(NEW), "sha256": digest, "before": before,
                         "lock": [1, 2, 3, 4]})
    (seeded.key_dir() / "None").write_bytes(b"a stray file an operator must not touch")
    result = promote_once(seeded.settings, jd, host(), CONTEXT)
    assert (result.promoted, result.reason) == (True, "promoted")
    assert (seeded.key_dir() / "current.jsonl").read_bytes() == NEW
    assert (seeded.key_dir() / "None").exists()
