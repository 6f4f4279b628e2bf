"""Gate 12's remembered answers (store/scanmemo.py): used only for the very version that was scanned."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator

import pytest

from pidispatch.store import scanmemo
from pidispatch.store.resolve import dry_run, resolve
from testkit.store import KEY, MODEL, NOW_MS, PI, Store, rewrite_in_place, sample
from testkit.transcripts import entry_ids

CLEAN = sample("s1_after_turn2.jsonl")
LEAF = entry_ids("s1_after_turn2.jsonl")[-1]  # CLEAN's last entry: the compaction goes on after it


def compaction(summary: str) -> bytes:
    entry = {"type": "compaction", "id": "c0ffee00", "parentId": LEAF, "timestamp": "2026-11-29T13:00:00.000Z",
             "summary": summary, "firstKeptEntryId": LEAF, "tokensBefore": 1000,
             "details": {"readFiles": [], "modifiedFiles": []}, "fromHook": False}
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


REAL = CLEAN + compaction("Fixed the test.")
EMPTY = CLEAN + compaction("")
assert len(REAL) != len(EMPTY)
SAME_SIZE_EMPTY = CLEAN + compaction(" " * len("Fixed the test."))  # blank summary: empty, same size as REAL
assert len(SAME_SIZE_EMPTY) == len(REAL)


@pytest.fixture(autouse=True)
def fresh_memo() -> Iterator[None]:
    scanmemo.MEMO.clear()
    yield
    scanmemo.MEMO.clear()


def stage(store: Store) -> tuple[str, bytes]:
    where = store.stage()
    result = resolve(store.settings, KEY, str(where), pi_version=PI, model=MODEL, clock=NOW_MS)
    assert result is not None
    return result.verdict.reason, (where / "current.jsonl").read_bytes()


def test_the_second_stage_of_one_version_is_a_remembered_kernel_copy(store: Store) -> None:
    store.put(REAL)
    assert stage(store) == ("resumed", REAL)
    assert (scanmemo.MEMO.hits, len(scanmemo.MEMO)) == (0, 1)
    assert stage(store) == ("resumed", REAL)
    assert scanmemo.MEMO.hits == 1


def test_the_status_dry_run_and_the_next_stage_share_one_scan(store: Store) -> None:
    store.put(EMPTY)
    reason, _ = dry_run(store.settings, KEY, pi_version=PI, model=MODEL, clock=NOW_MS)
    assert reason == "compaction-summary-empty"
    assert stage(store) == ("compaction-summary-empty", b"")
    assert scanmemo.MEMO.hits == 1


def test_an_in_place_rewrite_that_restores_size_and_mtime_is_read_again(store: Store) -> None:
    path = store.put(REAL)
    assert stage(store) == ("resumed", REAL)
    rewrite_in_place(path, SAME_SIZE_EMPTY)  # same inode, size and mtime; only the ctime moves
    assert stage(store) == ("compaction-summary-empty", b"")
    assert scanmemo.MEMO.hits == 0


def test_a_new_transcript_renamed_over_the_key_is_read_again(store: Store) -> None:
    store.put(REAL)
    assert stage(store)[0] == "resumed"
    store.put(SAME_SIZE_EMPTY)  # a new file written and renamed into place, as promotion does
    assert stage(store) == ("compaction-summary-empty", b"")


def test_a_read_that_did_not_cover_the_judged_size_is_not_remembered(store: Store) -> None:
    from testkit.seams import BIG, At

    store.put(BIG)

    def append() -> None:
        with open(store.key_dir() / "current.jsonl", "ab") as f:
            f.write(b'{"type":"label"}\n')

    where = store.stage()
    result = resolve(store.settings, KEY, str(where), pi_version=PI, model=MODEL, clock=NOW_MS,
                     seams=At("copy-chunk", append))
    assert result is not None and result.verdict.reason == "transcript-replaced"
    assert len(scanmemo.MEMO) == 0


def test_the_memo_is_bounded_least_recently_used_first_out() -> None:
    memo = scanmemo.ScanMemo(capacity=3)

    def version(ino: int) -> scanmemo.Version:
        return scanmemo.pack(1, ino, 10, 20, 30)

    for ino in range(5):
        memo.put(version(ino), False)
    assert len(memo) == 3
    assert memo.get(version(0)) is None and memo.get(version(1)) is None
    assert memo.get(version(2)) is False
    memo.put(version(5), True)  # inode 3 is now the least recently used
    assert memo.get(version(3)) is None and memo.get(version(2)) is False
    assert memo.get(version(5)) is True


def test_every_field_of_the_version_counts() -> None:
    """The packed name keeps all five fields apart (a negative mtime too: files from before 1970)."""
    base = (2049, 12, 4096, 1_764_000_000_123_456_789, 1_764_000_000_223_456_789)
    names = {scanmemo.pack(*base)}
    for field in range(5):
        for delta in (1, -1):
            changed = list(base)
            changed[field] += delta
            names.add(scanmemo.pack(*changed))
    assert len(names) == 11
    assert scanmemo.pack(1, 2, 3, -5, -6) != scanmemo.pack(1, 2, 3, 5, 6)


@pytest.mark.parametrize("name", ["s1_after_turn2.jsonl", "s5_auto_compaction_then_resume.jsonl"])
def test_both_copies_stage_the_same_bytes_of_real_pi_files(store: Store, name: str) -> None:
    data = sample(name)
    store.put(data)
    first = stage(store)
    second = stage(store)
    assert scanmemo.MEMO.hits == 1
    assert first == second == ("resumed", data)


def test_a_staged_file_that_refuses_sendfile_gets_the_user_space_copy(store: Store, tmp_path) -> None:
    """``sendfile`` into a file opened ``O_APPEND`` fails with EINVAL (a real refusal by the kernel, as
    some filesystems refuse it): the remembered copy then falls back to reading through user space."""
    from pidispatch.store.gates import METADATA_GATES, Observation, judge
    from pidispatch.store.resolve import _StagedCopy, make_delivery
    from pidispatch.store.seams import NO_SEAMS

    store.put(REAL)
    assert stage(store) == ("resumed", REAL)  # remembered from now on
    target = tmp_path / "appending.jsonl"
    staged = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
    source = os.open(store.key_dir() / "current.jsonl", os.O_RDONLY)
    with pytest.raises(OSError) as refused:
        os.sendfile(staged, source, 0, 1)
    os.close(source)
    assert refused.value.errno == errno.EINVAL, "this kernel accepts sendfile to O_APPEND: the test shows nothing"
    copy = _StagedCopy(staged, NO_SEAMS)
    o = Observation(str(store.root), KEY, store.settings, make_delivery("kubernetes", PI, MODEL), NOW_MS, copy.run)
    try:
        assert judge(o, gates=METADATA_GATES) is None and o.open_transcript()
        assert copy.run(o) is False, "no empty compaction"
        assert copy.complete
    finally:
        o.close()
        os.close(staged)
    assert scanmemo.MEMO.hits == 1, "the remembered path was the one taken"
    assert target.read_bytes() == REAL
