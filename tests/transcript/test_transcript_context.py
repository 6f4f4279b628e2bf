"""Offline context usage (docs/pi-behaviour.md#offline-measurement) against pi's own get_session_stats numbers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pidispatch.transcript.context import DEFAULT_CONTEXT_WINDOW, ContextUsage, context_usage
from testkit.transcripts import all_sample_names, pi_context, sample, sample_lines

WINDOW = 32000


def cut_after_compaction(data: bytes) -> bytes:
    lines = data.split(b"\n")
    index = next(i for i, line in enumerate(lines) if b'"type":"compaction"' in line)
    return b"\n".join(lines[: index + 1]) + b"\n"


# The offline measurement (docs/pi-behaviour.md#offline-measurement) against pi's own figure on every file.
# Files pi does not read as a session: it starts a new, empty one (and reports 0 tokens), where the offline
# measurement reports nothing (test_no_usable_session_measures_nothing).
NOT_A_SESSION = ["edge/b_empty.before.jsonl", "edge/c_garbage_first.before.jsonl", "edge/c2_no_header.before.jsonl"]
REFERENCE = [name for name in all_sample_names() if name not in NOT_A_SESSION]


@pytest.mark.parametrize("name", REFERENCE)
def test_reference_values(name: str) -> None:
    """pi's own get_session_stats figure, recorded when the file was written (context.json), on every file."""
    expected = pi_context(name)
    assert expected is not None and expected["contextWindow"] == WINDOW
    usage = context_usage(sample(name), WINDOW)
    assert (usage.tokens, usage.window) == (expected["tokens"], WINDOW)
    assert usage.percent == pytest.approx(expected["percent"], rel=1e-12)


@pytest.mark.parametrize("name", NOT_A_SESSION)
def test_what_pi_does_not_read_as_a_session_it_measures_as_a_new_one(name: str) -> None:
    assert pi_context(name) == {"tokens": 0, "contextWindow": WINDOW, "percent": 0}
    assert context_usage(sample(name), WINDOW) == ContextUsage(None, WINDOW, None)


def test_s5_cut_right_after_the_compaction_reports_null() -> None:
    data = cut_after_compaction(sample("s5_auto_compaction_then_resume.jsonl"))
    assert context_usage(data, WINDOW) == ContextUsage(None, WINDOW, None)


S1_TOKENS = pi_context("s1_after_turn2.jsonl")["tokens"]  # what pi's get_session_stats said of that file
MODELS = {"providers": {"fake": {"models": [{"id": "fake-model", "contextWindow": 32000}, {"id": "other"}]}}}


@pytest.mark.parametrize(
    ("context_window", "models", "window"),
    [
        pytest.param(None, MODELS, 32000, id="from-models-json"),
        pytest.param(None, None, DEFAULT_CONTEXT_WINDOW, id="no-models-json-default"),
        pytest.param(
            None, {"providers": {"fake": {"models": [{"id": "other"}]}}}, DEFAULT_CONTEXT_WINDOW, id="model-not-listed"
        ),
        pytest.param(
            None,
            {"providers": {"fake": {"models": [{"id": "fake-model"}]}}},
            DEFAULT_CONTEXT_WINDOW,
            id="window-omitted",
        ),
        pytest.param(None, {"providers": "garbage"}, DEFAULT_CONTEXT_WINDOW, id="malformed-models-json"),
        pytest.param(200000, MODELS, 200000, id="explicit-window-wins"),
    ],
)
def test_window_selection(context_window: int | None, models: Any, window: int) -> None:
    usage = context_usage(sample("s1_after_turn2.jsonl"), context_window, models)
    assert (usage.tokens, usage.window) == (S1_TOKENS, window)
    assert usage.percent == pytest.approx(S1_TOKENS / window * 100)


def test_the_window_follows_the_last_model_on_the_branch() -> None:
    data = sample("s1_after_turn2.jsonl")
    models = {
        "providers": {
            "fake": {"models": [{"id": "fake-model", "contextWindow": 32000}]},
            "big": {"models": [{"id": "m", "contextWindow": 1000000}]},
        }
    }
    change = {
        "type": "model_change",
        "id": "mc2",
        "parentId": sample_lines("s1_after_turn2.jsonl")[-1]["id"],
        "timestamp": "2026-11-29T13:00:00.000Z",
        "provider": "big",
        "modelId": "m",
    }
    usage = context_usage(data + json.dumps(change).encode() + b"\n", None, models)
    assert (usage.tokens, usage.window) == (S1_TOKENS, 1000000)


@pytest.mark.parametrize("window", [0, -5], ids=["zero", "negative"])
def test_a_non_positive_window_reports_nothing_as_pi_does(window: int) -> None:
    usage = context_usage(sample("s1_after_turn2.jsonl"), window)
    assert (usage.tokens, usage.percent) == (None, None)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty-file"),
        pytest.param(b"\n\n", id="blank-lines"),
        pytest.param(sample("edge/c_garbage_first.before.jsonl"), id="garbage-first-line-then-no-header"),
        pytest.param(sample("edge/c2_no_header.before.jsonl"), id="no-header"),
        pytest.param(b'{"type":"session","id":5}\n', id="header-id-not-a-string"),
        pytest.param(b'[{"type":"session","id":"x"}]\n', id="header-not-an-object"),
    ],
)
def test_no_usable_session_measures_nothing(data: bytes) -> None:
    assert context_usage(data, WINDOW) == ContextUsage(None, WINDOW, None)


def test_a_header_only_session_is_empty_context() -> None:
    assert context_usage(sample("edge/e_header_only.before.jsonl"), WINDOW) == ContextUsage(0, WINDOW, 0.0)


S1 = sample("s1_after_turn2.jsonl")
S1_LINES = S1.split(b"\n")


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\n".join(S1_LINES[:3] + [b"garbage {{{"] + S1_LINES[3:]), id="malformed-line-in-the-middle"),
        pytest.param(b"\xef\xbb\xbf" + S1, id="utf8-bom-trimmed-as-pi-does"),
        pytest.param(b"\n".join(S1_LINES[:1] + [S1_LINES[0]] + S1_LINES[1:]), id="duplicate-header"),
        pytest.param(S1.replace(b"\n", b"\r\n"), id="crlf-line-endings"),
        pytest.param(S1.rstrip(b"\n"), id="no-final-newline"),
        pytest.param(
            b"\n".join(S1_LINES[:3] + [b"[1,2]", b"null", b"7"] + S1_LINES[3:]), id="non-object-lines-skipped"
        ),
    ],
)
def test_tolerant_reading_gives_pis_number(data: bytes) -> None:
    assert context_usage(data, WINDOW).tokens == S1_TOKENS


def entry(kind: str, entry_id: str, parent: str | None, **fields: Any) -> bytes:
    value = {"type": kind, "id": entry_id, "parentId": parent, "timestamp": "2026-11-29T13:00:00.000Z", **fields}
    return json.dumps(value, ensure_ascii=False).encode() + b"\n"


def user(entry_id: str, parent: str | None, content: Any) -> bytes:
    return entry("message", entry_id, parent, message={"role": "user", "content": content, "timestamp": 1})


def assistant(
    entry_id: str, parent: str | None, content: list[Any], total: int = 0, stop: str = "stop", **usage: int
) -> bytes:
    fields = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": total, **usage}
    message = {
        "role": "assistant",
        "content": content,
        "api": "a",
        "provider": "fake",
        "model": "fake-model",
        "usage": {**fields, "cost": {"total": 0}},
        "stopReason": stop,
        "timestamp": 1,
    }
    return entry("message", entry_id, parent, message=message)


HEADER = S1_LINES[0] + b"\n"


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        # Estimates: ceil(UTF-16 code units / 4) of what each message carries.
        pytest.param(user("u", None, "abcde"), 2, id="user-string-content"),
        pytest.param(
            user("u", None, [{"type": "text", "text": "abcd"}, {"type": "text", "text": "e"}]), 2, id="user-text-parts"
        ),
        pytest.param(
            user("u", None, [{"type": "image", "data": "A" * 100, "mimeType": "image/png"}]),
            0,
            id="user-images-not-counted",
        ),
        pytest.param(user("u", None, "😀😀"), 1, id="astral-characters-count-two-units"),
        pytest.param(user("u", None, "😀😀😀"), 2, id="six-units-round-up"),
        pytest.param(user("u", None, "éééé"), 1, id="bmp-characters-count-one-unit"),
        pytest.param(
            entry(
                "message",
                "t",
                None,
                message={
                    "role": "toolResult",
                    "toolCallId": "c",
                    "toolName": "read",
                    "isError": False,
                    "timestamp": 1,
                    "content": [
                        {"type": "text", "text": "abcd"},
                        {"type": "image", "data": "", "mimeType": "image/png"},
                    ],
                },
            ),
            1201,
            id="tool-result-image-is-4800-chars",
        ),
        pytest.param(
            assistant(
                "a",
                None,
                [
                    {"type": "thinking", "thinking": "abcd"},
                    {"type": "text", "text": "abcd"},
                    {"type": "toolCall", "id": "c", "name": "bash", "arguments": {"command": "ls", "n": 1.0}},
                ],
                stop="error",
            ),
            9,  # ceil((4 + 4 + len("bash") + len('{"command":"ls","n":1}')) / 4): one ceil per message
            id="assistant-text-thinking-and-compact-tool-call-json",
        ),
        pytest.param(
            assistant(
                "a",
                None,
                [{"type": "toolCall", "id": "c", "name": "x", "arguments": {"n": 1.0, "e": "😀" * 12}}],
                stop="error",
            ),
            10,  # ceil((1 + len('{"n":1,"e":"') + 24 + 2) / 4): JavaScript prints 1.0 as 1, an emoji as 2 units
            id="tool-call-json-measured-like-javascript",
        ),
        pytest.param(
            assistant(
                "a",
                None,
                [{"type": "toolCall", "id": "c", "name": "x", "arguments": {"s": '\n\u0001"é'}}],
                stop="error",
            ),
            5,  # ceil((1 + len('{"s":"') + 2 + 6 + 2 + 1 + 2) / 4): escapes as JSON.stringify writes them
            id="tool-call-json-escapes-like-javascript",
        ),
        pytest.param(
            entry("custom_message", "c", None, customType="x", content="abcdefgh", display=True),
            2,
            id="custom-message-string",
        ),
        pytest.param(
            entry(
                "custom_message",
                "c",
                None,
                customType="x",
                display=False,
                content=[{"type": "text", "text": "abcd"}, {"type": "image", "data": "", "mimeType": "image/png"}],
            ),
            1201,
            id="custom-message-blocks-with-image",
        ),
        pytest.param(entry("branch_summary", "b", None, fromId="z", summary="abcdefghi"), 3, id="branch-summary"),
        pytest.param(
            entry("branch_summary", "b", None, fromId="z", summary=""), 0, id="empty-branch-summary-is-no-message"
        ),
        pytest.param(
            entry(
                "message",
                "x",
                None,
                message={
                    "role": "bashExecution",
                    "command": "ls",
                    "output": "abcdef",
                    "exitCode": 0,
                    "cancelled": False,
                    "truncated": False,
                    "timestamp": 1,
                },
            ),
            2,
            id="bash-execution-command-plus-output",
        ),
        pytest.param(
            entry("custom", "c", None, customType="x", data="a" * 400), 0, id="custom-entries-are-not-context"
        ),
        pytest.param(
            entry("message", "x", None, message={"role": "system", "content": "a" * 40}),
            0,
            id="unknown-role-counts-zero",
        ),
        # The last valid assistant's usage plus estimates of what follows it.
        pytest.param(
            assistant("a", None, [], total=100) + user("u", "a", "abcd"), 101, id="usage-plus-trailing-estimate"
        ),
        pytest.param(
            assistant("a", None, [], input=10, output=5, cacheRead=3, cacheWrite=2),
            20,
            id="zero-total-falls-back-to-the-sum",
        ),
        pytest.param(
            assistant("a", None, [], total=100)
            + assistant("e", "a", [{"type": "text", "text": "abcd"}], total=999, stop="aborted"),
            101,
            id="aborted-reply-is-estimated-not-measured",
        ),
        pytest.param(
            user("u", None, "abcd") + assistant("e", "u", [], total=500, stop="error"),
            1,
            id="only-error-replies-means-all-estimated",
        ),
    ],
)
def test_estimates_and_measurement(body: bytes, tokens: int) -> None:
    assert context_usage(HEADER + body, WINDOW).tokens == tokens


def test_branches_the_last_line_picks_the_active_one() -> None:
    body = user("u", None, "a") + assistant("a1", "u", [], total=100) + assistant("a2", "u", [], total=300)
    assert context_usage(HEADER + body, WINDOW).tokens == 300
    body += user("u2", "a1", "abcd")
    assert context_usage(HEADER + body, WINDOW).tokens == 101


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(user("a", "b", "x") + user("b", "a", "y"), id="two-cycle"),
        pytest.param(user("a", "a", "x"), id="self-parent"),
        pytest.param(user("a", None, "x") + user("b", "c", "y") + user("c", "b", "z"), id="cycle-at-the-leaf"),
    ],
)
def test_a_cyclic_tree_terminates(body: bytes) -> None:
    usage = context_usage(HEADER + body, WINDOW)
    assert usage.tokens is not None and usage.tokens >= 1


def compaction(entry_id: str, parent: str, first_kept: str, summary: str = "abcdefgh") -> bytes:
    return entry("compaction", entry_id, parent, summary=summary, firstKeptEntryId=first_kept, tokensBefore=1)


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        pytest.param(
            user("u1", None, "a") + assistant("a1", "u1", [], total=900) + compaction("c", "a1", "u1"),
            None,
            id="nothing-after-the-compaction",
        ),
        pytest.param(
            user("u1", None, "a")
            + assistant("a1", "u1", [], total=900)
            + compaction("c", "a1", "u1")
            + user("u2", "c", "abcd"),
            None,
            id="only-a-user-message-after",
        ),
        pytest.param(
            user("u1", None, "a")
            + assistant("a1", "u1", [], total=900)
            + compaction("c", "a1", "u1")
            + assistant("e", "c", [], total=50, stop="error"),
            None,
            id="only-an-error-reply-after",
        ),
        pytest.param(
            user("u1", None, "a")
            + assistant("a1", "u1", [], total=900)
            + compaction("c", "a1", "u1")
            + assistant("z", "c", [], total=0),
            None,
            id="a-reply-with-zero-usage-after",
        ),
        pytest.param(
            user("u1", None, "a")
            + assistant("a1", "u1", [], total=900)
            + compaction("c", "a1", "u1")
            + assistant("a2", "c", [], total=40)
            + assistant("e", "a2", [], total=0, stop="error"),
            40,
            id="errors-after-a-measured-reply-are-skipped",
        ),
        pytest.param(
            user("u1", None, "a")
            + assistant("a1", "u1", [], total=900)
            + compaction("c", "a1", "u1")
            + assistant("a2", "c", [], total=40)
            + user("u2", "a2", "abcdefgh"),
            42,
            id="measured-then-trailing-user",
        ),
        pytest.param(
            user("u1", None, "abcd")
            + compaction("c", "u1", "u1")
            + user("u2", "c", "abcd")
            + assistant("e", "u2", [], stop="error", total=1)
            + assistant("z", "e", [], total=0),
            None,
            id="latest-valid-reply-decides-even-with-zero",
        ),
    ],
)
def test_compaction_rules(body: bytes, tokens: int | None) -> None:
    assert context_usage(HEADER + body, WINDOW).tokens == tokens


def test_after_a_compaction_only_messages_after_the_measured_reply_are_estimated() -> None:
    # The summary and the kept messages precede the measured reply, so its usage already covers them.
    body = (
        user("u1", None, "a" * 40)
        + user("u2", "u1", "b" * 8)
        + compaction("c", "u2", "u2", summary="s" * 12)
        + assistant("a2", "c", [], total=30)
        + user("u3", "a2", "c" * 4)
    )
    assert context_usage(HEADER + body, WINDOW).tokens == 31


def test_a_non_integral_token_count_is_not_reported() -> None:
    body = assistant("a", None, [], total=0).replace(b'"totalTokens": 0', b'"totalTokens": 10.5')
    assert context_usage(HEADER + body, WINDOW) == ContextUsage(None, WINDOW, None)


def test_deeply_nested_tool_arguments_are_measured_without_recursion() -> None:
    # Deep enough that a recursive JSON.stringify length (two frames per level) would overflow.
    depth = 700
    arguments = {"a": json.loads("[" * depth + "]" * depth)}
    body = assistant("a", None, [{"type": "toolCall", "id": "c", "name": "n", "arguments": arguments}], stop="error")
    chars = len("n") + len('{"a":}') + 2 * depth
    assert context_usage(HEADER + body, WINDOW).tokens == -(-chars // 4)
