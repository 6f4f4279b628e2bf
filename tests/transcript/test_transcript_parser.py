"""The strict v3 parser against real pi files, every entry type, and damaged files."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from pidispatch.transcript import model as m
from pidispatch.transcript.parser import (
    Problem,
    Transcript,
    TranscriptError,
    check_transcript,
    parse_transcript,
    torn_tail,
)
from testkit.transcripts import SAMPLES, VALID, all_sample_names, sample, sample_lines

GLUED = "an entry starts inside this line (appended onto a line with no newline)"
ORPHAN = "parentId does not name an entry on an earlier line"
DAMAGED: dict[str, list[tuple[int, str]]] = {
    "edge/c_garbage_first.before.jsonl": [(1, "not valid JSON (column 1)")],
    "edge/c2_no_header.before.jsonl": [(1, "line 1 must be the session header")],
    "edge/d_torn_last.before.jsonl": [(7, "torn tail")],
    "edge/d_torn_last.after1run.jsonl": [(7, GLUED), (8, ORPHAN)],
    "edge/d_torn_last.after2runs.jsonl": [(7, GLUED), (8, ORPHAN)],
    "edge/d2_no_trailing_newline.before.jsonl": [(7, "torn tail")],
    "edge/d2_no_trailing_newline.after.jsonl": [(7, GLUED), (8, ORPHAN)],
}


def test_every_sample_file_is_classified() -> None:
    assert sorted(VALID + list(DAMAGED)) == all_sample_names(), f"new or missing samples in {SAMPLES}"


@pytest.mark.parametrize("name", VALID)
def test_real_pi_files_parse(name: str) -> None:
    data = sample(name)
    transcript = parse_transcript(data)
    assert check_transcript(data) == []
    lines = data.count(b"\n")
    assert len(transcript.entries) + (transcript.header is not None) + len(transcript.duplicate_header_lines) == lines
    if lines:
        assert transcript.header is not None
        assert transcript.header.id == json.loads(data.split(b"\n", 1)[0])["id"]
        assert transcript.header.cwd == "/workspace"


@pytest.mark.parametrize(("name", "expected"), DAMAGED.items(), ids=list(DAMAGED))
def test_damaged_pi_files_report_every_problem_with_its_line(name: str, expected: list[tuple[int, str]]) -> None:
    problems = check_transcript(sample(name))
    assert [line for line, _ in problems] == [line for line, _ in expected], problems
    for (_, message), (_, fragment) in zip(problems, expected, strict=True):
        assert fragment in message
    with pytest.raises(TranscriptError) as raised:
        parse_transcript(sample(name))
    assert raised.value.problems == problems


@pytest.mark.parametrize(
    ("name", "duplicates"),
    [
        pytest.param("edge/b_empty.after2runs.jsonl", [2], id="empty-file-then-two-runs"),
        pytest.param("edge/c_garbage_first.after.jsonl", [2], id="after-pi-truncated-garbage"),
        pytest.param("edge/e_header_only.after.jsonl", [2], id="header-only-then-a-run"),
        pytest.param("s1_after_turn2.jsonl", [], id="normal-file"),
    ],
)
def test_pis_duplicate_header_line_is_accepted_and_recorded(name: str, duplicates: list[int]) -> None:
    assert parse_transcript(sample(name)).duplicate_header_lines == duplicates


def test_an_empty_file_is_a_valid_new_session() -> None:
    transcript = parse_transcript(b"")
    assert (transcript.header, transcript.entries, transcript.active_path()) == (None, [], [])


def test_a_header_only_file_has_no_entries() -> None:
    transcript = parse_transcript(sample("edge/e_header_only.before.jsonl"))
    assert transcript.header is not None and transcript.entries == []


def test_entry_types_and_roles_of_a_tool_call_session() -> None:
    transcript = parse_transcript(sample("s2_tool_call.jsonl"))
    kinds = [type(entry).__name__ for entry in transcript.entries]
    assert kinds == ["ModelChangeEntry", "ThinkingLevelChangeEntry"] + ["MessageEntry"] * 4
    roles = [entry.message.role for entry in transcript.entries if isinstance(entry, m.MessageEntry)]
    assert roles == ["user", "assistant", "toolResult", "assistant"]
    call = transcript.entries[3].message.content[0]  # type: ignore[union-attr]
    assert isinstance(call, m.ToolCall) and call.arguments == {"command": "echo hello-from-tool"}


def test_compaction_entry_fields() -> None:
    transcript = parse_transcript(sample("s5_auto_compaction_then_resume.jsonl"))
    (compaction,) = [e for e in transcript.entries if isinstance(e, m.CompactionEntry)]
    first_entry = sample_lines("s5_auto_compaction_then_resume.jsonl")[1]  # pi kept everything from the first
    assert first_entry["type"] == "model_change"
    assert (compaction.summary, compaction.firstKeptEntryId, compaction.tokensBefore, compaction.fromHook) == (
        "## Goal\nSUMMARY FROM FAKE",  # the scripted model's reply to pi's summary request
        first_entry["id"],
        20050,  # the scripted usage of the reply that triggered it: 20000 prompt + 50 completion
        False,
    )
    assert compaction.details == {"readFiles": [], "modifiedFiles": []}


HEAD = sample("s1_after_turn2.jsonl")
HEAD_ENTRIES = sample_lines("s1_after_turn2.jsonl")
LEAF = HEAD_ENTRIES[-1]["id"]
FIRST_USER, SECOND_USER = [e["id"] for e in HEAD_ENTRIES if e.get("message", {}).get("role") == "user"]
TS = "2026-11-29T13:00:00.000Z"
USAGE = {
    "input": 1,
    "output": 2,
    "cacheRead": 3,
    "cacheWrite": 4,
    "totalTokens": 10,
    "cost": {"input": 0.1, "output": 0.2, "cacheRead": 0, "cacheWrite": 0, "total": 0.3},
}


def line(**fields: Any) -> bytes:
    """One entry line chained to the sample's leaf; a field given as `...` is left out."""
    entry = {"id": "e0000001", "parentId": LEAF, "timestamp": TS, **fields}
    entry = {key: value for key, value in entry.items() if value is not ...}
    return json.dumps(entry, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


EXTRA_ENTRIES = {
    "custom_message-with-text": (
        line(type="custom_message", customType="ext", content="hello", display=True),
        m.CustomMessageEntry,
    ),
    "custom_message-with-blocks-and-details": (
        line(
            type="custom_message",
            customType="ext",
            content=[{"type": "text", "text": "a"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
            display=False,
            details={"any": ["thing"]},
        ),
        m.CustomMessageEntry,
    ),
    "branch_summary": (
        line(type="branch_summary", fromId=FIRST_USER, summary="we tried X", details=None, fromHook=False),
        m.BranchSummaryEntry,
    ),
    "context_edit-replacing-content": (
        line(type="context_edit", targetId=SECOND_USER, replacement={"content": "shorter"}),
        m.ContextEditEntry,
    ),
    "context_edit-omitting-the-target": (
        line(type="context_edit", targetId=SECOND_USER, replacement=None),
        m.ContextEditEntry,
    ),
    "usage": (
        line(type="usage", kind="cache_warm", provider="fake", model="fake-model", usage=USAGE),
        m.UsageEntry,
    ),
    "custom": (line(type="custom", customType="ext-state", data={"n": 1}), m.CustomEntry),
    "custom-without-data": (line(type="custom", customType="ext-state"), m.CustomEntry),
    "label": (line(type="label", targetId=SECOND_USER, label="checkpoint"), m.LabelEntry),
    "label-cleared": (line(type="label", targetId=SECOND_USER), m.LabelEntry),
    "session_info": (line(type="session_info", name="my session"), m.SessionInfoEntry),
    "compaction-of-a-later-pi-with-usage-and-null-first-kept": (
        line(type="compaction", summary="s", firstKeptEntryId=None, tokensBefore=5, usage=USAGE, fromHook=True),
        m.CompactionEntry,
    ),
    "message-bash-execution": (
        line(
            type="message",
            message={
                "role": "bashExecution",
                "command": "ls",
                "output": "a\n",
                "exitCode": 0,
                "cancelled": False,
                "truncated": False,
                "timestamp": 1,
            },
        ),
        m.MessageEntry,
    ),
    "message-custom-role": (
        line(
            type="message",
            message={"role": "custom", "customType": "hook", "content": "x", "display": True, "timestamp": 1},
        ),
        m.MessageEntry,
    ),
    "message-user-string-content-and-image": (
        line(type="message", message={"role": "user", "content": "plain", "timestamp": 1}),
        m.MessageEntry,
    ),
    "message-assistant-thinking-and-provider-extras": (
        line(
            type="message",
            message={
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig"},
                    {"type": "text", "text": "hi", "textSignature": "t"},
                ],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "m",
                "usage": USAGE,
                "stopReason": "length",
                "timestamp": 1,
            },
        ),
        m.MessageEntry,
    ),
}


@pytest.mark.parametrize(("data", "model"), EXTRA_ENTRIES.values(), ids=list(EXTRA_ENTRIES))
def test_entry_types_not_produced_by_plain_runs_parse(data: bytes, model: type) -> None:
    transcript = parse_transcript(HEAD + data)
    assert isinstance(transcript.entries[-1], model)
    assert transcript.active_path()[-1] is transcript.entries[-1]


def with_assistant(**changes: Any) -> bytes:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "api": "openai-completions",
        "provider": "fake",
        "model": "fake-model",
        "usage": USAGE,
        "stopReason": "stop",
        "timestamp": 1,
        **changes,
    }
    return line(type="message", message={key: value for key, value in message.items() if value is not ...})


HEADER_LINE = HEAD.split(b"\n", 1)[0]

INVALID: dict[str, tuple[bytes, int, str]] = {
    "unknown-entry-type": (HEAD + line(type="bookmark"), 8, "entry type unknown ('bookmark')"),
    "entry-type-missing": (
        HEAD + b'{"id":"x","parentId":null,"timestamp":"' + TS.encode() + b'"}\n',
        8,
        "type missing",
    ),
    "entry-type-not-a-string": (HEAD + line(type=5), 8, "entry type unknown (int)"),
    "id-missing": (HEAD + line(type="custom", customType="c", id=...), 8, "id: Field required"),
    "id-empty": (HEAD + line(type="custom", customType="c", id=""), 8, "id:"),
    "id-not-a-string": (HEAD + line(type="custom", customType="c", id=7), 8, "id:"),
    "parent-missing-from-file": (HEAD + line(type="custom", customType="c", parentId="deadbeef"), 8, "parentId"),
    "parent-on-a-later-line": (
        HEAD
        + line(type="custom", customType="c", parentId="e0000002")
        + line(type="custom", customType="c", id="e0000002"),
        8,
        "earlier line",
    ),
    "duplicate-id": (
        HEAD + line(type="custom", customType="c", id=LEAF),
        8,
        "duplicate entry id (first used on line 7)",
    ),
    "timestamp-naive": (HEAD + line(type="custom", customType="c", timestamp="2026-11-29T13:00:00"), 8, "timestamp"),
    "timestamp-a-number": (HEAD + line(type="custom", customType="c", timestamp=1795956776280), 8, "timestamp"),
    "unknown-envelope-field": (HEAD + line(type="custom", customType="c", extra=1), 8, "extra: Extra inputs"),
    "model-change-without-model": (HEAD + line(type="model_change", provider="fake"), 8, "modelId: Field required"),
    "context-edit-without-replacement-key": (HEAD + line(type="context_edit", targetId="x"), 8, "replacement"),
    "label-without-target": (HEAD + line(type="label", label="x"), 8, "targetId"),
    "usage-entry-without-usage": (HEAD + line(type="usage", kind="k", provider="p", model="m"), 8, "usage"),
    "assistant-input-tokens-a-string": (
        HEAD + with_assistant(usage={**USAGE, "input": "1"}),
        8,
        "message.usage.input: Input should be a valid integer",
    ),
    "assistant-negative-output": (HEAD + with_assistant(usage={**USAGE, "output": -1}), 8, "message.usage.output"),
    "assistant-token-count-a-boolean": (HEAD + with_assistant(usage={**USAGE, "input": True}), 8, "usage.input"),
    "assistant-unknown-stop-reason": (HEAD + with_assistant(stopReason="done"), 8, "message.stopReason"),
    "assistant-missing-usage": (HEAD + with_assistant(usage=...), 8, "message.usage: Field required"),
    "assistant-image-block": (
        HEAD + with_assistant(content=[{"type": "image", "data": "A", "mimeType": "image/png"}]),
        8,
        "message.content",
    ),
    "tool-call-arguments-not-an-object": (
        HEAD + with_assistant(content=[{"type": "toolCall", "id": "c", "name": "bash", "arguments": "ls"}]),
        8,
        "arguments",
    ),
    "unknown-message-role": (HEAD + line(type="message", message={"role": "system", "content": "x"}), 8, "message"),
    "tool-result-without-is-error": (
        HEAD
        + line(
            type="message",
            message={"role": "toolResult", "toolCallId": "c", "toolName": "bash", "content": [], "timestamp": 1},
        ),
        8,
        "message.isError: Field required",
    ),
    "assistant-cost-a-boolean": (
        HEAD + with_assistant(usage={**USAGE, "cost": {**USAGE["cost"], "total": True}}),
        8,
        "message.usage.cost.total: Input should be a valid number",
    ),
    "assistant-token-count-a-whole-float": (
        HEAD + with_assistant(usage={**USAGE, "input": 1.0}),
        8,
        "message.usage.input: Input should be a valid integer",
    ),
    "user-content-neither-string-nor-list": (
        HEAD + line(type="message", message={"role": "user", "content": {"text": "x"}, "timestamp": 1}),
        8,
        "message.content: Input should be a valid string or list",
    ),
    "user-content-a-tool-call-block": (
        HEAD + line(type="message", message={"role": "user", "content": [{"type": "toolCall"}], "timestamp": 1}),
        8,
        "message.content.0: Input tag 'toolCall' found using 'type' does not match any of the expected tags",
    ),
    "block-without-a-type": (HEAD + with_assistant(content=[{"text": "hi"}]), 8, "Unable to extract tag"),
    "envelope-field-name-with-a-newline": (
        HEAD + line(type="custom", customType="c", **{"a\nb": 1}),
        8,
        "'a\\nb': Extra inputs are not permitted",
    ),
    "payload-field-name-a-lone-surrogate": (
        HEAD + with_assistant(lone=1).replace(b'"lone"', b'"\\ud800"'),  # JSON's escape for a lone surrogate
        8,
        "message.'\\ud800': field name is not valid Unicode",
    ),
    "header-version-2": (HEADER_LINE.replace(b'"version":3', b'"version":2') + b"\n", 1, "session header: version"),
    "header-version-true": (
        HEADER_LINE.replace(b'"version":3', b'"version":true') + b"\n",
        1,
        "version: Input should be 3",
    ),
    "header-without-id": (b'{"type":"session","version":3,"timestamp":"' + TS.encode() + b'","cwd":"/w"}\n', 1, "id"),
    "header-unknown-field": (HEADER_LINE[:-1] + b',"model":"x"}\n', 1, "session header: model: Extra inputs"),
    "header-naive-timestamp": (  # the header time cut to whole seconds and no zone
        HEADER_LINE.replace(HEAD_ENTRIES[0]["timestamp"].encode(), HEAD_ENTRIES[0]["timestamp"][:19].encode()) + b"\n",
        1,
        "session header: timestamp",
    ),
    "later-header-malformed": (HEAD + b'{"type":"session"}\n', 8, "session header: version: Field required"),
    "invalid-utf8": (HEAD + b'{"type":"custom","x":"\xff"}\n', 8, "not valid UTF-8 (byte 23 of the line)"),
    "json-array-line": (HEAD + b"[1,2]\n", 8, "not a JSON object (a list)"),
    "nan-is-not-json": (HEAD + line(type="custom", customType="c", data=float("nan")), 8, "not valid JSON"),
    "nested-deeper-than-python-parses": (HEAD + b"[" * 5000 + b"]" * 5000 + b"\n", 8, "nested too deeply to check"),
    "blank-line-in-the-middle": (HEAD + b"\n" + line(type="custom", customType="c"), 8, "blank line"),
    "whitespace-line": (HEAD + b"  \r\n", 8, "blank line"),
    "crlf-is-only-whitespace-for-json": (HEAD.replace(b"}\n", b"}\r\n"), 0, ""),
}


def test_the_crlf_variant_is_accepted_because_json_ignores_the_carriage_return() -> None:
    assert check_transcript(INVALID["crlf-is-only-whitespace-for-json"][0]) == []


@pytest.mark.parametrize(
    ("data", "line_number", "fragment"),
    [value for key, value in INVALID.items() if key != "crlf-is-only-whitespace-for-json"],
    ids=[key for key in INVALID if key != "crlf-is-only-whitespace-for-json"],
)
def test_invalid_lines_are_reported_with_their_line_number(data: bytes, line_number: int, fragment: str) -> None:
    problems = check_transcript(data)
    assert problems, "expected a problem"
    assert {problem.line for problem in problems} == {line_number}, problems
    assert any(fragment in problem.message for problem in problems), problems


def test_all_problems_are_collected_not_just_the_first() -> None:
    data = b"garbage\n" + HEAD.split(b"\n", 1)[1] + b"[]\n" + line(type="bookmark") + b'{"type":"custom"'
    problems = check_transcript(data)
    assert [p.line for p in problems] == [1, 8, 9, 10], problems
    with pytest.raises(TranscriptError) as raised:
        parse_transcript(data)
    assert raised.value.problems == problems
    assert "line 1:" in str(raised.value) and "3 more" in str(raised.value)


def test_problem_messages_do_not_echo_transcript_content() -> None:
    secret = "sk-very-secret-token"
    data = HEAD + with_assistant(usage={**USAGE, "input": secret}, stopReason=secret)
    data += line(type="message", id="e0000002", message={"role": {"key": secret}})
    assert all(secret not in problem.message for problem in check_transcript(data))


def test_what_strict_still_accepts_as_pydantic_did() -> None:
    """Integer costs are read as floats, and a version of 3.0 is version 3 (JSON.parse reads it so)."""
    data = HEADER_LINE.replace(b'"version":3', b'"version":3.0') + b"\n" + HEAD.split(b"\n", 1)[1]
    data += with_assistant(usage={**USAGE, "cost": {**USAGE["cost"], "total": 2}})
    transcript = parse_transcript(data)
    assert transcript.header is not None and transcript.header.version == 3
    message = transcript.entries[-1].message  # type: ignore[union-attr]
    assert isinstance(message, m.AssistantMessage)
    assert type(message.usage.cost.total) is float and message.usage.cost.total == 2.0


def test_payloads_keep_unknown_fields_and_models_are_immutable() -> None:
    transcript = parse_transcript(HEAD + EXTRA_ENTRIES["message-assistant-thinking-and-provider-extras"][0])
    message = transcript.entries[-1].message  # type: ignore[union-attr]
    assert isinstance(message, m.AssistantMessage)
    assert [block.extra_fields for block in message.content] == [{"thinkingSignature": "sig"}, {"textSignature": "t"}]
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.model = "other"  # type: ignore[misc]


def test_problem_is_a_line_and_message_pair() -> None:
    assert Problem(3, "x") == (3, "x")
    assert Problem(3, "x").line == 3


def parse_lines(*entries: dict[str, Any]) -> Transcript:
    body = b"".join(
        json.dumps({"timestamp": TS, "type": "custom", "customType": "c", **e}).encode() + b"\n" for e in entries
    )
    return parse_transcript(HEADER_LINE + b"\n" + body)


def ids(entries: list[Any]) -> list[str]:
    return [entry.id for entry in entries]


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param([{"id": "a", "parentId": None}], ["a"], id="single-root"),
        pytest.param(
            [{"id": "a", "parentId": None}, {"id": "b", "parentId": "a"}, {"id": "c", "parentId": "b"}],
            ["a", "b", "c"],
            id="linear-chain",
        ),
        pytest.param(
            [{"id": "a", "parentId": None}, {"id": "b", "parentId": "a"}, {"id": "c", "parentId": "a"}],
            ["a", "c"],
            id="the-last-line-picks-the-branch",
        ),
        pytest.param(
            [{"id": "a", "parentId": None}, {"id": "b", "parentId": "a"}, {"id": "c", "parentId": None}],
            ["c"],
            id="a-second-root-as-after-pi-reset-the-leaf",
        ),
    ],
)
def test_active_path(entries: list[dict[str, Any]], expected: list[str]) -> None:
    assert ids(parse_lines(*entries).active_path()) == expected


def test_active_path_of_real_files() -> None:
    transcript = parse_transcript(sample("s1_after_turn2.jsonl"))
    assert ids(transcript.active_path()) == ids(transcript.entries)
    after = parse_transcript(sample("edge/e_header_only.after.jsonl"))
    header, duplicate, *entries = sample_lines("edge/e_header_only.after.jsonl")
    assert header == duplicate and header["type"] == "session"
    assert [e["type"] for e in entries] == ["model_change", "thinking_level_change", "message", "message"]
    assert ids(after.active_path()) == [e["id"] for e in entries]


def custom(entry_id: str, parent: str | None) -> m.CustomEntry:
    return m.CustomEntry(type="custom", customType="c", id=entry_id, parentId=parent, timestamp=TS)


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param([custom("a", None), custom("c", "missing")], ["c"], id="orphaned-chain-stops-at-missing-parent"),
        pytest.param([custom("a", "b"), custom("b", "a")], ["a", "b"], id="two-cycle-ends"),
        pytest.param([custom("a", "a")], ["a"], id="self-parent-ends"),
        pytest.param([], [], id="no-entries"),
    ],
)
def test_active_path_terminates_on_trees_the_parser_would_reject(
    entries: list[m.CustomEntry], expected: list[str]
) -> None:
    assert ids(Transcript(header=None, entries=list(entries)).active_path()) == expected


def test_usage_totals_of_a_tool_call_session() -> None:
    totals = parse_transcript(sample("s2_tool_call.jsonl")).usage_totals()
    # The usage of the file's two assistant lines (the tool call, the final reply).
    assert (totals.input, totals.output, totals.cache_read, totals.cache_write) == (594 + 607, 10 + 9, 0, 0)
    assert (totals.total_tokens, totals.cost, totals.assistant_messages) == (604 + 616, 0.0, 2)


def test_usage_totals_count_cache_reads() -> None:
    totals = parse_transcript(sample("s4_cached_tokens.jsonl")).usage_totals()
    assert (totals.input, totals.cache_read, totals.total_tokens) == (700, 300, 1007)


def test_usage_totals_include_error_replies() -> None:
    totals = parse_transcript(sample("s7_http500_retries_then_resume.jsonl")).usage_totals()
    assert totals.assistant_messages == 5
    assert totals.total_tokens == 614  # the four error replies carry zero usage; the resumed reply 614


def test_usage_totals_all_entries_versus_active_path() -> None:
    branch = json.loads(HEAD.split(b"\n")[6])
    branch["id"], branch["parentId"] = "b0000001", FIRST_USER
    branch["message"]["usage"] = USAGE
    data = HEAD + json.dumps(branch).encode() + b"\n"
    transcript = parse_transcript(data)
    everything = transcript.usage_totals()
    active = transcript.usage_totals(active_only=True)
    assert (everything.assistant_messages, everything.total_tokens) == (3, 604 + 618 + 10)
    assert (active.assistant_messages, active.total_tokens) == (1, 10)
    assert active.cost == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"", None, id="empty-file"),
        pytest.param(b"{}\n", None, id="ends-with-newline"),
        pytest.param(b"{}\n{", 3, id="cut-after-the-last-newline"),
        pytest.param(b"{", 0, id="no-newline-at-all"),
        pytest.param(b"{}\n{}\n\n", None, id="blank-last-line"),
    ],
)
def test_torn_tail(data: bytes, expected: int | None) -> None:
    assert torn_tail(data) == expected


@pytest.mark.parametrize(
    "name", ["edge/d_torn_last.before.jsonl", "edge/d2_no_trailing_newline.before.jsonl"], ids=["torn", "unterminated"]
)
def test_cutting_the_torn_tail_repairs_the_real_damaged_files(name: str) -> None:
    data = sample(name)
    offset = torn_tail(data)
    assert offset is not None and data[offset:].count(b"\n") == 0
    repaired = parse_transcript(data[:offset])
    assert len(repaired.entries) == 5
    assert torn_tail(data[:offset]) is None
