"""Gate 12, `compaction-summary-empty` (session-store-spec §3.5): the rule and the streaming scanner."""

from __future__ import annotations

import json
from typing import Any

import pytest
from transcript_samples import sample

from pidispatch.transcript.compaction import (
    PLACEHOLDER,
    SPLIT_TURN_MARKER,
    EmptyCompactionScanner,
    compaction_summary_is_empty,
    file_list_suffix,
    transcript_has_empty_compaction,
)

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


HEAD = sample("s1_after_turn2.jsonl")
EMPTY_LINE = b'{"type":"compaction","id":"c1","parentId":"a06908b5","timestamp":"2026-11-29T12:55:37.656Z","summary":"","firstKeptEntryId":"b816fb4f","tokensBefore":1,"details":{"readFiles":[],"modifiedFiles":[]},"fromHook":false}'  # noqa: E501


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
            + EMPTY_LINE.replace(b'"parentId":"a06908b5"', b'"parentId":"00f4c288"')
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


def test_a_deep_but_parseable_real_compaction_passes() -> None:
    deep = b'{"type":"compaction","summary":"real","details":' + b"[" * 200 + b"]" * 200 + b"}\n"
    assert transcript_has_empty_compaction(HEAD + deep) is False
