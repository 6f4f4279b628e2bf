"""Property tests: nothing in transcript/ raises on hostile input, except the parser's own error.

The agent owns `/session` and can write any bytes there; the gates, the scanner and the context
measurement run on those bytes in the operator and the runner, where an unexpected exception would
turn bad content into a store fault.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pidispatch.transcript._jsjson import _DECODER, JS_WHITESPACE, TOO_DEEP, _js_int, loads
from pidispatch.transcript.compaction import (
    PLACEHOLDER,
    SPLIT_TURN_MARKER,
    EmptyCompactionScanner,
    compaction_summary_is_empty,
    file_list_suffix,
    transcript_has_empty_compaction,
)
from pidispatch.transcript.context import ContextUsage, context_usage
from pidispatch.transcript.header import header_timestamp_ms, is_session_header
from pidispatch.transcript.model import ENTRY_MODELS
from pidispatch.transcript.parser import Problem, TranscriptError, check_transcript, parse_transcript, torn_tail
from testkit.transcripts import sample

# Moderate counts keep this file to a few seconds; CI runs it on every push, so coverage accumulates.
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CHEAP = settings(max_examples=400, deadline=None)

ENTRY_TYPES = ["session", *ENTRY_MODELS, "bogus"]  # every entry type the parser models, and one it does not
FIELD_NAMES = [
    "type", "id", "parentId", "timestamp", "version", "cwd", "message", "role", "content", "text",
    "usage", "totalTokens", "input", "output", "cacheRead", "cacheWrite", "cost", "stopReason", "summary",
    "details", "readFiles", "modifiedFiles", "firstKeptEntryId", "arguments", "name", "provider", "model",
    "modelId", "replacement", "targetId",
]  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(ENTRY_TYPES + ["user", "assistant", "toolResult", "error", "text", "toolCall", "image"]),
    st.sampled_from(["2026-11-29T12:52:56.280Z", "2026-11-29T12:52:56+02:00", "2026-11-29", PLACEHOLDER]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=6)), inner, max_size=6),
    ),
    max_leaves=25,
)
entry_like = st.fixed_dictionaries(
    {"type": st.sampled_from(ENTRY_TYPES)},
    optional={
        name: json_values
        for name in ["id", "parentId", "timestamp", "message", "summary", "details", "usage", "content", "version"]
    },
)


def dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8", errors="surrogatepass")


json_lines = st.lists(
    st.one_of(entry_like.map(dump), json_values.map(dump), st.binary(max_size=40)), min_size=0, max_size=8
).map(lambda lines: b"\n".join(lines))
transcripts = st.one_of(
    st.binary(max_size=400),
    json_lines,
    json_lines.map(lambda body: body + b"\n"),
    json_lines.map(lambda body: sample("s5_auto_compaction_then_resume.jsonl") + body),
)


def assert_no_escape(data: bytes) -> None:
    """Run every byte-level entry point; only TranscriptError may leave parse_transcript."""
    try:
        parse_transcript(data)
    except TranscriptError as error:
        assert error.problems and all(isinstance(problem, Problem) for problem in error.problems)
    problems = check_transcript(data)
    assert all(isinstance(p, Problem) and p.line >= 1 and isinstance(p.message, str) for p in problems)
    first = data.split(b"\n", 1)[0]
    assert isinstance(is_session_header(first), bool)
    stamp = header_timestamp_ms(first)
    assert stamp is None or math.isfinite(stamp)
    usage = context_usage(data, 32000)
    assert isinstance(usage, ContextUsage)
    assert (usage.tokens is None) == (usage.percent is None)
    assert usage.tokens is None or usage.tokens >= 0
    offset = torn_tail(data)
    assert offset is None or (0 <= offset <= len(data) and (offset == 0 or data[offset - 1 : offset] == b"\n"))


_JS_NUMBERS = json.JSONDecoder(parse_constant=_DECODER.parse_constant, parse_int=_js_int)


@CHEAP
def decoded(text: str) -> tuple[bool, Any]:
    """What ``loads`` must return: ``json.JSONDecoder.decode``'s answer, as ``loads`` reports it (integers
    longer than Python's digit limit read as JSON.parse reads them)."""
    try:
        return True, _JS_NUMBERS.decode(text)
    except ValueError:
        return False, None
    except RecursionError:
        return False, TOO_DEEP


JSONISH = st.text(alphabet=' \t\n\r\x0b\u00a0\ufeff{}[]",:0123456789.eE+-truefalsnNIiy\\u', max_size=40)
# Integers past Python's digit limit (4300), alone, in containers, and beside what JSON.parse refuses.
LONG_NUMBERS = st.tuples(st.sampled_from(["", "-"]), st.integers(min_value=4290, max_value=4400),
                         st.sampled_from(["{}", '{{"n":{},"m":1}}', "[{},2]", "[{},NaN]", "[{}", "{}.5e3"])).map(
    lambda t: t[2].format(t[0] + "9" * t[1]))


@given(st.one_of(JSONISH, LONG_NUMBERS, json_values.map(json.dumps),
                 transcripts.map(lambda b: b.decode("utf-8", "replace"))),
       st.sampled_from(["", " ", "\n", "\t\r\n", "\u00a0", "x"]), st.sampled_from(["", " ", "\r\n", "\u00a0", "]"]))
@CHEAP
def test_loads_answers_as_the_standard_decoder(text: str, before: str, after: str) -> None:
    """``loads`` calls the C scanner directly (no ``decode``/``raw_decode`` layers): same answers, whitespace
    and trailing data included."""
    text = before + text + after
    assert loads(text) == decoded(text)


@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_escape(data: bytes) -> None:
    assert_no_escape(data)


@FAST
@given(transcripts)
def test_json_ish_transcripts_never_escape(data: bytes) -> None:
    assert_no_escape(data)


@FAST
@given(transcripts, st.integers(min_value=1, max_value=64))
def test_scanner_verdict_does_not_depend_on_chunking(data: bytes, chunk_size: int) -> None:
    scanner = EmptyCompactionScanner()
    for start in range(0, len(data), chunk_size):
        scanner.feed(data[start : start + chunk_size])
    assert scanner.finish() is transcript_has_empty_compaction(data)


@FAST
@given(entry_like)
def test_compaction_rule_never_raises_on_any_entry(entry: dict[str, Any]) -> None:
    assert isinstance(compaction_summary_is_empty(entry), bool)


@FAST
@given(json_values)
def test_compaction_rule_never_raises_on_any_details(details: Any) -> None:
    entry = {"type": "compaction", "summary": "\n\n<read-files>\na\n</read-files>", "details": details}
    assert isinstance(compaction_summary_is_empty(entry), bool)


file_names = st.lists(
    st.one_of(st.text(max_size=15), st.sampled_from(["<read-files>", "\n</read-files>", "</modified-files>\n\n"])),
    max_size=3,
)
real_text = st.text(min_size=1, max_size=40).filter(
    lambda text: text.replace(PLACEHOLDER, "").strip(JS_WHITESPACE) and SPLIT_TURN_MARKER.rstrip("\n") not in text
)


@FAST
@given(file_names, file_names)
def test_only_pis_file_lists_are_empty_whatever_the_names(read: list[str], modified: list[str]) -> None:
    details = {"readFiles": read, "modifiedFiles": modified}
    suffix = file_list_suffix(details)
    assert suffix is not None
    for summary in ("", PLACEHOLDER, PLACEHOLDER + SPLIT_TURN_MARKER, SPLIT_TURN_MARKER):
        assert compaction_summary_is_empty({"summary": summary + suffix, "details": details}) is True


@FAST
@given(real_text, file_names, file_names)
def test_a_real_summary_stays_real_whatever_the_names(text: str, read: list[str], modified: list[str]) -> None:
    details = {"readFiles": read, "modifiedFiles": modified}
    suffix = file_list_suffix(details)
    assert suffix is not None
    assert compaction_summary_is_empty({"summary": text + suffix, "details": details}) is False
    turn = {"summary": PLACEHOLDER + SPLIT_TURN_MARKER + text + suffix, "details": details}
    assert compaction_summary_is_empty(turn) is False


windows = st.one_of(st.none(), st.integers(min_value=-(10**30), max_value=10**400), st.floats(allow_nan=True))
models_json = st.one_of(
    json_values,
    st.builds(
        lambda window, provider, model: {"providers": {provider: {"models": [{"id": model, "contextWindow": window}]}}},
        json_values,
        st.sampled_from(["fake", "other"]),
        st.sampled_from(["fake-model", "other"]),
    ),
)


@FAST
@given(transcripts, windows, models_json)
def test_context_usage_never_raises_whatever_the_window_and_models(data: bytes, window: Any, models: Any) -> None:
    usage = context_usage(data, window, models)
    assert isinstance(usage, ContextUsage) and isinstance(usage.window, int)
    assert (usage.tokens is None) == (usage.percent is None)
