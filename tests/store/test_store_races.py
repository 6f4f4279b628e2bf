"""Races injected at the store's seams: swaps between gate and open, during the copy, around the swap."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pidispatch.store import scanmemo
from pidispatch.store.promote import promote
from pidispatch.store.resolve import dry_run, resolve
from testkit.seams import BIG, At
from testkit.store import KEY, MODEL, NOW_MS, PI, Store, sample

A = sample("s1_after_turn2.jsonl")
B = sample("s2_tool_call.jsonl")
@pytest.fixture(params=["scanned", "remembered"])
def copy_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every staging race runs on both copies: the one that scans while it copies (a version never
    seen), and the kernel copy of a version whose gate-12 answer is remembered (store/scanmemo.py)."""
    scanmemo.MEMO.clear()
    yield request.param
    scanmemo.MEMO.clear()


def stage_with(store: Store, seams: At, venue: str = "kubernetes", *, path: str = "scanned") -> tuple[str, bytes]:
    if path == "remembered":
        reason, _ = dry_run(store.settings, KEY, venue=venue, pi_version=PI, model=MODEL, clock=NOW_MS)
        assert reason == "resumed" and len(scanmemo.MEMO) == 1
    hits = scanmemo.MEMO.hits
    stage = store.stage()
    result = resolve(store.settings, KEY, str(stage), venue=venue, pi_version=PI, model=MODEL, clock=NOW_MS,
                     seams=seams)
    assert result is not None
    assert seams.fired, f"the race at {seams.step!r} never ran"
    if seams.step in ("copy-chunk", "copied"):  # the race ran inside (or after) the copy this test is about
        assert (scanmemo.MEMO.hits > hits) is (path == "remembered")
    return result.verdict.reason, (stage / "current.jsonl").read_bytes()


def rename_over(store: Store, content: bytes) -> Callable[[], None]:
    def swap() -> None:
        tmp = store.key_dir() / "swap.tmp"
        tmp.write_bytes(content)
        os.replace(tmp, store.key_dir() / "current.jsonl")
    return swap


def test_swap_between_gates_and_open_is_transcript_replaced(store: Store, copy_path: str) -> None:
    store.put(A)
    reason, staged = stage_with(store, At("gates-judged", rename_over(store, B)), path=copy_path)
    assert (reason, staged) == ("transcript-replaced", b"")


def test_symlink_swapped_in_before_open_is_transcript_replaced(store: Store, copy_path: str) -> None:
    store.put(A)
    outside = store.root.parent / "secret.jsonl"
    outside.write_bytes(A)

    def plant() -> None:
        (store.key_dir() / "current.jsonl").unlink()
        (store.key_dir() / "current.jsonl").symlink_to(outside)

    reason, staged = stage_with(store, At("gates-judged", plant), path=copy_path)
    assert (reason, staged) == ("transcript-replaced", b"")


def test_a_to_b_to_a_swap_is_caught_by_the_inode(store: Store, copy_path: str) -> None:
    store.put(A)

    def a_b_a() -> None:
        rename_over(store, B)()
        rename_over(store, A)()

    reason, staged = stage_with(store, At("gates-judged", a_b_a), path=copy_path)
    assert (reason, staged) == ("transcript-replaced", b"")


def test_rename_over_the_path_after_open_still_stages_the_judged_bytes(store: Store, copy_path: str) -> None:
    store.put(BIG)
    reason, staged = stage_with(store, At("copy-chunk", rename_over(store, B)), path=copy_path)
    assert (reason, staged) == ("resumed", BIG)


def test_in_place_append_during_copy_is_transcript_replaced(store: Store, copy_path: str) -> None:
    store.put(BIG)

    def append() -> None:
        with open(store.key_dir() / "current.jsonl", "ab") as f:
            f.write(b'{"type":"label"}\n')

    reason, staged = stage_with(store, At("copy-chunk", append), path=copy_path)
    assert (reason, staged) == ("transcript-replaced", b"")


def test_in_place_truncate_during_copy_is_transcript_replaced(store: Store, copy_path: str) -> None:
    store.put(BIG)

    def truncate() -> None:
        os.truncate(store.key_dir() / "current.jsonl", 10)

    reason, staged = stage_with(store, At("copy-chunk", truncate), path=copy_path)
    assert (reason, staged) == ("transcript-replaced", b"")


def test_key_dir_swapped_during_copy_is_key_not_a_directory(store: Store, copy_path: str) -> None:
    store.put(BIG)

    def swap_dir() -> None:
        os.rename(store.key_dir(), store.root / "moved")
        shutil.copytree(store.root / "moved", store.key_dir())

    reason, staged = stage_with(store, At("copied", swap_dir), path=copy_path)
    assert (reason, staged) == ("key-not-a-directory", b"")


def test_key_dir_replaced_by_link_during_copy_is_key_not_a_directory(store: Store, copy_path: str) -> None:
    store.put(A)

    def link() -> None:
        os.rename(store.key_dir(), store.root / "moved")
        store.key_dir().symlink_to(store.root / "moved")

    reason, staged = stage_with(store, At("copied", link), path=copy_path)
    assert (reason, staged) == ("key-not-a-directory", b"")


def test_pending_sentinel_during_copy_is_venue_changed(store: Store, copy_path: str) -> None:
    """A promotion that wrote (pending) while we copied: venue wins over the identity check."""
    store.put(A)

    def promotion_in_flight() -> None:
        (store.key_dir() / "venue").write_text("(pending)")
        rename_over(store, B)()

    reason, staged = stage_with(store, At("copied", promotion_in_flight), path=copy_path)
    assert (reason, staged) == ("venue-changed", b"")


def test_sidecar_rewrite_during_copy_does_not_disturb_a_resume(store: Store, copy_path: str) -> None:
    store.put(A)

    def rewrite() -> None:
        (store.key_dir() / "resume-chain").write_text("4")

    reason, staged = stage_with(store, At("copied", rewrite), path=copy_path)
    assert (reason, staged) == ("resumed", A)


# A transcript of one block (4 KiB at most): gate 12 reads the bytes the header gate read (the same
# descriptor, from offset 0) instead of reading them again. The checks after the copy still hold.

ONE_BLOCK = A
assert len(ONE_BLOCK) <= 4096 < len(BIG)


def after_the_header_read(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> list[bool]:
    """Run ``action`` once, right after the first ``pread`` from offset 0 (the header gate's)."""
    scanmemo.MEMO.clear()
    fired: list[bool] = []
    real = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        block = real(fd, length, offset)
        if offset == 0 and not fired:
            fired.append(True)
            action()
        return block

    monkeypatch.setattr(os, "pread", pread)
    return fired


@pytest.mark.parametrize("content, reads", [(ONE_BLOCK, 0), (BIG, 3)], ids=["one block", "three chunks"])
def test_a_one_block_transcript_is_read_once(store: Store, monkeypatch: pytest.MonkeyPatch, content: bytes,
                                             reads: int) -> None:
    scanmemo.MEMO.clear()
    store.put(content)
    calls: list[int] = []
    real = os.preadv

    def preadv(fd: int, buffers: list[bytearray], offset: int) -> int:
        calls.append(offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    stage = store.stage()
    result = resolve(store.settings, KEY, str(stage), pi_version=PI, model=MODEL, clock=NOW_MS)
    assert result is not None and result.verdict.reason == "resumed"
    assert (stage / "current.jsonl").read_bytes() == content
    assert len(calls) == reads, "a one-block transcript is read by the header gate only"


def test_an_append_right_after_the_header_read_of_one_block_is_transcript_replaced(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put(ONE_BLOCK)

    def append() -> None:
        with open(store.key_dir() / "current.jsonl", "ab") as f:
            f.write(b'{"type":"label"}\n')

    fired = after_the_header_read(monkeypatch, append)
    stage = store.stage()
    result = resolve(store.settings, KEY, str(stage), pi_version=PI, model=MODEL, clock=NOW_MS)
    assert fired and result is not None
    assert (result.verdict.reason, (stage / "current.jsonl").read_bytes()) == ("transcript-replaced", b"")
    assert len(scanmemo.MEMO) == 0, "an answer for bytes that changed under the read is not remembered"


def test_a_truncation_right_after_the_header_read_of_one_block_is_transcript_replaced(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put(ONE_BLOCK)
    fired = after_the_header_read(monkeypatch, lambda: os.truncate(store.key_dir() / "current.jsonl", 10))
    stage = store.stage()
    result = resolve(store.settings, KEY, str(stage), pi_version=PI, model=MODEL, clock=NOW_MS)
    assert fired and result is not None
    assert (result.verdict.reason, (stage / "current.jsonl").read_bytes()) == ("transcript-replaced", b"")


# Promotion: swaps between the lock and the rename, and right after the rename.

def promote_with(store: Store, seams: At) -> str:
    stage = store.staged_job(B)
    result = promote(store.settings, KEY, str(stage), host_resume=True, pi_version=PI, model=MODEL, seams=seams)
    assert seams.fired, f"the race at {seams.step!r} never ran"
    return result.reason


def test_key_dir_swapped_after_lock_is_key_not_a_directory(store: Store) -> None:
    store.put(A)

    def swap() -> None:
        os.rename(store.key_dir(), store.root / "moved")
        store.key_dir().mkdir()

    assert promote_with(store, At("locked", swap)) == "key-not-a-directory"
    assert (store.root / "moved" / "current.jsonl").read_bytes() == A
    assert not (store.root / "moved" / "lock").exists(), "the lock in the pinned directory was released"


def test_key_dir_moved_before_rename_is_transcript_diverted(store: Store, events) -> None:
    store.put(A)

    def move() -> None:
        os.rename(store.key_dir(), store.root / "moved")
        store.key_dir().mkdir()
        (store.key_dir() / "current.jsonl").write_bytes(A)

    assert promote_with(store, At("sentinel-written", move)) == "transcript-diverted"
    assert (store.key_dir() / "current.jsonl").read_bytes() == A, "the canonical path never got B"
    assert {"event": "session_promote_skipped", "key": KEY, "reason": "transcript-diverted"} in events()
    assert not any(e["event"] == "session_promoted" for e in events()), "never a false success"


def test_transcript_replaced_right_after_rename_is_transcript_diverted(store: Store) -> None:
    store.put(A)
    assert promote_with(store, At("swapped", rename_over(store, A))) == "transcript-diverted"
    assert (store.key_dir() / "venue").read_text() == "(pending)", "no sidecars after a diverted swap"
    res = resolve(store.settings, KEY, str(store.stage()), pi_version=PI)
    assert res is not None and res.verdict.reason == "venue-changed"


@pytest.mark.parametrize("step", ["key-dir-ready", "locked"])
def test_link_planted_at_key_before_lock_is_refused(store: Store, step: str, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def plant() -> None:
        shutil.rmtree(store.key_dir())
        store.key_dir().symlink_to(elsewhere)

    store.put(A)
    assert promote_with(store, At(step, plant)) == "key-not-a-directory"
    assert list(elsewhere.iterdir()) == [], "nothing written through the planted link"
