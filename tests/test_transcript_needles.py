"""The compaction pre-filter's searches: the C module and the pure-Python fallback give one answer.

The scanner tests in test_transcript_compaction.py run with whichever searches the install provides
(the C ones wherever a compiler was present); here both are held to each other on arbitrary bytes,
the scanner's whole-transcript answer is checked with each, and the scanner's work is shown to be
linear in the chunk however many lines hold a needle.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_transcript_compaction import HEAD, _lines, reference, scan

from pidispatch.transcript import compaction
from pidispatch.transcript.compaction import NATIVE_SEARCH, PYTHON_SEARCHES, Search, transcript_has_empty_compaction


def native() -> tuple[Search, Search]:
    from pidispatch.transcript._needles import find_escape, find_type

    return find_type, find_escape


def test_the_c_search_is_built_by_the_install() -> None:
    # `pip install -e .[test]` compiles it (setup.py, optional so an install without a compiler still
    # works). CI and every benchmark figure assume it; without it staging is several times slower.
    assert NATIVE_SEARCH, "pidispatch.transcript._needles was not built: is a C compiler installed?"


# Bytes rich in the needles' pieces, so matches, near misses and overlaps are common.
_pieces = st.sampled_from(
    [b'"compaction"', b'"compactio', b'compaction"', b"\\u0063", b"\\u006", b"\\u007", b"\\u001b", b"\\u00",
     b"\\\\", b"\\", b"u00", b"6", b"7", b'"', b"\n", b"\x00", b"x", b"\xff"]
)
_data = st.lists(st.one_of(_pieces, st.binary(max_size=8)), max_size=40).map(b"".join)


@settings(max_examples=2000, deadline=None)
@given(_data, st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=400))
def test_c_and_python_find_the_same_needles(data: bytes, start: int, end: int) -> None:
    for c_search, python_search, width in zip(native(), PYTHON_SEARCHES, (12, 5), strict=True):
        expected = python_search(data, start, end)
        assert c_search(data, start, end) == expected
        assert c_search(bytearray(data), start, end) == expected
        assert c_search(memoryview(data), start, end) == expected
        if expected >= 0:
            assert start <= expected and expected + width <= min(end, len(data))


@pytest.mark.parametrize(
    ("data", "type_at", "escape_at"),
    [
        pytest.param(b'ab"compaction"', 2, -1, id="the-literal-type"),
        pytest.param(b"ab\\u0063ompaction", -1, 2, id="an-escaped-letter"),
        pytest.param(b'\\u0074 "compaction"', 7, 0, id="both"),
        pytest.param(b"\\u001b[31m \\u00", -1, -1, id="colour-codes-and-a-cut-escape"),
        pytest.param(b"\\\\\\u006", -1, 2, id="after-backslashes"),
        pytest.param(b'"compaction', -1, -1, id="cut-type"),
        pytest.param(b"", -1, -1, id="empty"),
    ],
)
def test_search_examples(data: bytes, type_at: int, escape_at: int) -> None:
    for find_type, find_escape in (native(), PYTHON_SEARCHES):
        assert (find_type(data, 0, len(data)), find_escape(data, 0, len(data))) == (type_at, escape_at)


def test_c_search_rejects_negative_offsets_and_non_buffers() -> None:
    for search in native():
        with pytest.raises(ValueError):
            search(b"x", -1, 1)
        with pytest.raises(TypeError):
            search("text", 0, 4)


def _with(searches: tuple[Search, Search]) -> Iterator[None]:
    saved = compaction._find_type, compaction._find_escape
    compaction._find_type, compaction._find_escape = searches
    try:
        yield
    finally:
        compaction._find_type, compaction._find_escape = saved


@settings(max_examples=200, deadline=None)
@given(st.lists(_lines(), max_size=5), st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
def test_the_scanner_gives_one_answer_with_either_search(lines: list[bytes], cuts: list[int]) -> None:
    data = HEAD + b"".join(lines)
    answers = []
    for searches in (native(), PYTHON_SEARCHES):
        for _ in _with(searches):
            answers.append(scan(data, cuts))
    assert answers == [reference(data)] * 2


@pytest.mark.parametrize("kind", ["escaped", "literal", "both"])
def test_the_scanner_reads_a_chunk_once_however_many_lines_hold_a_needle(kind: str) -> None:
    # Thousands of candidate lines that are not compaction entries, in one chunk. Count the bytes each
    # search call examines (up to its hit, or to the end when it finds none): the total must stay a
    # small multiple of the chunk (about 2: one pass per needle), not lines × chunk (2 500 here).
    line = {"escaped": b'{"type":"message","text":"\\u0063"}\n',
            "literal": b'{"type":"message","text":"x","k":"compaction"}\n',
            "both": b'{"type":"message","a":"\\u0063","b":"compaction"}\n'}[kind]
    data = HEAD + line * 5000
    examined = 0

    def counting(search: Search) -> Search:
        def run(buf: bytes | bytearray, start: int, end: int) -> int:
            nonlocal examined
            hit = search(buf, start, end)
            examined += (hit if hit >= 0 else min(end, len(buf))) - start
            return hit

        return run

    for _ in _with((counting(compaction._find_type), counting(compaction._find_escape))):
        assert transcript_has_empty_compaction(data) is False
    assert examined <= 4 * len(data), f"{examined} bytes examined for a {len(data)}-byte chunk"
