"""The TTL reaper (spec §7): strays, links, ENOENT fallback, locks ignored, one recursive delete."""

from __future__ import annotations

from pathlib import Path

from pidispatch.store.reap import reap
from storekit import DAY_MS, NOW_MS, Store, set_mtime

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
