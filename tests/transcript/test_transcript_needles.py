"""The compaction pre-filter's searches: the C module and the pure-Python fallback give one answer.

The scanner tests in test_transcript_compaction.py run with whichever searches the install provides
(the C ones wherever a compiler was present); here both are held to each other on arbitrary bytes,
the scanner's whole-transcript answer is checked with each, and the scanner's work is shown to be
linear in the chunk however many lines hold a needle.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pidispatch.transcript import compaction
from pidispatch.transcript._jsjson import JS_WHITESPACE
from pidispatch.transcript.compaction import (
    NATIVE_SEARCH,
    PLACEHOLDER,
    PYTHON_SEARCHES,
    SPLIT_TURN_MARKER,
    Search,
    parsed_line_has_empty_compaction,
    transcript_has_empty_compaction,
)
from testkit.compaction import HEAD, compaction_lines, reference, scan
from testkit.transcripts import sample


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
    from pidispatch.transcript._needles import clears, first_unclear

    for search in (*native(), clears, first_unclear):
        with pytest.raises(ValueError):
            search(b"x", -1, 1)
        with pytest.raises(ValueError):
            search(b"x", 0, -1)
        with pytest.raises(TypeError):
            search("text", 0, 4)


def test_clears_reads_only_the_range_it_is_given() -> None:
    from pidispatch.transcript._needles import clears, first_unclear

    empty = b'{"type":"compaction","summary":""}'
    data = b'{"type":"label"}\n' + empty + b"\n"
    at = data.index(empty)
    assert clears(data, at, at + len(empty)) is False
    assert clears(data, 0, at - 1) is True  # the label line alone
    assert first_unclear(data, 0, at - 1) == -1
    assert first_unclear(data, 0, len(data) + 100) == at  # an end past the buffer is clamped
    assert first_unclear(data, at, len(data)) == at  # the range's start is a line's start
    assert first_unclear(data, at + 1, len(data)) == -1  # cut after its "{", the line is not JSON
    assert clears(data, 5, 5) is True and first_unclear(data, 5, 5) == -1  # nothing to judge


def _with(searches: tuple[Search, Search]) -> Iterator[None]:
    saved = compaction._find_type, compaction._find_escape
    compaction._find_type, compaction._find_escape = searches
    try:
        yield
    finally:
        compaction._find_type, compaction._find_escape = saved


@settings(max_examples=200, deadline=None)
@given(st.lists(compaction_lines(), max_size=5), st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
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


# --------------------------------------------------------------------------------------------------
# `clears`: the C pre-judgment that spares gate 12 a parse. It may say "parse it" too often, never
# "cleared" for a line the full judgment calls empty.



def clears(line: bytes) -> bool:
    from pidispatch.transcript._needles import clears as native_clears

    return native_clears(line, 0, len(line))


def first_unclear(data: bytes) -> int:
    from pidispatch.transcript._needles import first_unclear as native_first_unclear

    return native_first_unclear(data, 0, len(data))


def sound(line: bytes) -> None:
    """``clears`` is True only where the full judgment is False (on the line, and inside a buffer)."""
    if clears(line):
        assert parsed_line_has_empty_compaction(line) is False, line
    padded = b'{"type":"message"}\n' + line + b"\n" + b'{"type":"label"}'
    at = first_unclear(padded)
    # Every line before the one it stops at is cleared (all of them when it stops nowhere).
    assert at == -1 or at == 0 or padded[at - 1 : at] == b"\n", (line, at)
    cleared = padded[:at] if at >= 0 else padded
    assert not any(parsed_line_has_empty_compaction(part) for part in cleared.split(b"\n")), line


_TRICKY_SUMMARIES = [
    "", " ", "\t", "\u00a0x", "\ufeffx", "\u3000", "N", PLACEHOLDER, PLACEHOLDER + " ", PLACEHOLDER + "Real",
    "No", "x" + SPLIT_TURN_MARKER, "x" + SPLIT_TURN_MARKER + "turn", SPLIT_TURN_MARKER, "## Goal\nFix it", "Real.",
    "x\n\n<read-files>\na\n</read-files>", "\n\n<read-files>\na\n</read-files>", '"', "\\", "\u001b[0m", "é",
    "x" * 300, "A" + SPLIT_TURN_MARKER.rstrip("\n"),
]
_summary_values = st.one_of(
    st.sampled_from(_TRICKY_SUMMARIES), st.text(alphabet="aN \n\t\u00a0#<>/-*:()TurnCcox\\\"é", max_size=30),
    st.sampled_from([None, 0, 1.5, True, [], {}, ["x"], {"summary": ""}]),
)


@st.composite
def _entry_lines(draw: st.DrawFn) -> bytes:
    """Lines shaped like compaction entries, written every way JSON allows, with duplicate and nested keys."""
    members: list[tuple[str, object]] = []
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        name = draw(st.sampled_from(["type", "summary", "details", "id", "x", "Summary", "summary "]))
        value = draw(st.one_of(_summary_values, st.just("compaction"),
                               st.just({"readFiles": ["a"], "modifiedFiles": []})))
        members.append((name, value))
    ascii_only = draw(st.booleans())
    escape_keys = draw(st.booleans())
    space = draw(st.sampled_from(["", " ", "\t", "\r", " \n "]))
    parts = []
    for name, value in members:
        key = "".join(f"\\u{ord(c):04x}" for c in name) if escape_keys and draw(st.booleans()) else name
        text = json.dumps(value, ensure_ascii=ascii_only)
        if isinstance(value, str) and draw(st.booleans()):  # a letter of the value escaped too
            body = text[1:-1]
            at = draw(st.integers(min_value=0, max_value=max(len(body) - 1, 0)))
            if body[at:at + 1].isalnum():
                body = body[:at] + f"\\u{ord(body[at]):04x}" + body[at + 1:]
            text = '"' + body + '"'
        parts.append(f'{space}"{key}"{space}:{space}{text}{space}')
    line = "{" + ",".join(parts) + "}"
    # The object alone, nested, beside another value, with trailing bytes, or deeper than the C walk goes.
    wrap = draw(st.sampled_from(["@", "[@]", '{"a":@}', "@ {}", " @ ", "@x", "@]", "[" * 70 + "@" + "]" * 70]))
    line = wrap.replace("@", line)
    data = line.encode("utf-8", "surrogatepass")
    cut = draw(st.integers(min_value=0, max_value=len(data)))
    return data[:cut] if draw(st.integers(min_value=0, max_value=9)) == 0 else data


@settings(max_examples=3000, deadline=None)
@given(_entry_lines())
def test_clears_never_spares_a_line_the_full_judgment_calls_empty(line: bytes) -> None:
    sound(line)


@settings(max_examples=1000, deadline=None)
@given(_data)
def test_clears_is_sound_on_arbitrary_bytes(data: bytes) -> None:
    sound(data)


@pytest.mark.parametrize(
    "summary_json",
    [
        pytest.param('""', id="empty"),
        *[pytest.param(json.dumps(ch + "x"), id=f"starts-with-U+{ord(ch):04X}") for ch in JS_WHITESPACE],
        pytest.param(json.dumps(PLACEHOLDER), id="placeholder"),
        pytest.param(json.dumps(PLACEHOLDER + "\n\n<read-files>\na\n</read-files>"), id="placeholder-and-files"),
        pytest.param(json.dumps("x" + SPLIT_TURN_MARKER), id="split-turn-marker-with-empty-turn"),
        pytest.param(json.dumps("x" + SPLIT_TURN_MARKER).replace("T", "\\u0054"), id="marker-with-an-escaped-letter"),
        pytest.param('"\\u0020x"', id="escaped-space-first"),
        pytest.param('"\\n"', id="escaped-newline"),
        pytest.param("null", id="null"),
        pytest.param("1", id="number"),
        pytest.param('["x"]', id="array"),
        pytest.param('{"x":"y"}', id="object"),
    ],
)
def test_clears_leaves_every_possibly_empty_summary_to_the_parser(summary_json: str) -> None:
    details = '"details":{"readFiles":["a"],"modifiedFiles":[]}'
    line = ('{"type":"compaction","summary":' + summary_json + "," + details + "}").encode()
    assert clears(line) is False
    assert first_unclear(line) == 0


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(b'{"type":"compaction"}', id="no-summary-at-all"),
        pytest.param(b'{"type":"compaction","x":{"summary":"Real."}}', id="only-a-nested-summary"),
        pytest.param(b'{"type":"compaction","summary":"Real.","summary":""}', id="the-last-duplicate-is-empty"),
        pytest.param(b'{"type":"compaction","summ\\u0061ry":"","summary":"Real."}', id="a-key-spelled-with-an-escape"),
        pytest.param(b'{"type":"compaction","summary":"Real.","x":' + b"[" * 65 + b"]" * 65 + b"}",
                     id="deeper-than-64"),
    ],
)
def test_clears_leaves_doubtful_keys_and_deep_lines_to_the_parser(line: bytes) -> None:
    assert clears(line) is False
    sound(line)


def test_clears_reads_the_last_summary_as_the_parser_keeps_it() -> None:
    line = b'{"type":"compaction","summary":"","summary":"Real."}'
    assert clears(line) is True
    assert parsed_line_has_empty_compaction(line) is False


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(next(part for part in sample("s5_auto_compaction_then_resume.jsonl").split(b"\n")
                          if b'"type":"compaction"' in part), id="real-pi-entry"),
        pytest.param(b'{"type":"message","text":"the word \\"compaction\\" in a tool output"}', id="a-message"),
        pytest.param(b'[{"type":"compaction","summary":""}]', id="not-an-object"),
        pytest.param(b'{"type":"compaction","summary":""', id="torn"),
        pytest.param(b'{"type":"compaction","summary":"## Goal","x":"\\u0063"}', id="escape-outside-summary"),
    ],
)
def test_clears_spares_the_usual_lines(line: bytes) -> None:
    assert clears(line) is True
    assert parsed_line_has_empty_compaction(line) is False


def test_first_unclear_walks_every_candidate_line_to_the_first_it_cannot_clear() -> None:
    real = b'{"type":"compaction","summary":"Real."}\n'
    empty = b'{"type":"compaction","summary":""}\n'
    word = b'{"type":"message","text":"compaction \\u0063"}\n'
    assert first_unclear(HEAD + real * 3 + word * 3) == -1
    for at in range(5):
        lines = [real, word, real, word]
        lines.insert(at, empty)
        data = HEAD + b"".join(lines)
        where = len(HEAD) + sum(map(len, lines[:at]))
        assert first_unclear(data) == where
        assert first_unclear(data + empty) == where  # only the first
        assert first_unclear(data[:-1]) == where  # the last line without its newline
