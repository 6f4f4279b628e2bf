"""The provider's own figures read from a reply's bytes as they pass, mapped as pi maps them
(docs/pi-behaviour.md#usage-mapping), whatever the reads' boundaries."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pidispatch.gateway.providers import ANTHROPIC_MESSAGES, OPENAI_COMPLETIONS, OPENAI_RESPONSES
from pidispatch.gateway.usage import Usage, UsageReader


def sse(*events: dict[str, Any], named: bool = False) -> bytes:
    out = b""
    for event in events:
        if named:
            out += f"event: {event['type']}\n".encode()
        out += b"data: " + json.dumps(event).encode() + b"\n\n"
    return out


COMPLETIONS = sse(
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {"choices": [{"index": 0, "delta": {"content": "usage is a word"}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 7, "total_tokens": 1007,
                              "prompt_tokens_details": {"cached_tokens": 300}}},
) + b"data: [DONE]\n\n"

RESPONSES = sse(
    {"type": "response.created", "response": {"id": "resp_1", "usage": None}},
    {"type": "response.output_text.delta", "delta": "hi"},
    {"type": "response.completed", "response": {"id": "resp_1", "usage": {
        "input_tokens": 500, "input_tokens_details": {"cached_tokens": 120}, "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 10}, "total_tokens": 540}}},
    named=True)

ANTHROPIC = sse(
    {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 25, "output_tokens": 1,
                                                                  "cache_read_input_tokens": 9,
                                                                  "cache_creation_input_tokens": 4}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 15}},
    {"type": "message_stop"},
    named=True)


def read(api: str, data: bytes, step: int, *, stream: bool = True) -> Usage | None:
    reader = UsageReader(api, stream=stream)
    for i in range(0, len(data), step):
        reader.feed(data[i:i + step])
    return reader.finish()


@pytest.mark.parametrize("step", [1, 7, 64, 1 << 20])
@pytest.mark.parametrize(("api", "data", "expected"), [
    (OPENAI_COMPLETIONS, COMPLETIONS, Usage(700, 7, 300, 0)),
    (OPENAI_RESPONSES, RESPONSES, Usage(380, 40, 120, 0)),
    (ANTHROPIC_MESSAGES, ANTHROPIC, Usage(25, 15, 9, 4)),
], ids=["chat completions", "responses", "anthropic"])
def test_each_apis_stream_gives_pis_figures_however_it_is_split(api: str, data: bytes, expected: Usage,
                                                                step: int) -> None:
    assert read(api, data, step) == expected


def test_crlf_line_ends_are_read_too() -> None:
    assert read(ANTHROPIC_MESSAGES, ANTHROPIC.replace(b"\n", b"\r\n"), 5) == Usage(25, 15, 9, 4)


def test_the_cache_write_tokens_of_a_completions_reply_are_taken_out_of_cached_as_pi_does() -> None:
    raw = {"prompt_tokens": 1000, "completion_tokens": 5,
           "prompt_tokens_details": {"cached_tokens": 300, "cache_write_tokens": 100}}
    assert read(OPENAI_COMPLETIONS, sse({"choices": [], "usage": raw}), 3) == Usage(700, 5, 200, 100)
    hit = {"prompt_tokens": 80, "completion_tokens": 2, "prompt_cache_hit_tokens": 30}  # DeepSeek's field
    assert read(OPENAI_COMPLETIONS, sse({"choices": [], "usage": hit}), 3) == Usage(50, 2, 30, 0)
    in_choice = {"choices": [{"index": 0, "delta": {}, "usage": {"prompt_tokens": 9, "completion_tokens": 1}}]}
    assert read(OPENAI_COMPLETIONS, sse(in_choice), 4) == Usage(9, 1, 0, 0)  # Moonshot's place


def test_a_message_delta_without_input_keeps_message_starts() -> None:
    data = sse({"type": "message_start", "message": {"usage": {"input_tokens": 10, "output_tokens": 1}}},
               {"type": "message_delta", "usage": {"output_tokens": 3, "input_tokens": None}})
    assert read(ANTHROPIC_MESSAGES, data, 2) == Usage(10, 3, 0, 0)


@pytest.mark.parametrize(("api", "body", "expected"), [
    (OPENAI_COMPLETIONS, {"usage": {"prompt_tokens": 10, "completion_tokens": 2,
                                    "prompt_tokens_details": {"cached_tokens": 4}}}, Usage(6, 2, 4, 0)),
    (OPENAI_RESPONSES, {"usage": {"input_tokens": 10, "output_tokens": 3}}, Usage(10, 3, 0, 0)),
    (ANTHROPIC_MESSAGES, {"usage": {"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 2}},
     Usage(10, 3, 2, 0)),
])
def test_a_json_reply_is_read_when_it_ends(api: str, body: dict[str, Any], expected: Usage) -> None:
    assert read(api, json.dumps(body).encode(), 5, stream=False) == expected


@pytest.mark.parametrize("data", [b"", b"data: [DONE]\n\n", b"data: {not json\n\n", b": comment\n\n",
                                  sse({"choices": [{"delta": {"content": "no usage here"}}]})])
def test_a_reply_without_figures_gives_none(data: bytes) -> None:
    assert read(OPENAI_COMPLETIONS, data, 3) is None


def test_negative_or_non_integer_figures_count_as_zero() -> None:
    raw = {"prompt_tokens": -5, "completion_tokens": "7", "prompt_tokens_details": {"cached_tokens": True}}
    assert read(OPENAI_COMPLETIONS, sse({"choices": [], "usage": raw}), 9) == Usage(0, 0, 0, 0)
