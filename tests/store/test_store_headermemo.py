"""Gates 11 and 13's facts remembered per transcript version (store/scanmemo.HeaderMemo), for the dry run only."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from pidispatch.store import scanmemo
from pidispatch.store.resolve import dry_run, resolve
from testkit.store import DAY_MS, KEY, MODEL, NOW_MS, PI, Store, header, rewrite_in_place, sample

CLEAN = sample("s1_after_turn2.jsonl")
STARTED = datetime.strptime(json.loads(CLEAN.split(b"\n", 1)[0])["timestamp"], "%Y-%m-%dT%H:%M:%S.%f%z")
AGE_DAYS = (NOW_MS - (STARTED - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1)) / DAY_MS
assert 0 < AGE_DAYS < 365, "NOW_MS must come a little after the sample was written"


@pytest.fixture(autouse=True)
def fresh_memos() -> Iterator[None]:
    scanmemo.MEMO.clear()
    scanmemo.HEADERS.clear()
    yield
    scanmemo.MEMO.clear()
    scanmemo.HEADERS.clear()


@pytest.fixture
def header_bytes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes read at offset 0 with ``os.pread`` (the header gate's read; the body scan uses ``preadv``
    and its end-of-file probe reads at the judged size), as bench/refresh.py counts them."""
    counted: list[int] = []
    real = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        block = real(fd, length, offset)
        if offset == 0:
            counted.append(len(block))
        return block

    monkeypatch.setattr(os, "pread", pread)
    return counted


def run(store: Store, clock: float = NOW_MS) -> str:
    return dry_run(store.settings, KEY, pi_version=PI, model=MODEL, clock=clock)[0]


def test_a_second_dry_run_of_one_version_reads_no_header_bytes(store: Store, header_bytes: list[int]) -> None:
    store.configure(max_age_days=60)
    store.put(CLEAN)
    assert run(store) == "resumed"
    first = sum(header_bytes)
    assert first > 0 and len(scanmemo.HEADERS) == 1
    header_bytes.clear()
    assert run(store) == "resumed"
    assert sum(header_bytes) == 0 and scanmemo.HEADERS.hits == 1
    print(f"header bytes read: first dry run {first}, second {sum(header_bytes)}")


def test_a_stage_reads_the_header_itself(store: Store, header_bytes: list[int]) -> None:
    store.put(CLEAN)
    assert run(store) == "resumed"
    header_bytes.clear()
    where = store.stage()
    result = resolve(store.settings, KEY, str(where), pi_version=PI, model=MODEL, clock=NOW_MS)
    assert result is not None and result.verdict.reason == "resumed"
    assert sum(header_bytes) > 0 and scanmemo.HEADERS.hits == 0
    assert (where / "current.jsonl").read_bytes() == CLEAN


def test_a_header_rewritten_in_place_with_size_and_mtime_restored_is_judged_afresh(
    store: Store, header_bytes: list[int]
) -> None:
    path = store.put(CLEAN)
    assert run(store) == "resumed"
    damaged = CLEAN.replace(b'"type":"session"', b'"type":"sessiom"', 1)
    assert damaged != CLEAN
    rewrite_in_place(path, damaged)  # same inode, size and mtime; only the ctime moves
    header_bytes.clear()
    assert run(store) == "unparseable"
    assert sum(header_bytes) > 0 and scanmemo.HEADERS.hits == 0


def test_a_conversation_that_ages_out_between_two_dry_runs_is_refused_by_the_remembered_timestamp(
    store: Store, header_bytes: list[int]
) -> None:
    store.configure(max_age_days=math.floor(AGE_DAYS) + 3, ttl_days=0)
    store.put(CLEAN)
    assert run(store) == "resumed"  # 2 to 3 days under the bound
    later = NOW_MS + 5 * DAY_MS  # 2 to 3 days over it
    header_bytes.clear()
    assert run(store, later) == "conversation-too-old"
    assert sum(header_bytes) == 0 and scanmemo.HEADERS.hits == 1
    scanmemo.HEADERS.clear()
    scanmemo.MEMO.clear()
    assert run(store, later) == "conversation-too-old"  # exactly as without the memo
    assert sum(header_bytes) > 0


@pytest.mark.parametrize("timestamp", [None, "yesterday"])
def test_a_header_without_a_usable_timestamp_stays_refused_as_too_old(store: Store, timestamp: str | None) -> None:
    store.configure(max_age_days=50)
    store.put(header(timestamp) + CLEAN.split(b"\n", 1)[1])
    assert [run(store), run(store)] == ["conversation-too-old", "conversation-too-old"]
    assert scanmemo.HEADERS.hits == 1


@pytest.mark.parametrize("first_line", [b"not json", b'{"type":"message"}', b"\xff\xfe", b"[1]"])
def test_an_unparseable_header_stays_refused(store: Store, header_bytes: list[int], first_line: bytes) -> None:
    store.put(first_line + b"\n" + CLEAN.split(b"\n", 1)[1])
    assert run(store) == "unparseable"
    header_bytes.clear()
    assert run(store) == "unparseable"
    assert sum(header_bytes) == 0 and scanmemo.HEADERS.hits == 1


def test_no_header_is_remembered_when_the_ladder_stops_before_it(store: Store) -> None:
    store.put(CLEAN, venue="elsewhere")
    assert run(store) == "venue-changed"
    assert len(scanmemo.HEADERS) == 0


def test_the_header_memo_is_bounded_least_recently_used_first_out() -> None:
    memo = scanmemo.HeaderMemo(capacity=2)

    def version(ino: int) -> scanmemo.Version:
        return scanmemo.pack(1, ino, 10, 20, 30)

    memo.put(version(1), False)
    memo.put(version(2), 1.5)
    assert memo.get(version(1)) is False  # 1 is now the most recently used
    memo.put(version(3), True)
    assert (memo.get(version(2)), memo.get(version(1)), memo.get(version(3))) == (None, False, True)
    assert len(memo) == 2
