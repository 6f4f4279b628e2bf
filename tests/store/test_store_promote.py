"""Promotion (docs/store-contract.md#promotion): staged-file and key-directory shapes, planted temps, locks,
sidecars."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pidispatch.store.promote import promote
from pidispatch.store.resolve import resolve
from testkit.store import DAY_MS, KEY, MODEL, NOW_MS, PI, Store, sample, set_mtime

OLD = sample("s1_after_turn1.jsonl")
NEW = sample("s1_after_turn2.jsonl")


def land(store: Store, content: bytes = NEW, *, host_resume: bool = False, clock: float = NOW_MS, **job):
    stage = store.staged_job(content)
    job.setdefault("pi_version", PI)
    job.setdefault("model", MODEL)
    return promote(store.settings, KEY, str(stage), host_resume=host_resume, clock=lambda: clock, **job)


def canonical(store: Store) -> bytes:
    return (store.key_dir() / "current.jsonl").read_bytes()


def leftovers(store: Store) -> list[str]:
    return sorted(p.name for p in store.key_dir().iterdir()
                  if p.name == "lock" or p.name.endswith(".incoming"))


def test_first_promotion_creates_a_private_key_dir_and_stamps(store: Store, events) -> None:
    result = land(store)
    assert (result.promoted, result.reason, result.bytes) == (True, "promoted", len(NEW))
    assert canonical(store) == NEW
    d = store.key_dir()
    assert d.stat().st_mode & 0o777 == 0o700
    assert (d / "venue").read_text() == "kubernetes"
    assert (d / "pi-version").read_text() == PI
    assert (d / "resume-chain").read_text() == "0"
    assert not (d / "context").exists()
    assert leftovers(store) == []
    assert {"event": "session_promoted", "key": KEY, "bytes": len(NEW)} in events()


def test_promoted_transcript_resumes_next_time(store: Store) -> None:
    land(store)
    stage = store.stage()
    result = resolve(store.settings, KEY, str(stage), pi_version=PI, model=MODEL)
    assert result is not None and result.verdict.resume
    assert (stage / "current.jsonl").read_bytes() == NEW


STAGED_SHAPES: list[tuple[str, Callable[[Path], None], str]] = [
    ("staged file missing", lambda p: p.unlink(), "absent"),
    ("staged file emptied by the agent", lambda p: p.write_bytes(b""), "absent"),
    ("staged file replaced by a symlink", lambda p: (p.unlink(), p.symlink_to("/etc/passwd")), "not-a-regular-file"),
    ("staged file replaced by a dangling symlink", lambda p: (p.unlink(), p.symlink_to("/nope")),
     "not-a-regular-file"),
    ("staged file replaced by a directory", lambda p: (p.unlink(), p.mkdir()), "not-a-regular-file"),
    ("staged file replaced by a FIFO", lambda p: (p.unlink(), os.mkfifo(p)), "not-a-regular-file"),
    ("staged file over the cap", lambda p: p.write_bytes(b"x" * 101), "too-large"),
]


@pytest.mark.parametrize(("shape", "reason"), [c[1:] for c in STAGED_SHAPES], ids=[c[0] for c in STAGED_SHAPES])
def test_staged_file_shapes_leave_the_store_untouched(store: Store, events, shape, reason) -> None:
    store.put(OLD)
    store.configure(max_bytes=100 if reason == "too-large" else store.settings.max_bytes)
    stage = store.staged_job(NEW)
    shape(stage / "current.jsonl")
    result = promote(store.settings, KEY, str(stage), host_resume=True, pi_version=PI)
    assert (result.promoted, result.reason) == (False, reason)
    assert canonical(store) == OLD
    assert {"event": "session_promote_skipped", "key": KEY, "reason": reason} in events()


KEY_SHAPES: list[tuple[str, Callable[[Store], None]]] = [
    ("symlink to a directory", lambda s: (s.root.joinpath("d").mkdir(), s.key_dir().symlink_to(s.root / "d"))),
    ("symlink to a file", lambda s: (s.root.joinpath("f").write_text("x"), s.key_dir().symlink_to(s.root / "f"))),
    ("dangling symlink", lambda s: s.key_dir().symlink_to(s.root / "missing")),
    ("regular file", lambda s: s.key_dir().write_text("not a directory")),
    ("FIFO", lambda s: os.mkfifo(s.key_dir())),
]


@pytest.mark.parametrize("shape", [c[1] for c in KEY_SHAPES], ids=[c[0] for c in KEY_SHAPES])
def test_key_path_shapes_are_refused_and_left_alone(store: Store, shape) -> None:
    shape(store)
    before = os.lstat(store.key_dir())
    result = land(store)
    assert (result.promoted, result.reason) == (False, "key-not-a-directory")
    after = os.lstat(store.key_dir())
    assert (before.st_ino, before.st_mode) == (after.st_ino, after.st_mode)
    assert not (store.root / "d" / "current.jsonl").exists(), "nothing written through the link"


PLANTS = ["directory", "dangling symlink", "symlink to a file", "regular file"]


def plant_at(path: Path, plant: str, store: Store) -> Path:
    """Put ``plant`` at ``path``; return the file a link points at, which must stay untouched."""
    victim = store.root / "victim"
    if not victim.exists():
        victim.write_text("do not touch")
    if plant == "directory":
        path.mkdir()
        (path / "inner").write_text("x")
    elif plant == "dangling symlink":
        path.symlink_to(store.root / "nowhere")
    elif plant == "symlink to a file":
        path.symlink_to(victim)
    else:
        path.write_text("planted")
    return victim


@pytest.mark.parametrize("plant", PLANTS)
def test_planted_sidecar_temps_are_replaced_not_followed(store: Store, plant: str) -> None:
    store.put(OLD)
    for name in ("venue.incoming", "pi-version.incoming", "resume-chain.incoming", "context.incoming"):
        target = plant_at(store.key_dir() / name, plant, store)
    result = land(store, host_resume=True, context=(10, 100))
    assert result.promoted
    assert target.read_text() == "do not touch"
    assert not (store.root / "nowhere").exists()
    assert (store.key_dir() / "venue").read_text() == "kubernetes"
    assert (store.key_dir() / "context").read_text() == f"10 100 {MODEL}"


@pytest.mark.parametrize("plant", ["sidecar symlink to a file", "sidecar dangling symlink"])
def test_sidecar_links_are_replaced_by_regular_files(store: Store, plant: str) -> None:
    store.put(OLD)
    target = store.root / "victim"
    target.write_text("do not touch")
    for name in ("venue", "pi-version", "resume-chain"):
        (store.key_dir() / name).unlink(missing_ok=True)
        (store.key_dir() / name).symlink_to(target if plant.endswith("file") else store.root / "nowhere")
    assert land(store).promoted
    assert target.read_text() == "do not touch"
    for name in ("venue", "pi-version", "resume-chain"):
        assert (store.key_dir() / name).is_file() and not (store.key_dir() / name).is_symlink()


@pytest.mark.parametrize("plant", PLANTS)
@pytest.mark.parametrize(("namer", "name"), [("temp_name", "current.jsonl.1.1.aaaaaaaaaaaa.incoming"),
                                             ("candidate_name", "lock.1.1.aaaaaaaaaaaa.incoming")])
def test_planted_temp_and_lock_candidate_names_are_cleared(store: Store, monkeypatch, plant: str, namer: str,
                                                           name: str) -> None:
    """Whatever sits at the transcript's temp name (docs/store-contract.md#promotion-steps) or the lock's candidate name
    (a crashed attempt's, or planted) is removed, never followed.

    Both names are random, so the test pins them (``temp_name`` and ``candidate_name`` are this package's
    functions, not ``os``).
    """
    import pidispatch.store.promote as promote_module

    store.put(OLD)
    planted = store.key_dir() / name
    victim = plant_at(planted, plant, store)
    monkeypatch.setattr(promote_module, namer, lambda: planted.name)
    assert land(store).promoted
    assert canonical(store) == NEW
    assert not os.path.lexists(planted) and not os.path.lexists(store.key_dir() / "lock")
    assert victim.read_text() == "do not touch"
    assert not (store.root / "nowhere").exists()


def test_temp_names_are_random_per_writer() -> None:
    from pidispatch.store.promote import temp_name

    names = {temp_name() for _ in range(100)}
    assert len(names) == 100
    pid = str(os.getpid())
    for name in names:
        prefix, p, seq, rand, suffix = name.rsplit(".", 4)[0], *name.split(".")[2:6]
        assert prefix.startswith("current") and p == pid and seq.isdigit() and len(rand) == 12
        assert suffix == "incoming"


LOCKS: list[tuple[str, Callable[[Path], None], bool]] = [
    ("live lock", lambda p: (p.touch(), set_mtime(p, NOW_MS - 60_000)), False),
    ("lock exactly one hour old is live", lambda p: (p.touch(), set_mtime(p, NOW_MS - 3_600_000)), False),
    ("stale lock is taken over", lambda p: (p.touch(), set_mtime(p, NOW_MS - 3_600_001)), True),
    ("future-dated lock is never stale", lambda p: (p.touch(), set_mtime(p, NOW_MS + 365 * DAY_MS)), False),
    ("fresh dangling link is a live lock", lambda p: (p.symlink_to("/nowhere"), set_mtime(p, NOW_MS - 5)), False),
    ("old dangling link is taken over", lambda p: (p.symlink_to("/nowhere"), set_mtime(p, NOW_MS - 2 * 3_600_000)),
     True),
]


@pytest.mark.parametrize(("plant", "taken"), [c[1:] for c in LOCKS], ids=[c[0] for c in LOCKS])
def test_lock_shapes(store: Store, events, plant, taken: bool) -> None:
    store.put(OLD)
    plant(store.key_dir() / "lock")
    result = land(store)
    if taken:
        assert result.promoted
        assert canonical(store) == NEW
        stale = [e for e in events() if e["event"] == "session_lock_stale_taken"]
        assert len(stale) == 1 and stale[0]["ageMs"] >= 3_600_001
        assert not os.path.lexists(store.key_dir() / "lock"), "our lock is released"
    else:
        assert (result.promoted, result.reason) == (False, "locked")
        assert canonical(store) == OLD, "a locked promotion discards this job's transcript"
        assert os.path.lexists(store.key_dir() / "lock"), "someone else's lock is left alone"


def test_lock_is_released_even_when_the_swap_fails(store: Store) -> None:
    class Boom:
        def at(self, step: str) -> None:
            if step == "temp-written":
                raise OSError(28, "No space left on device")

    store.put(OLD)
    stage = store.staged_job(NEW)
    result = promote(store.settings, KEY, str(stage), host_resume=False, pi_version=PI, seams=Boom())
    assert (result.promoted, result.reason) == (False, "promote-failed")
    assert canonical(store) == OLD
    assert leftovers(store) == [], "lock released and the temp removed"


def test_chain_counts_host_resumes_and_resets_on_cold_start(store: Store) -> None:
    sequence = []
    for host_resume in (False, True, True, True, False, True):
        land(store, host_resume=host_resume)
        sequence.append((store.key_dir() / "resume-chain").read_text())
    assert sequence == ["0", "1", "2", "3", "0", "1"]


def test_chain_bound_cycle(store: Store) -> None:
    """Bound 3: resumes move the counter 1, 2, 3; the 4th delivery is refused; the cold run resets."""
    store.configure(max_resume_chain=3)
    land(store, host_resume=False)
    reasons = []
    for _ in range(5):
        stage = store.stage()
        res = resolve(store.settings, KEY, str(stage), pi_version=PI, model=MODEL)
        assert res is not None
        reasons.append(res.verdict.reason)
        promote(store.settings, KEY, str(stage) if res.verdict.resume else str(store.staged_job(NEW)),
                host_resume=res.verdict.resume, pi_version=PI, model=MODEL)
    assert reasons == ["resumed", "resumed", "resumed", "resume-chain-too-long", "resumed"]


def test_context_written_on_resume_cleared_on_cold_kept_without_reading(store: Store) -> None:
    context = store.key_dir() / "context"
    land(store, host_resume=True, context=(1200, 32000))
    assert context.read_text() == f"1200 32000 {MODEL}"
    land(store, host_resume=True, context=None)
    assert context.read_text() == f"1200 32000 {MODEL}", "a resume that measured nothing keeps the reading"
    land(store, host_resume=False, context=(5, 10))
    assert not context.exists(), "a cold start discards any reading"
    land(store, host_resume=True, context=(7, 10), model="Not A Valid Model!")
    assert context.read_text() == "7 10", "no model stamp when the job's model id is invalid"


def test_unknown_pi_version_writes_an_empty_stamp(store: Store) -> None:
    store.put(OLD)
    land(store, pi_version=None)
    assert (store.key_dir() / "pi-version").read_bytes() == b""
    stage = store.stage()
    res = resolve(store.settings, KEY, str(stage), pi_version=PI)
    assert res is not None and res.verdict.reason == "pi-version-changed"


def test_job_without_venue_leaves_pending(store: Store) -> None:
    land(store, venue=None)
    assert (store.key_dir() / "venue").read_text() == "(pending)"
    res = resolve(store.settings, KEY, str(store.stage()), pi_version=PI)
    assert res is not None and res.verdict.reason == "venue-changed"


def test_sidecar_failure_after_the_swap_is_not_fatal(store: Store, events) -> None:
    """A directory planted at ``pi-version`` cannot be renamed over, even by root: a real write fault."""
    store.put(OLD, pi_version=None)
    (store.key_dir() / "pi-version").mkdir()
    (store.key_dir() / "pi-version" / "child").write_text("x")
    result = land(store)
    assert (result.promoted, result.reason) == (True, "promoted")
    assert canonical(store) == NEW
    failed = [e for e in events() if e["event"] == "session_sidecar_failed"]
    assert [e["file"] for e in failed] == ["pi-version"]
    assert (store.key_dir() / "venue").read_text() == "kubernetes", "the other stamps still land"
    res = resolve(store.settings, KEY, str(store.stage()), pi_version=PI)
    assert res is not None and res.verdict.reason == "pi-version-changed", "an unreadable stamp never resumes"


def test_missing_store_root_is_promote_failed(store: Store, events, tmp_path: Path) -> None:
    from dataclasses import replace

    store.settings = replace(store.settings, sessions_dir=str(tmp_path / "not-mounted"))
    result = land(store)
    assert (result.promoted, result.reason) == (False, "promote-failed")
    assert not (tmp_path / "not-mounted").exists(), "a missing store is not silently created"
    assert [e["phase"] for e in events() if e["event"] == "session_store_failed"] == ["promote"]


def test_no_key_is_a_safety_net(store: Store) -> None:
    result = promote(store.settings, None, str(store.staged_job(NEW)), host_resume=False)
    assert (result.promoted, result.reason) == (False, "no-key")


class Observer:
    """Seams that look at the real key directory at each named step of a promotion (no ``os`` patched).

    ``fail_at``: raise an I/O error at that step. The ``sync-*`` seams sit right before each fsync
    (promote.py ``_swap_in``, ``_stamp``), in the same error handling, so a failure injected there
    takes the path a failing fsync takes.
    """

    def __init__(self, store: Store, fail_at: str | None = None) -> None:
        self.key_dir = store.key_dir()
        self.fail_at = fail_at
        self.seen: list[tuple[str, bytes, str | None, list[str]]] = []

    def at(self, step: str) -> None:
        venue = self.key_dir / "venue"
        temps = sorted(p.name for p in self.key_dir.iterdir() if p.name.startswith("current.jsonl."))
        self.seen.append((step, canonical_or_empty(self.key_dir), venue.read_text() if venue.exists() else None, temps))
        if step == self.fail_at:
            raise OSError(5, "Input/output error")

    def steps(self) -> list[str]:
        return [step for step, *_ in self.seen]

    def state_at(self, step: str) -> tuple[bytes, str | None, list[str]]:
        (state,) = [rest for seen_step, *rest in self.seen if seen_step == step]
        return tuple(state)  # type: ignore[return-value]


def canonical_or_empty(key_dir: Path) -> bytes:
    path = key_dir / "current.jsonl"
    return path.read_bytes() if path.exists() else b""


def land_observed(store: Store, observer: Observer, **job):
    stage = store.staged_job(NEW)
    return promote(store.settings, KEY, str(stage), host_resume=job.pop("host_resume", False), pi_version=PI,
                   model=MODEL, seams=observer, **job)


def test_durability_order_three_fsyncs(store: Store) -> None:
    """promote.py ``_swap_in``: the temp's bytes, then the sentinel's rename, are on disk before the
    swap; the swap and the other stamps are on disk before the venue stamp re-opens the key."""
    store.put(OLD)
    observer = Observer(store)
    assert land_observed(store, observer, host_resume=True, context=(1, 2)).promoted
    assert observer.steps() == [
        "key-dir-ready", "locked", "temp-created", "temp-chunk", "temp-written",
        "sync-temp",  # fsync 1: the temp, after the sentinel's rename
        "sync-before-swap",  # fsync 2: the sentinel's rename before the swap's
        "sentinel-written", "swapped",
        "stamped-population", "stamped-pi-version", "stamped-resume-chain", "stamped-context",
        "sync-after-swap",  # fsync 3: the swap and those stamps before the venue stamp
        "stamped-venue", "unlocked",
    ]
    transcript, venue, temps = observer.state_at("sync-temp")
    assert (transcript, venue, len(temps)) == (OLD, "(pending)", 1), "the sentinel is renamed in before fsync 1"
    assert (store.key_dir() / temps[0]).exists() is False, "the temp was renamed over current.jsonl"
    assert observer.state_at("sync-before-swap")[:2] == (OLD, "(pending)")
    assert observer.state_at("sync-after-swap")[:2] == (NEW, "(pending)"), "the venue stamp comes after fsync 3"
    assert observer.state_at("stamped-venue")[:2] == (NEW, "kubernetes")


@pytest.mark.parametrize("step", ["sync-temp", "sync-before-swap"])
def test_a_failed_fsync_before_the_swap_is_promote_failed(store: Store, events, step: str) -> None:
    store.put(OLD)
    result = land_observed(store, Observer(store, fail_at=step))
    assert (result.promoted, result.reason) == (False, "promote-failed")
    assert [e["phase"] for e in events() if e["event"] == "session_store_failed"] == ["promote"]
    assert leftovers(store) == [], "lock released and the temp removed"
    assert canonical(store) == OLD
    # The sentinel stands, so the next delivery starts cold rather than trust stamps that may not last.
    assert (store.key_dir() / "venue").read_text() == "(pending)"
    res = resolve(store.settings, KEY, str(store.stage()), pi_version=PI, model=MODEL)
    assert res is not None and res.verdict.reason == "venue-changed"


def test_a_failed_fsync_after_the_swap_counts_the_promotion_and_leaves_the_key_pending(store: Store, events) -> None:
    """docs/store-contract.md#design-rules, rule 10: never ``promote-failed`` once the transcript landed. The swap may
    not survive a power cut, though, so the venue stamp is held back: the key cold-starts once."""
    store.put(OLD)
    result = land_observed(store, Observer(store, fail_at="sync-after-swap"), host_resume=True, context=(1, 2))
    assert (result.promoted, result.reason, result.bytes) == (True, "promoted", len(NEW))
    assert canonical(store) == NEW
    assert leftovers(store) == []
    assert not [e for e in events() if e["event"] == "session_store_failed"]
    (failed,) = [e for e in events() if e["event"] == "session_sidecar_failed"]
    assert failed["file"] == "venue" and "fsync" in failed["reason"]
    assert (store.key_dir() / "venue").read_text() == "(pending)"
    assert (store.key_dir() / "pi-version").read_text() == PI
    assert (store.key_dir() / "resume-chain").read_text() == "1"
    res = resolve(store.settings, KEY, str(store.stage()), pi_version=PI, model=MODEL)
    assert res is not None and res.verdict.reason == "venue-changed"
