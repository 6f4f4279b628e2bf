"""The compaction pre-filter's search: the C module and the pure-Python fallback give one answer.

The scanner tests in test_transcript_compaction.py run with whichever search the install provides (the
C one wherever a compiler was present); here both are held to each other on arbitrary bytes, and the
scanner's whole-transcript answer is checked with each of them.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_transcript_compaction import HEAD, _lines, reference, scan

from pidispatch.transcript import compaction
from pidispatch.transcript.compaction import NATIVE_SEARCH, _first_hit_python


def native():
    from pidispatch.transcript._needles import first

    return first


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
def test_c_and_python_find_the_same_first_needle(data: bytes, start: int, end: int) -> None:
    first = native()
    expected = _first_hit_python(data, start, end)
    assert first(data, start, end) == expected
    assert first(bytearray(data), start, end) == expected
    assert first(memoryview(data), start, end) == expected
    if expected >= 0:
        assert start <= expected and expected + 5 <= min(end, len(data))


@pytest.mark.parametrize(
    ("data", "hit"),
    [
        pytest.param(b'ab"compaction"', 2, id="the-literal-type"),
        pytest.param(b"ab\\u0063ompaction", 2, id="an-escaped-letter"),
        pytest.param(b'\\u0074 "compaction"', 0, id="escape-before-literal"),
        pytest.param(b'"compaction" \\u0074', 0, id="literal-before-escape"),
        pytest.param(b"\\u001b[31m \\u00", -1, id="colour-codes-and-a-cut-escape"),
        pytest.param(b"\\\\\\u006", 2, id="after-backslashes"),
        pytest.param(b"", -1, id="empty"),
    ],
)
def test_c_search_examples(data: bytes, hit: int) -> None:
    assert native()(data, 0, len(data)) == hit
    assert _first_hit_python(data, 0, len(data)) == hit


def test_c_search_rejects_negative_offsets_and_non_buffers() -> None:
    with pytest.raises(ValueError):
        native()(b"x", -1, 1)
    with pytest.raises(TypeError):
        native()("text", 0, 4)


@settings(max_examples=200, deadline=None)
@given(st.lists(_lines(), max_size=5), st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
def test_the_scanner_gives_one_answer_with_either_search(lines: list[bytes], cuts: list[int]) -> None:
    data = HEAD + b"".join(lines)
    answers = []
    for search in (native(), _first_hit_python):
        saved = compaction._first_hit
        compaction._first_hit = search
        try:
            answers.append(scan(data, cuts))
        finally:
            compaction._first_hit = saved
    assert answers == [reference(data)] * 2
