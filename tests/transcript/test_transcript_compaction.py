"""Gate 12, `compaction-summary-empty` (docs/store-contract.md#empty-compaction-summaries): the rule and the streaming
scanner."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pidispatch.transcript.compaction import (
    PLACEHOLDER,
    SPLIT_TURN_MARKER,
    EmptyCompactionScanner,
    compaction_summary_is_empty,
    file_list_suffix,
    transcript_has_empty_compaction,
)
from testkit.compaction import HEAD, compaction_line, compaction_lines, escaped, reference, scan
from testkit.transcripts import entry_ids, sample

SPLIT = SPLIT_TURN_MARKER


def suffix(read: list[str], modified: list[str]) -> str:
    """pi's formatFileOperations, written out independently of the code under test."""
    sections = []
    if read:
        sections.append("<read-files>\n" + "\n".join(read) + "\n</read-files>")
    if modified:
        sections.append("<modified-files>\n" + "\n".join(modified) + "\n</modified-files>")
    return "\n\n" + "\n\n".join(sections) if sections else ""


def details(read: list[str], modified: list[str]) -> dict[str, list[str]]:
    return {"readFiles": read, "modifiedFiles": modified}


NONE = details([], [])
AB = details(["src/a.mjs"], ["src/b.mjs"])
AB_SUFFIX = suffix(["src/a.mjs"], ["src/b.mjs"])
PREVIOUS_WITH_READ = "## Goal\nPrior work.\n\n<read-files>\nsrc/a.mjs\n</read-files>"
PREVIOUS_WITH_BOTH = PREVIOUS_WITH_READ + "\n\n<modified-files>\nsrc/b.mjs\n</modified-files>"
TAG_NAMES = details(["x\n\n<read-files>\ny", "q\n</read-files>"], ["z</modified-files>", "\n\n<modified-files>\n"])
TAG_SUFFIX = suffix(["x\n\n<read-files>\ny", "q\n</read-files>"], ["z</modified-files>", "\n\n<modified-files>\n"])
MARKER_NAMES = details(["a" + SPLIT + "b"], [PLACEHOLDER])
MARKER_SUFFIX = suffix(["a" + SPLIT + "b"], [PLACEHOLDER])


@pytest.mark.parametrize(
    ("summary", "entry_details", "empty"),
    [
        # What a refused summary call leaves behind.
        pytest.param("", NONE, True, id="refused-whole-turn-no-files"),
        pytest.param(" \n\t ", NONE, True, id="whitespace-only"),
        pytest.param(AB_SUFFIX, AB, True, id="refused-whole-turn-only-file-lists"),
        pytest.param(PLACEHOLDER + SPLIT, NONE, True, id="refused-split-turn-no-history"),
        pytest.param(PLACEHOLDER + SPLIT + AB_SUFFIX, AB, True, id="refused-split-turn-no-history-with-files"),
        pytest.param(SPLIT, NONE, True, id="refused-split-turn-both-calls"),
        pytest.param(SPLIT + AB_SUFFIX, AB, True, id="refused-split-turn-both-calls-with-files"),
        pytest.param(PLACEHOLDER, NONE, True, id="placeholder-alone"),
        pytest.param(PLACEHOLDER + SPLIT + " \n ", NONE, True, id="split-turn-part-only-whitespace"),
        pytest.param(PLACEHOLDER + SPLIT.rstrip("\n"), NONE, True, id="split-marker-trimmed-at-the-end"),
        # A split turn with no new history reuses the previous summary, file lists and all (upstream #541).
        pytest.param(
            PREVIOUS_WITH_READ + SPLIT + suffix(["src/a.mjs"], []),
            details(["src/a.mjs"], []),
            True,
            id="reused-previous-summary-read-list-then-empty-turn",
        ),
        pytest.param(
            PREVIOUS_WITH_BOTH + SPLIT + AB_SUFFIX, AB, True, id="reused-previous-summary-both-lists-then-empty-turn"
        ),
        pytest.param(
            PLACEHOLDER + SPLIT + "turn" + SPLIT + AB_SUFFIX,
            AB,
            True,
            id="reused-previous-split-summary-then-empty-turn",
        ),
        # Real summaries stay real, with or without the same lists.
        pytest.param("## Goal\nFix the bug.", NONE, False, id="real-summary"),
        pytest.param("## Goal\nFix the bug." + AB_SUFFIX, AB, False, id="real-summary-with-the-same-lists"),
        pytest.param(PLACEHOLDER + SPLIT + "## Original Request\nx", NONE, False, id="split-turn-with-real-turn-part"),
        pytest.param(
            PREVIOUS_WITH_BOTH + SPLIT + "## Original Request\nx" + AB_SUFFIX,
            AB,
            False,
            id="reused-previous-summary-with-real-turn-part",
        ),
        pytest.param(PLACEHOLDER + " And then we fixed it.", NONE, False, id="placeholder-inside-real-text"),
        pytest.param("No prior history", NONE, False, id="placeholder-without-its-period-is-text"),
        # Adversarial file names: the suffix is rebuilt byte-exactly, so tag look-alikes cannot move the cut.
        pytest.param(TAG_SUFFIX, TAG_NAMES, True, id="names-containing-tags-only-lists"),
        pytest.param("Real." + TAG_SUFFIX, TAG_NAMES, False, id="names-containing-tags-after-real-text"),
        pytest.param(MARKER_SUFFIX, MARKER_NAMES, True, id="names-containing-marker-and-placeholder-only-lists"),
        pytest.param("Real." + MARKER_SUFFIX, MARKER_NAMES, False, id="names-containing-marker-after-real-text"),
        pytest.param(
            PLACEHOLDER + SPLIT + "turn" + MARKER_SUFFIX,
            MARKER_NAMES,
            False,
            id="marker-in-a-name-does-not-hide-the-real-turn-part",
        ),
        pytest.param(
            suffix(["\n"], ["", " "]), details(["\n"], ["", " "]), True, id="names-that-are-empty-or-whitespace"
        ),
        # Lists pi did not append (details say none) are the model's own text.
        pytest.param("\n\n<read-files>\na\n</read-files>", NONE, False, id="lists-absent-from-details-are-content"),
        # Details that cannot rebuild pi's suffix: trailing lists are removed by shape instead.
        pytest.param(AB_SUFFIX, None, True, id="no-details-only-lists"),
        pytest.param("Real." + AB_SUFFIX, None, False, id="no-details-real-text-and-lists"),
        pytest.param(AB_SUFFIX, "garbage", True, id="details-not-an-object-only-lists"),
        pytest.param(AB_SUFFIX, {"readFiles": "src/a.mjs"}, True, id="read-files-not-a-list"),
        pytest.param(AB_SUFFIX, {"readFiles": [1], "modifiedFiles": []}, True, id="a-file-name-not-a-string"),
        pytest.param(AB_SUFFIX, details(["other"], []), True, id="details-disagree-with-the-summary-lists"),
        pytest.param(PLACEHOLDER + SPLIT + "turn" + AB_SUFFIX, None, False, id="shape-strip-keeps-a-real-turn-part"),
        pytest.param(PREVIOUS_WITH_BOTH + SPLIT + AB_SUFFIX, None, True, id="shape-strip-cuts-only-the-last-lists"),
        pytest.param("", {"readFiles": None, "modifiedFiles": None}, True, id="null-lists-mean-none"),
        # Whitespace is what JavaScript's trim() removes.
        pytest.param("\ufeff\u00a0\u2028", NONE, True, id="javascript-whitespace"),
        pytest.param("\x1c", NONE, False, id="python-only-whitespace-is-text"),
    ],
)
def test_compaction_summary_is_empty(summary: str, entry_details: Any, empty: bool) -> None:
    entry = {"type": "compaction", "summary": summary, "firstKeptEntryId": "x", "tokensBefore": 1}
    if entry_details is not None:
        entry["details"] = entry_details
    assert compaction_summary_is_empty(entry) is empty


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param({"type": "compaction"}, id="summary-missing"),
        pytest.param({"type": "compaction", "summary": None}, id="summary-null"),
        pytest.param({"type": "compaction", "summary": 5}, id="summary-a-number"),
        pytest.param({"type": "compaction", "summary": ["text"]}, id="summary-a-list"),
    ],
)
def test_a_summary_that_is_not_text_counts_as_empty(entry: dict[str, Any]) -> None:
    assert compaction_summary_is_empty(entry) is True


@pytest.mark.parametrize(
    ("read", "modified"),
    [
        pytest.param([], [], id="none"),
        pytest.param(["src/a.mjs"], [], id="read-only"),
        pytest.param([], ["src/b.mjs"], id="modified-only"),
        pytest.param(["src/a.mjs", "src/c.mjs"], ["src/b.mjs", "src/d.mjs"], id="several"),
        pytest.param(["x\n\n<read-files>\ny"], ["z</modified-files>"], id="tag-look-alikes"),
    ],
)
def test_file_list_suffix_matches_pis_format(read: list[str], modified: list[str]) -> None:
    assert file_list_suffix(details(read, modified)) == suffix(read, modified)


def test_real_s5_compaction_is_not_empty() -> None:
    assert transcript_has_empty_compaction(sample("s5_auto_compaction_then_resume.jsonl")) is False


def with_summary(data: bytes, summary: str, details_value: Any = None) -> bytes:
    lines = data.split(b"\n")
    for index, line in enumerate(lines):
        if b'"type":"compaction"' in line:
            entry = json.loads(line)
            entry["summary"] = summary
            if details_value is not None:
                entry["details"] = details_value
            lines[index] = json.dumps(entry, separators=(",", ":")).encode()
    return b"\n".join(lines)


S5_EMPTY = with_summary(sample("s5_auto_compaction_then_resume.jsonl"), "")


@pytest.mark.parametrize("chunk_size", [1, 7, 100, 1024, 65536], ids=lambda size: f"chunks-of-{size}")
def test_scanner_finds_an_empty_summary_whatever_the_chunking(chunk_size: int) -> None:
    scanner = EmptyCompactionScanner()
    for start in range(0, len(S5_EMPTY), chunk_size):
        scanner.feed(S5_EMPTY[start : start + chunk_size])
    assert scanner.finish() is True


@pytest.mark.parametrize("chunk_size", [1, 13, 65536], ids=lambda size: f"chunks-of-{size}")
def test_scanner_passes_a_real_summary_whatever_the_chunking(chunk_size: int) -> None:
    data = sample("s5_auto_compaction_then_resume.jsonl")
    scanner = EmptyCompactionScanner()
    for start in range(0, len(data), chunk_size):
        scanner.feed(data[start : start + chunk_size])
    assert scanner.finish() is False


FIRST, _, FIRST_USER, _, _, LEAF = entry_ids("s1_after_turn2.jsonl")  # HEAD's entries
EMPTY_LINE = (
    b'{"type":"compaction","id":"c1","parentId":"%s","timestamp":"2026-11-29T12:55:37.656Z","summary":"",'
    b'"firstKeptEntryId":"%s","tokensBefore":1,"details":{"readFiles":[],"modifiedFiles":[]},"fromHook":false}'
) % (LEAF.encode(), FIRST.encode())
OFF_BRANCH = EMPTY_LINE.replace(b'"parentId":"%s"' % LEAF.encode(), b'"parentId":"%s"' % FIRST_USER.encode())
assert OFF_BRANCH != EMPTY_LINE


@pytest.mark.parametrize(
    ("data", "found"),
    [
        pytest.param(HEAD + EMPTY_LINE + b"\n", True, id="empty-compaction-line"),
        pytest.param(HEAD + EMPTY_LINE, True, id="empty-compaction-on-a-last-line-without-newline"),
        pytest.param(HEAD + EMPTY_LINE[:-1] + b"\n", False, id="torn-compaction-line-is-skipped"),
        pytest.param(HEAD + b"garbage\n" + EMPTY_LINE + b"\n", True, id="after-an-unparseable-line"),
        pytest.param(
            HEAD + EMPTY_LINE.replace(b'"type":"compaction"', b'"type":"\\u0063ompaction"') + b"\n",
            True,
            id="type-spelled-with-unicode-escapes",
        ),
        pytest.param(
            HEAD + EMPTY_LINE.replace(b'"fromHook":false', b'"x":"\xff\xfe","fromHook":false') + b"\n",
            True,
            id="invalid-utf8-elsewhere-in-the-line-as-pi-reads-it",
        ),
        pytest.param(
            HEAD
            + OFF_BRANCH
            + b"\n"
            + HEAD.split(b"\n")[6],
            True,
            id="on-a-branch-that-is-not-active",
        ),
        pytest.param(
            HEAD + EMPTY_LINE.replace(b'"type":"compaction"', b'"type":"message"') + b"\n",
            False,
            id="not-a-compaction-entry",
        ),
        pytest.param(
            HEAD + b'{"type":"message","text":"\\"compaction\\" with \\"summary\\":\\"\\""}\n',
            False,
            id="the-word-in-a-message",
        ),
        pytest.param(b"", False, id="empty-transcript"),
        pytest.param(b"\n\n\n", False, id="blank-lines"),
        pytest.param(EMPTY_LINE.replace(b'"summary":""', b'"summary":NaN') + b"\n", False, id="nan-is-not-json"),
    ],
)
def test_transcript_has_empty_compaction(data: bytes, found: bool) -> None:
    assert transcript_has_empty_compaction(data) is found


def test_scanner_reports_once_found_and_finish_is_repeatable() -> None:
    scanner = EmptyCompactionScanner()
    scanner.feed(HEAD + EMPTY_LINE + b"\n")
    scanner.feed(b"more bytes after the answer is known\n")
    assert scanner.finish() is True
    assert scanner.finish() is True


def test_a_compaction_line_too_deep_for_python_fails_closed() -> None:
    # JavaScript's JSON.parse reads 5000 levels; Python's cannot, so the entry cannot be judged here.
    deep = b'{"type":"compaction","summary":"real","details":' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    assert transcript_has_empty_compaction(HEAD + deep) is True


def test_an_empty_compaction_beside_a_number_longer_than_python_reads_is_found() -> None:
    # JSON.parse reads a 5000-digit integer (as Infinity) and so the entry; Python's int() refuses
    # more than 4300 digits. Skipping the line as unparseable would let this empty summary resume.
    line = EMPTY_LINE.replace(b'"tokensBefore":1', b'"tokensBefore":' + b"1" * 5000)
    assert transcript_has_empty_compaction(HEAD + line + b"\n") is True
    real = line.replace(b'"summary":""', b'"summary":"Real."')
    assert transcript_has_empty_compaction(HEAD + real + b"\n") is False


def test_a_deep_but_parseable_real_compaction_passes() -> None:
    deep = b'{"type":"compaction","summary":"real","details":' + b"[" * 200 + b"]" * 200 + b"}\n"
    assert transcript_has_empty_compaction(HEAD + deep) is False


# --------------------------------------------------------------------------------------------------
# The scanner's pre-filter: only lines holding `"compaction"` or a `\u00[67]` escape are parsed. These
# pin that it never hides an entry pi would read, wherever the chunk boundaries fall.


TYPE_SPELLINGS = [
    pytest.param("compaction", id="literal"),
    pytest.param(escaped("compaction"), id="every-letter-escaped"),
    pytest.param(escaped("compaction", upper=True), id="every-letter-escaped-upper-case-hex"),
    *(
        pytest.param(escaped("compaction", {index}, upper=index % 2 == 1), id=f"letter-{index}-{letter}-escaped")
        for index, letter in enumerate("compaction")
    ),
]


@pytest.mark.parametrize("type_body", TYPE_SPELLINGS)
def test_the_type_spelled_with_any_escapes_is_found_across_every_chunk_boundary(type_body: str) -> None:
    line = compaction_line(type_body, "", spaced=True)
    data = HEAD + line + b'{"type":"label","id":"l1"}\n'
    assert reference(data) is True
    start = len(HEAD)
    # Every single cut through the entry, and every pair of cuts through its type token.
    for cut in range(start - 1, start + len(line) + 1):
        assert scan(data, [cut]) is True, cut
    token = start + line.index(b'"', line.index(b":") + 1)
    for first in range(token - 2, token + len(type_body) + 3):
        for second in range(first + 1, token + len(type_body) + 4):
            assert scan(data, [first, second]) is True, (first, second)


@pytest.mark.parametrize("type_body", TYPE_SPELLINGS)
def test_a_real_summary_is_not_flagged_whatever_the_spelling(type_body: str) -> None:
    data = HEAD + compaction_line(type_body, "## Goal\\nFix it.")
    assert reference(data) is False
    assert all(scan(data, [cut]) is False for cut in range(len(HEAD), len(data)))


@pytest.mark.parametrize("chunk_size", [1, 2, 5, 11, 12, 13, 64], ids=lambda size: f"chunks-of-{size}")
def test_an_entry_split_into_many_small_chunks_is_found(chunk_size: int) -> None:
    data = HEAD + compaction_line(escaped("compaction", {0, 9}), "") + b"tail without newline"
    assert scan(data, list(range(0, len(data), chunk_size))) is True


@pytest.mark.parametrize(
    ("summary_body", "empty"),
    [
        pytest.param("\\u0022", False, id="a-quote-written-as-u0022"),
        pytest.param("say \\u0022compaction\\u0022", False, id="quoted-word-written-with-u0022"),
        pytest.param("\\u0020\\u0009\\u000a\\u000d", True, id="ascii-whitespace-written-as-escapes"),
        pytest.param("\\u00a0\\u2028\\ufeff\\u3000", True, id="javascript-whitespace-written-as-escapes"),
        pytest.param("\\u001c", False, id="python-only-whitespace-escape-is-text"),
        pytest.param(escaped(PLACEHOLDER), True, id="placeholder-written-as-escapes"),
        pytest.param(escaped(PLACEHOLDER + SPLIT) + "\\u0020", True, id="split-marker-written-as-escapes"),
        pytest.param(escaped(PLACEHOLDER + SPLIT + "x"), False, id="real-turn-part-written-as-escapes"),
    ],
)
def test_escapes_inside_the_summary_are_judged_as_decoded(summary_body: str, empty: bool) -> None:
    data = HEAD + compaction_line("compaction", summary_body)
    assert reference(data) is empty
    for chunk_size in (1, 7, 65536):
        assert scan(data, list(range(0, len(data), chunk_size))) is empty


@pytest.mark.parametrize(
    ("first_type", "second_type"),
    [
        pytest.param("compaction", "compaction", id="literal-then-literal"),
        pytest.param(escaped("compaction", {3}), "compaction", id="escaped-then-literal"),
        pytest.param("compaction", escaped("compaction", {3}), id="literal-then-escaped"),
        pytest.param(escaped("compaction", {1}), escaped("compaction", {8}), id="escaped-then-escaped"),
    ],
)
def test_every_candidate_line_in_one_chunk_is_judged(first_type: str, second_type: str) -> None:
    # Real summaries first, the empty one last: the search must go on past each candidate it judged.
    data = (
        HEAD
        + compaction_line(first_type, "Real.")
        + b'{"type":"label","id":"l1"}\n'
        + compaction_line(second_type, "Also real.")
        + compaction_line(first_type, "")
        + b'{"type":"label","id":"l2"}\n'
    )
    assert reference(data) is True
    assert scan(data, []) is True
    assert scan(data[: data.rindex(b'{"type":"label"')], []) is True  # the empty one on the last line


def test_the_word_behind_escaped_quotes_in_a_message_is_not_an_entry() -> None:
    data = HEAD + b'{"type":"message","text":"\\u0022compaction\\u0022 \\"compaction\\" \\u0063ompaction"}\n'
    assert reference(data) is False
    assert scan(data, []) is False


@pytest.mark.parametrize("empty", [True, False], ids=["empty-summary", "real-summary"])
def test_crlf_line_endings_are_read_as_pi_reads_them(empty: bool) -> None:
    # pi splits on "\n" only; the "\r" left at the end of each line is JSON whitespace.
    crlf_head = HEAD.replace(b"\n", b"\r\n")
    data = crlf_head + compaction_line("compaction", "" if empty else "Real.", crlf=True) + b'{"type":"label"}\r\n'
    assert reference(data) is empty
    cr = data.index(b"\r\n", len(crlf_head))
    for cuts in ([], [cr], [cr + 1], [cr - 1, cr + 1], list(range(0, len(data), 3))):
        assert scan(data, cuts) is empty, cuts


def test_a_deep_line_that_cannot_spell_compaction_is_not_refused() -> None:
    # Coloured output (\u001b) nested deeper than Python parses: no `"compaction"` token can be in it,
    # so pi cannot read it as a compaction entry and it is not judged one (fail closed stays for lines
    # that could be).
    deep = b'{"type":"message","text":"\\u001b[31m","x":' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    assert transcript_has_empty_compaction(HEAD + deep) is False


# Random transcripts mixing compaction entries spelled every way pi's JSON.parse accepts, in any
# chunking: the scanner must agree with parsing every line.
@settings(max_examples=300, deadline=None)
@given(st.lists(compaction_lines(), max_size=5), st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
       st.booleans())
def test_scanner_agrees_with_parsing_every_line(lines: list[bytes], cuts: list[int], torn: bool) -> None:
    data = HEAD + b"".join(lines)
    if torn and data.endswith(b"\n"):
        data = data[:-1]  # the last line without its newline: pi still parses it
    assert scan(data, cuts) is reference(data)
