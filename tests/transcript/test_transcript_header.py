"""Gate 11/13 helpers: the bounded first-line read, the header predicate and the header timestamp."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from pidispatch.transcript.header import (
    HEADER_READ_LIMIT,
    header_timestamp_ms,
    is_session_header,
    read_first_line,
)
from testkit.transcripts import sample, sample_lines, sample_path

HEADER = (
    b'{"type":"session","version":3,"id":"01a2275d-9d58-76a1-b784-bf9c7a4f66f0",'
    b'"timestamp":"2026-11-29T12:52:56.280Z","cwd":"/workspace"}'
)


class CountingPread:
    """Delegates to the real os.pread and records what was asked for (a seam, not a mock)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, fd: int, length: int, offset: int) -> bytes:
        self.calls.append((length, offset))
        return os.pread(fd, length, offset)

    @property
    def bytes_requested(self) -> int:
        return sum(length for length, _ in self.calls)

    @property
    def furthest_byte(self) -> int:
        return max((offset + length for length, offset in self.calls), default=0)


def first_line_of(path: Path, size: int | None = None) -> tuple[bytes | None, CountingPread]:
    pread = CountingPread()
    fd = os.open(path, os.O_RDONLY)
    try:
        line = read_first_line(fd, path.stat().st_size if size is None else size, pread=pread)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0, "pread must leave the descriptor's offset alone"
    finally:
        os.close(fd)
    return line, pread


def test_a_real_header_costs_one_small_read() -> None:
    line, pread = first_line_of(sample_path("s1_after_turn2.jsonl"))
    assert line == sample("s1_after_turn2.jsonl").split(b"\n", 1)[0]
    assert len(pread.calls) == 1
    assert pread.bytes_requested <= 4096


def test_an_8_mib_transcript_is_judged_by_reading_at_most_the_limit(tmp_path: Path) -> None:
    # Everything after the header is garbage, so any read past the first line would show in the count.
    path = tmp_path / "big.jsonl"
    path.write_bytes(HEADER + b"\n" + b"\xff{garbage" * (8 * 1024 * 1024 // 9))
    line, pread = first_line_of(path)
    assert line == HEADER
    assert is_session_header(line)
    assert pread.furthest_byte <= HEADER_READ_LIMIT


def test_no_newline_within_the_limit_of_a_larger_file_is_none(tmp_path: Path) -> None:
    path = tmp_path / "long-first-line.jsonl"
    path.write_bytes(b'{"type":"session","pad":"' + b"x" * (2 * HEADER_READ_LIMIT) + b'"}\n')
    line, pread = first_line_of(path)
    assert line is None
    assert pread.bytes_requested == HEADER_READ_LIMIT
    assert pread.furthest_byte == HEADER_READ_LIMIT


@pytest.mark.parametrize(
    ("line_length", "expected_found"),
    [
        pytest.param(HEADER_READ_LIMIT - 1, True, id="newline-is-the-last-byte-within-the-limit"),
        pytest.param(HEADER_READ_LIMIT, False, id="newline-is-the-first-byte-past-the-limit"),
    ],
)
def test_the_limit_boundary(tmp_path: Path, line_length: int, expected_found: bool) -> None:
    path = tmp_path / "boundary.jsonl"
    path.write_bytes(b"a" * line_length + b"\n" + b"b" * 100)
    line, pread = first_line_of(path)
    assert (line == b"a" * line_length) if expected_found else line is None
    assert pread.furthest_byte <= HEADER_READ_LIMIT


def test_a_header_only_file_without_newline_returns_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "header-only.jsonl"
    path.write_bytes(HEADER)
    line, _ = first_line_of(path)
    assert line == HEADER


def test_the_judged_size_bounds_the_read_even_if_the_file_grew(tmp_path: Path) -> None:
    path = tmp_path / "grew.jsonl"
    path.write_bytes(b"x" * 100 + b"\n")
    line, pread = first_line_of(path, size=10)
    assert line == b"x" * 10
    assert pread.furthest_byte <= 10


def test_an_empty_file_reads_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    line, pread = first_line_of(path)
    assert line == b""
    assert pread.calls == []


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param(HEADER, True, id="pi-header"),
        pytest.param(b'{"type":"session"}', True, id="minimal-object-with-session-type"),
        pytest.param(HEADER + b"\r", True, id="crlf-line-ending"),
        pytest.param(b'  {"type":"session"}  ', True, id="json-whitespace-around"),
        pytest.param(b"this is not json {{{", False, id="garbage"),
        pytest.param(b"", False, id="empty"),
        pytest.param(b'{"type":"model_change","id":"b816fb4f","parentId":null}', False, id="an-entry-not-a-header"),
        pytest.param(b'{"type":"Session"}', False, id="type-is-case-sensitive"),
        pytest.param(b'{"type":["session"]}', False, id="type-not-a-string"),
        pytest.param(b'["session"]', False, id="array-not-object"),
        pytest.param(b'"session"', False, id="string-not-object"),
        pytest.param(b'{"type":"session","n":NaN}', False, id="nan-is-not-json"),
        pytest.param(b'{"type":"session","n":Infinity}', False, id="infinity-is-not-json"),
        pytest.param(b'{"type":"sess\xffion"}', False, id="invalid-utf8"),
        pytest.param(b'\xef\xbb\xbf{"type":"session"}', False, id="utf8-bom-is-not-json"),
        pytest.param(b'{"type":"session"', False, id="truncated"),
        pytest.param(b'{"type":"session"} {}', False, id="two-values"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, False, id="deep-nesting-does-not-raise"),
        pytest.param(b'{"type":"\\u0073ession"}', True, id="escaped-type-decodes-to-session"),
    ],
)
def test_is_session_header(line: bytes, expected: bool) -> None:
    assert is_session_header(line) is expected


def ms(*args: int, tz: timezone = UTC, millis: int = 0) -> float:
    moment = datetime(*args, tzinfo=tz)
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1) + millis


def header_with(timestamp: str) -> bytes:
    return b'{"type":"session","version":3,"id":"x","timestamp":"' + timestamp.encode() + b'","cwd":"/w"}'


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        pytest.param("2026-11-29T12:52:56.280Z", ms(2026, 11, 29, 12, 52, 56, millis=280), id="pi-form-utc-ms"),
        pytest.param("2026-11-29T12:52:56Z", ms(2026, 11, 29, 12, 52, 56), id="no-fraction"),
        pytest.param("2026-11-29T12:52:56.280+02:00", ms(2026, 11, 29, 10, 52, 56, millis=280), id="positive-offset"),
        pytest.param("2026-11-29T12:52:56-05:30", ms(2026, 11, 29, 18, 22, 56), id="negative-offset"),
        pytest.param("2026-11-29T12:52:56.2Z", ms(2026, 11, 29, 12, 52, 56, millis=200), id="one-digit-fraction"),
        pytest.param(
            "2026-11-29T12:52:56.280999Z", ms(2026, 11, 29, 12, 52, 56, millis=280), id="fraction-truncated-to-ms"
        ),
        pytest.param("1969-12-31T23:59:59Z", -1000.0, id="before-the-epoch"),
        pytest.param("2026-11-29T12:52:56", None, id="naive-no-zone"),
        pytest.param("2026-11-29 12:52:56Z", None, id="space-separator"),
        pytest.param("2026-11-29t12:52:56z", None, id="lowercase-t-and-z"),
        pytest.param("20261129T125256Z", None, id="compact-form"),
        pytest.param("2026-W48-7T12:52:56Z", None, id="week-date"),
        pytest.param("2026-333T12:52:56Z", None, id="ordinal-date"),
        pytest.param("2026-11-29T12:52:56+0200", None, id="offset-without-colon"),
        pytest.param("2026-11-29T12:52Z", None, id="no-seconds"),
        pytest.param("2026-11-29", None, id="date-only"),
        pytest.param("2026-11-29T12:52:56.Z", None, id="empty-fraction"),
        pytest.param("2026-13-01T00:00:00Z", None, id="month-13"),
        pytest.param("2026-02-30T00:00:00Z", None, id="february-30"),
        pytest.param("2026-11-29T24:00:00Z", None, id="hour-24"),
        pytest.param("2026-11-29T23:59:60Z", None, id="leap-second"),
        pytest.param("2026-11-29T12:52:56+24:00", None, id="offset-24-hours"),
        pytest.param("2026-11-29T12:52:56+02:60", None, id="offset-60-minutes"),
        pytest.param("0000-01-01T00:00:00Z", None, id="year-zero"),
        pytest.param("٢٠٢٦-11-29T12:52:56Z", None, id="non-ascii-digits"),
        pytest.param("2026-11-29T12:52:56Z ", None, id="trailing-space"),
        pytest.param("Sun Nov 29 2026 12:52:56 GMT", None, id="javascript-date-string"),
        pytest.param("", None, id="empty-string"),
    ],
)
def test_header_timestamp_ms(timestamp: str, expected: float | None) -> None:
    assert header_timestamp_ms(header_with(timestamp)) == expected


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b'{"type":"session","id":"x"}', id="missing"),
        pytest.param(b'{"type":"session","timestamp":1795956776280}', id="a-number"),
        pytest.param(b'{"type":"session","timestamp":null}', id="null"),
        pytest.param(b'{"type":"session","timestamp":["2026-11-29T12:52:56Z"]}', id="a-list"),
        pytest.param(b"not json", id="line-not-json"),
        pytest.param(b'"2026-11-29T12:52:56Z"', id="line-not-an-object"),
        pytest.param(b'{"timestamp":"2026-11-29T12:52:56\xffZ"}', id="invalid-utf8"),
    ],
)
def test_header_timestamp_unusable(line: bytes) -> None:
    assert header_timestamp_ms(line) is None


def test_sample_header_timestamp_matches_the_first_user_message_time() -> None:
    header, *entries = sample_lines("s1_after_turn1.jsonl")
    started = header_timestamp_ms(sample("s1_after_turn1.jsonl").split(b"\n", 1)[0])
    written = datetime.strptime(header["timestamp"], "%Y-%m-%dT%H:%M:%S.%f%z")
    assert started == (written - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    # The first user message (unix ms, written by pi a moment later) sits just after the header time: the same
    # clock and unit (seconds, or a local-time reading, would be off by far more than a second).
    first_user = next(e["message"]["timestamp"] for e in entries if e["type"] == "message")
    assert 0 < first_user - started < 1000
