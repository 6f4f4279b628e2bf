"""Forgetting a key (``store/forget.py``) on a real filesystem: it goes, and a job in flight cannot bring it back."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pidispatch.store import keyguard
from pidispatch.store.forget import forget_key
from pidispatch.store.journal import promote_once
from pidispatch.store.staging import FORGOTTEN, HostRecord, JobDir, stage
from testkit.store import KEY, MODEL, PI, Store, sample

OTHER_KEY = "0" * 32
OLD = sample("s1_after_turn1.jsonl")
NEW = sample("s1_after_turn2.jsonl")


def record(key: str = KEY) -> HostRecord:
    return HostRecord(key=key, forge="github", repository="acme/widgets", branch="pi/issue-7", venue="kubernetes",
                      pi_version=PI, model=MODEL)


def staged(store: Store, uid: str, key: str = KEY) -> tuple[JobDir, HostRecord]:
    store.stage_root.mkdir(parents=True, exist_ok=True)
    jd = JobDir(str(store.stage_root), uid)
    return jd, stage(store.settings, jd, record(key), clock=None)


def test_forgetting_marks_the_jobs_in_flight_on_the_key_and_removes_it(store: Store, events) -> None:
    store.put(OLD)
    running, _ = staged(store, "job-on-key")
    elsewhere, _ = staged(store, "job-elsewhere", OTHER_KEY)
    assert forget_key(store.settings, str(store.stage_root), KEY) == 1
    assert not store.key_dir().exists()
    assert running.forgotten() and not elsewhere.forgotten()
    assert [e for e in events() if e["event"] == "session_forgotten"] == [
        {"event": "session_forgotten", "key": KEY, "jobsInFlight": 1}]


def test_a_job_that_resumed_the_forgotten_key_does_not_bring_it_back(store: Store) -> None:
    """The hole: the job's promotion re-created the key with the deleted conversation plus its turn."""
    store.put(OLD)
    jd, host = staged(store, "job-a")
    assert host.resume, "the job resumed the conversation that is then forgotten"
    forget_key(store.settings, str(store.stage_root), KEY)
    Path(jd.session, "current.jsonl").write_bytes(NEW)  # the job's run goes on and ends
    result = promote_once(store.settings, jd, host, (10, 100))
    assert (result.promoted, result.forgotten) == (False, True)
    assert not store.key_dir().exists()
    nxt, again = staged(store, "job-b")
    assert (again.resume, again.reason) == (False, "absent")


def test_a_job_staged_after_the_forget_is_a_new_conversation(store: Store) -> None:
    store.put(OLD)
    forget_key(store.settings, str(store.stage_root), KEY)
    jd, host = staged(store, "job-after")
    assert not jd.forgotten()
    Path(jd.session, "current.jsonl").write_bytes(NEW)
    assert promote_once(store.settings, jd, host, None).promoted
    assert (store.key_dir() / "current.jsonl").read_bytes() == NEW


@pytest.mark.parametrize("plant", ["symlink-to-dir", "file"])
def test_a_planted_entry_at_the_key_s_name_is_removed_not_its_target(store: Store, tmp_path: Path,
                                                                     plant: str) -> None:
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep").write_bytes(b"x")
    if plant == "symlink-to-dir":
        store.key_dir().symlink_to(target)
    else:
        store.key_dir().write_bytes(b"planted")
    forget_key(store.settings, str(store.stage_root), KEY)
    assert not store.key_dir().exists() and not store.key_dir().is_symlink()
    assert (target / "keep").read_bytes() == b"x"


def test_a_link_inside_the_key_directory_is_not_followed(store: Store, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"x")
    store.put(OLD)
    (store.key_dir() / "escape").symlink_to(outside)
    forget_key(store.settings, str(store.stage_root), KEY)
    assert (outside / "keep").read_bytes() == b"x"


def test_without_a_store_or_for_a_non_key_nothing_is_touched(store: Store) -> None:
    store.put(OLD)
    assert forget_key(store.settings, str(store.stage_root), "../" + KEY[3:]) == 0
    store.configure(sessions_dir=None)
    assert forget_key(store.settings, str(store.stage_root), KEY) == 0
    assert (store.key_dir() / "current.jsonl").exists()


def test_a_forget_that_arrives_during_a_stage_waits_for_it_then_marks_the_job(store: Store) -> None:
    """Staging holds the key's guard from the gates to the host record: a forget started in between
    cannot run before the record exists, so it always finds and marks the job."""
    store.put(OLD)
    store.stage_root.mkdir(parents=True)
    jd = JobDir(str(store.stage_root), "job-a")
    forgetting = threading.Thread(target=forget_key, args=(store.settings, str(store.stage_root), KEY))

    class ForgetMidStage:
        def at(self, step: str) -> None:
            if step == "gates-judged":
                assert keyguard.held(KEY)
                forgetting.start()

    host = stage(store.settings, jd, record(), seams=ForgetMidStage())
    forgetting.join(timeout=30)
    assert not forgetting.is_alive()
    assert host.resume, "staged before the forget: a copy of the conversation"
    assert jd.forgotten(), "the forget found the job staged under it and marked it"
    assert not store.key_dir().exists()


def test_a_forget_redone_after_a_kill_is_harmless(store: Store) -> None:
    store.put(OLD)
    jd, _ = staged(store, "job-a")
    forget_key(store.settings, str(store.stage_root), KEY)
    assert forget_key(store.settings, str(store.stage_root), KEY) == 1
    assert jd.read(FORGOTTEN) == {"key": KEY}


def test_a_forget_that_arrives_during_a_promotion_waits_for_it_then_removes_what_it_wrote(store: Store) -> None:
    store.put(OLD)
    jd, host = staged(store, "job-a")
    Path(jd.session, "current.jsonl").write_bytes(NEW)
    forgetting = threading.Thread(target=forget_key, args=(store.settings, str(store.stage_root), KEY))

    class ForgetMidPromotion:
        def at(self, step: str) -> None:
            if step == "locked":
                forgetting.start()

    result = promote_once(store.settings, jd, host, None, seams=ForgetMidPromotion())
    forgetting.join(timeout=30)
    assert not forgetting.is_alive()
    assert result.promoted, "the promotion began before the forget and was not cut short"
    assert not store.key_dir().exists(), "the forget ran after it and removed what it wrote"
    assert jd.forgotten(), "so the job's completion leaves the SessionKey alone"
