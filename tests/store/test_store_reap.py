"""The TTL reaper (docs/store-contract.md#reaper): strays, links, ENOENT fallback, locks ignored, one recursive
delete."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from pidispatch.store.reap import reap
from testkit.store import DAY_MS, NOW_MS, Store, set_mtime

OLD = 15 * DAY_MS
K1, K2, K3, K4 = ("1" * 32, "2" * 32, "3" * 32, "4" * 32)


def sweep(store: Store) -> list[dict]:
    return list(reap(store.settings, clock=lambda: NOW_MS))


def test_reaps_idle_keys_and_keeps_fresh_ones(store: Store) -> None:
    store.put(key=K1, idle_ms=OLD)
    store.put(key=K2, idle_ms=DAY_MS)
    (store.key_dir(K1) / "lock").touch()  # a leaked lock does not protect an idle key
    (store.key_dir(K1) / "current.jsonl.1.1.abcdefabcdef.incoming").touch()
    events = sweep(store)
    assert events == [{"event": "reaped_session", "key": K1}]
    assert not store.key_dir(K1).exists() and store.key_dir(K2).exists()


def test_fresh_transcript_survives_a_stale_lock(store: Store) -> None:
    store.put(key=K1, idle_ms=DAY_MS)
    lock = store.key_dir(K1) / "lock"
    lock.touch()
    set_mtime(lock, NOW_MS - 30 * DAY_MS)
    assert sweep(store) == []
    assert lock.exists()


def test_strays_and_links_are_never_reaped_or_followed(store: Store, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "current.jsonl").write_text("x")
    set_mtime(victim / "current.jsonl", NOW_MS - OLD)
    store.key_dir(K1).symlink_to(victim)
    (store.root / "stray.txt").write_text("x")
    events = sweep(store)
    assert sorted((e["event"], e["key"]) for e in events) == [
        ("session_not_reaped", K1), ("session_not_reaped", "stray.txt")]
    assert all(e["reason"] == "key-not-a-directory" for e in events)
    assert (victim / "current.jsonl").exists()


def test_key_without_transcript_ages_by_its_directory(store: Store) -> None:
    d = store.key_dir(K1)
    d.mkdir()
    (d / "lock").touch()
    set_mtime(d, NOW_MS - OLD)
    store.key_dir(K2).mkdir()
    set_mtime(store.key_dir(K2), NOW_MS)
    assert sweep(store) == [{"event": "reaped_session", "key": K1}]


def test_real_directories_are_keys_whatever_their_name(store: Store) -> None:
    d = store.root / "not-a-key-name"
    d.mkdir()
    set_mtime(d, NOW_MS - OLD)
    assert sweep(store) == [{"event": "reaped_session", "key": "not-a-key-name"}]


def test_ttl_zero_or_no_store_never_reaps(store: Store) -> None:
    store.put(key=K1, idle_ms=OLD * 100)
    store.configure(ttl_days=0)
    assert sweep(store) == []
    store.configure(ttl_days=14, sessions_dir=None)
    assert sweep(store) == []
    assert store.key_dir(K1).exists()


def test_unlistable_store_is_skipped(store: Store, tmp_path: Path) -> None:
    store.configure(sessions_dir=str(tmp_path / "missing"))
    events = sweep(store)
    assert [e["event"] for e in events] == ["session_reaper_skipped"] and "key" not in events[0]


def test_exactly_at_cutoff_is_kept(store: Store) -> None:
    store.put(key=K3, idle_ms=14 * DAY_MS)
    store.put(key=K4, idle_ms=14 * DAY_MS + 1)
    assert sweep(store) == [{"event": "reaped_session", "key": K4}]


NOBODY = 65534


def sweep_unprivileged(store: Store) -> list[dict]:
    """One sweep in a forked child that has dropped root, so permission bits apply to it.

    Root ignores them, and a store shared with a less privileged host is where a reaper meets
    ``EACCES``. Forked, not spawned: the interpreter lives under a directory ``nobody`` cannot enter.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges, sweep, report, exit without running pytest's teardown
        status = 1
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            with os.fdopen(write_end, "w") as out:
                json.dump(sweep(store), out)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as results:
        text = results.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the unprivileged sweep failed"
    return json.loads(text)


@pytest.fixture
def open_store(tmp_path: Path) -> Store:
    """A store whose path an unprivileged process can reach (pytest's tmp_path is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="pidispatch-reap-"))
    base.chmod(0o755)
    root = base / "store"
    root.mkdir()
    root.chmod(0o755)
    yield Store(root, tmp_path / "staging")
    shutil.rmtree(base)


def test_a_transcript_that_cannot_be_examined_is_skipped_not_reaped(open_store: Store) -> None:
    """A non-ENOENT ``lstat`` error is no proof of age (docs/store-contract.md#reaper): the key is skipped and kept."""
    open_store.put(key=K1, idle_ms=OLD)
    open_store.key_dir(K1).chmod(0o600)  # listable from the root, but nothing inside can be looked up
    try:
        events = sweep_unprivileged(open_store)
    finally:
        open_store.key_dir(K1).chmod(0o700)
    assert [(e["event"], e["key"]) for e in events] == [("session_reaper_skipped", K1)]
    assert events[0]["reason"] == "Permission denied"
    assert (open_store.key_dir(K1) / "current.jsonl").exists()


def test_a_key_the_recursive_delete_cannot_finish_is_reported(open_store: Store) -> None:
    open_store.put(key=K1, idle_ms=OLD)
    key_dir = open_store.key_dir(K1)
    (key_dir / "kept").mkdir()
    (key_dir / "kept" / "file").write_text("x")  # in a directory the sweep may not write to
    key_dir.chmod(0o777)
    set_mtime(key_dir / "current.jsonl", NOW_MS - OLD)
    events = sweep_unprivileged(open_store)
    assert [(e["event"], e["key"]) for e in events] == [("session_reaper_skipped", K1)]
    assert events[0]["reason"] == "Permission denied"
    assert (key_dir / "kept" / "file").exists()


def test_links_inside_an_idle_key_are_removed_not_followed(store: Store, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "file").write_text("keep me")
    (outside / "deep" / "file").write_text("keep me too")
    store.put(key=K1, idle_ms=OLD)
    key_dir = store.key_dir(K1)
    (key_dir / "to-a-dir").symlink_to(outside)
    (key_dir / "to-a-file").symlink_to(outside / "file")
    (key_dir / "sub" / "deeper").mkdir(parents=True)
    (key_dir / "sub" / "deeper" / "to-deep").symlink_to(outside / "deep")
    (key_dir / "sub" / "deeper" / "file").write_text("x")
    assert sweep(store) == [{"event": "reaped_session", "key": K1}]
    assert not key_dir.exists()
    assert (outside / "file").read_text() == "keep me" and (outside / "deep" / "file").read_text() == "keep me too"


def test_a_transcript_that_is_a_link_ages_by_the_link_itself(store: Store, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.jsonl"
    fresh.write_text("x")  # the link's target is fresh; the link (lstat) is old: the key is idle
    key_dir = store.key_dir(K1)
    key_dir.mkdir()
    (key_dir / "current.jsonl").symlink_to(fresh)
    os.utime(key_dir / "current.jsonl", ns=(int((NOW_MS - OLD) * 1e6),) * 2, follow_symlinks=False)
    assert sweep(store) == [{"event": "reaped_session", "key": K1}]
    assert fresh.exists()


@pytest.mark.parametrize("workers", [1, 2, 4, 16])
def test_any_number_of_workers_reaps_the_same_keys_and_reports_them_in_listing_order(
        store: Store, tmp_path: Path, workers: int) -> None:
    idle = {f"{i:032x}" for i in range(0, 60, 2)}
    for i in range(60):
        store.put(key=f"{i:032x}", idle_ms=OLD if f"{i:032x}" in idle else DAY_MS)
    (store.root / "stray.txt").write_text("x")
    (store.root / "a-link").symlink_to(tmp_path)
    listing = [name for name in os.listdir(store.root)]
    events = list(reap(store.settings, clock=lambda: NOW_MS, workers=workers))
    reaped = [e["key"] for e in events if e["event"] == "reaped_session"]
    assert set(reaped) == idle and len(reaped) == len(idle)
    assert sorted(e["key"] for e in events if e["event"] == "session_not_reaped") == ["a-link", "stray.txt"]
    assert [e["key"] for e in events] == [n for n in listing if n in idle or n in ("a-link", "stray.txt")]
    assert set(os.listdir(store.root)) == set(listing) - idle


def test_a_consumer_that_stops_early_leaves_no_thread_behind(store: Store) -> None:
    import threading

    for i in range(40):
        store.put(key=f"{i:032x}", idle_ms=OLD)
    sweep_gen = reap(store.settings, clock=lambda: NOW_MS, workers=4)
    assert next(sweep_gen)["event"] == "reaped_session"
    sweep_gen.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("reaper")]
    assert 1 <= 40 - len(os.listdir(store.root)) <= 1 + 2 * 4, "only what was in flight was finished"


def test_a_key_that_can_be_searched_but_not_listed_is_judged_by_its_transcript(open_store: Store) -> None:
    """Mode 0711: the transcript's age can be looked up (a fresh key is left alone, silently), but the
    directory cannot be listed, so an idle one cannot be emptied: skipped, kept, and said so."""
    open_store.put(key=K1, idle_ms=DAY_MS)
    open_store.put(key=K2, idle_ms=OLD)
    for key in (K1, K2):
        open_store.key_dir(key).chmod(0o711)
    try:
        events = sweep_unprivileged(open_store)
    finally:
        for key in (K1, K2):
            open_store.key_dir(key).chmod(0o700)
    assert [(e["event"], e["key"], e["reason"]) for e in events] == [
        ("session_reaper_skipped", K2, "Permission denied")]
    assert (open_store.key_dir(K2) / "current.jsonl").exists()
