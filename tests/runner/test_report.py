"""The runner's report (docs/architecture.md#container-contract): an agent-reachable termination message, accepted field
by field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pidispatch.api.crds import TOKEN_FIELDS
from pidispatch.contract import TERMINATION_MESSAGE_LIMIT
from pidispatch.contract.report import OUTCOMES, RunnerReport
from pidispatch.record import MAX_SAFE_INTEGER, SESSION_REASONS, RunnerSession

VALID: dict[str, Any] = {
    "session": {"resumed": True, "reason": "resumed"},
    "context": {"tokens": 1200, "window": 200000},
    "tokens": {"input": 10, "output": 20, "total": 30, "cost": 0.125},
    "piVersion": "0.73.1",
    "outcome": "completed",
}


def report(**changes: Any) -> str:
    data = {**VALID, **changes}
    return json.dumps({k: v for k, v in data.items() if v is not DROP})


DROP = object()


def test_a_valid_report_is_accepted_whole() -> None:
    assert RunnerReport.from_message(json.dumps(VALID)) == RunnerReport(
        session=RunnerSession(True, "resumed"), context=(1200, 200000),
        tokens={"input": 10, "output": 20, "total": 30, "cost": 0.125}, pi_version="0.73.1", outcome="completed")


def test_an_empty_object_is_an_empty_report() -> None:
    assert RunnerReport.from_message("{}") == RunnerReport()


def padded(size: int, char: str = "x") -> str:
    """The valid report padded (in an ignored field) to exactly ``size`` bytes of UTF-8."""
    base = json.dumps({**VALID, "pad": ""}, ensure_ascii=False)
    width = len(char.encode())
    fill = size - len(base.encode())
    assert fill >= 0 and fill % width == 0
    return json.dumps({**VALID, "pad": char * (fill // width)}, ensure_ascii=False)


@pytest.mark.parametrize(("message", "accepted"), [
    (padded(TERMINATION_MESSAGE_LIMIT), True),
    (padded(TERMINATION_MESSAGE_LIMIT + 1), False),
    (padded(TERMINATION_MESSAGE_LIMIT - 1, "é"), True),
    (padded(TERMINATION_MESSAGE_LIMIT + 1, "é"), False),
    (padded(64 * 1024), False),
], ids=["exactly 4096 bytes", "4097 bytes", "4095 bytes of 2-byte chars", "4097 bytes of 2-byte chars", "64 KiB"])
def test_size_limit_counts_bytes(message: str, accepted: bool) -> None:
    result = RunnerReport.from_message(message)
    assert (result is not None) is accepted
    if accepted:
        assert result is not None and result.outcome == "completed"


@pytest.mark.parametrize("message", [
    None, "", "not json", "{", '{"outcome": "completed"} trailing', "[]", '"completed"', "1", "null", "true",
    '[{"outcome": "completed"}]',
], ids=["absent", "empty", "not json", "truncated", "trailing garbage", "array", "string", "number", "null", "bool",
        "array of a report"])
def test_not_a_json_object_is_no_report(message: str | None) -> None:
    assert RunnerReport.from_message(message) is None


@pytest.mark.parametrize("message", [
    "[" * 2048 + "]" * 2048,
    '{"a":' * 680 + "1" + "}" * 680,
    '{"session":' + "[" * 2030 + "]" * 2030 + "}",
], ids=["nested arrays within the size limit", "680 nested objects decode to an empty report", "nested inside session"])
def test_deep_nesting_within_the_limit_is_no_report(message: str) -> None:
    """The message is agent-written: a shape that makes the decoder recurse must not crash the operator.

    (A raise here propagates out of the controller's completion step on every retry, so the Job never
    completes and its slot is never freed.)
    """
    assert len(message.encode()) <= TERMINATION_MESSAGE_LIMIT
    assert RunnerReport.from_message(message) in (None, RunnerReport())


# ---- session --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("reason", SESSION_REASONS)
def test_every_enum_reason_is_accepted(reason: str) -> None:
    result = RunnerReport.from_message(report(session={"resumed": False, "reason": reason}))
    assert result is not None and result.session == RunnerSession(False, reason)


@pytest.mark.parametrize("reason", [
    "sessions-dir-unset", "Resumed", "resumed ", "/session/current.jsonl", "../../etc/passwd", "", 1, None,
    ["resumed"],
], ids=["a job reason", "wrong case", "trailing space", "a path", "a traversal", "empty", "number", "null", "list"])
def test_reason_outside_the_closed_enum_becomes_none(reason: Any) -> None:
    result = RunnerReport.from_message(report(session={"resumed": True, "reason": reason}))
    assert result is not None and result.session == RunnerSession(True, None)


@pytest.mark.parametrize("session", [
    {"resumed": "true", "reason": "resumed"}, {"resumed": 1, "reason": "resumed"},
    {"resumed": None, "reason": "resumed"}, {"reason": "resumed"}, "resumed", [True, "resumed"], None,
], ids=["resumed a string", "resumed a number", "resumed null", "resumed missing", "session a string",
        "session a list", "session null"])
def test_session_without_a_boolean_resumed_is_dropped(session: Any) -> None:
    result = RunnerReport.from_message(report(session=session))
    assert result is not None and result.session is None
    assert result.outcome == "completed", "the rest of the report still counts"


# ---- context --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("context", "parsed"), [
    ({"tokens": 0, "window": 1}, (0, 1)),
    ({"tokens": 5.0, "window": 200000.0}, (5, 200000)),
    ({"tokens": MAX_SAFE_INTEGER, "window": MAX_SAFE_INTEGER}, (MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)),
    ({"tokens": -1, "window": 200000}, None),
    ({"tokens": 10, "window": 0}, None),
    ({"tokens": 10, "window": -5}, None),
    ({"tokens": 1.5, "window": 200000}, None),
    ({"tokens": 10, "window": 200000.25}, None),
    ({"tokens": MAX_SAFE_INTEGER + 1, "window": 200000}, None),
    ({"tokens": 10, "window": 10**30}, None),
    ({"tokens": 1e300, "window": 200000}, None),
    ({"tokens": True, "window": 200000}, None),
    ({"tokens": "10", "window": 200000}, None),
    ({"tokens": 10}, None),
    ([10, 200000], None),
], ids=["zero tokens", "integral floats", "max safe integer", "negative tokens", "zero window", "negative window",
        "fractional tokens", "fractional window", "tokens above 2^53-1", "huge window", "huge float tokens",
        "boolean tokens", "string tokens", "window missing", "not an object"])
def test_context(context: Any, parsed: tuple[int, int] | None) -> None:
    result = RunnerReport.from_message(report(context=context))
    assert result is not None and result.context == parsed


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_context_non_finite_is_dropped(literal: str) -> None:
    message = json.dumps(VALID).replace('"tokens": 1200', f'"tokens": {literal}')
    assert literal in message
    result = RunnerReport.from_message(message)
    assert result is not None and result.context is None


# ---- tokens ---------------------------------------------------------------------------------------------

def test_every_known_token_field_is_kept() -> None:
    tokens = {name: i + 1 for i, name in enumerate(TOKEN_FIELDS)}
    result = RunnerReport.from_message(report(tokens=tokens))
    assert result is not None and result.tokens == tokens


@pytest.mark.parametrize(("value", "kept"), [
    (0, True), (12.5, True), (MAX_SAFE_INTEGER, True), (-1, False), (-0.5, False), (True, False), (False, False),
    (MAX_SAFE_INTEGER + 1, False), (1e300, False), ("12", False), (None, False), ([1], False), ({"n": 1}, False),
], ids=["zero", "float cost", "max safe integer", "negative", "negative float", "true", "false",
        "above 2^53-1", "huge float", "string", "null", "list", "object"])
def test_token_values(value: Any, kept: bool) -> None:
    result = RunnerReport.from_message(report(tokens={"input": value, "output": 7}))
    assert result is not None
    assert result.tokens == ({"input": value, "output": 7} if kept else {"output": 7})


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_token_non_finite_is_dropped(literal: str) -> None:
    result = RunnerReport.from_message(f'{{"tokens": {{"input": {literal}, "output": 7}}}}')
    assert result is not None and result.tokens == {"output": 7}


def test_unknown_token_fields_are_dropped() -> None:
    result = RunnerReport.from_message(report(tokens={"input": 1, "apiKey": 2, "__proto__": 3, "Input": 4}))
    assert result is not None and result.tokens == {"input": 1}


@pytest.mark.parametrize("tokens", [[1, 2], "30", 30, None], ids=["list", "string", "number", "null"])
def test_tokens_not_an_object_are_empty(tokens: Any) -> None:
    result = RunnerReport.from_message(report(tokens=tokens))
    assert result is not None and result.tokens == {}


# ---- piVersion and outcome ------------------------------------------------------------------------------

@pytest.mark.parametrize(("version", "kept"), [
    ("0.73.1", True), ("0.74.0-beta.1+build_7", True), ("v1", True), ("9" * 64, True),
    ("9" * 65, False), ("", False), ("0.73.1 ", False), ("0.73.1\n", False), ("../../x", False),
    ("0.73.1;rm -rf /", False), ("0.73.1$(id)", False), ("０.７３", False), ("0.73.1\u202e", False), (73, False),
    (None, False), (["0.73.1"], False),
], ids=["release", "pre-release and build", "prefix v", "64 chars", "65 chars", "empty", "trailing space",
        "newline", "path", "shell", "substitution", "fullwidth digits", "bidi control", "number", "null", "list"])
def test_pi_version(version: Any, kept: bool) -> None:
    result = RunnerReport.from_message(report(piVersion=version))
    assert result is not None and result.pi_version == (version if kept else None)


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_known_outcomes_are_kept(outcome: str) -> None:
    result = RunnerReport.from_message(report(outcome=outcome))
    assert result is not None and result.outcome == outcome


def test_outcomes_are_the_closed_set() -> None:
    assert set(OUTCOMES) == {"completed", "failed", "refused", "aborted"}


@pytest.mark.parametrize("outcome", ["Completed", "success", "completed ", "", 1, True, None, ["completed"]],
                         ids=["wrong case", "unknown word", "trailing space", "empty", "number", "bool", "null",
                              "list"])
def test_other_outcomes_are_dropped(outcome: Any) -> None:
    result = RunnerReport.from_message(report(outcome=outcome))
    assert result is not None and result.outcome is None
    assert result.pi_version == "0.73.1", "the rest of the report still counts"


def test_missing_fields_are_missing() -> None:
    result = RunnerReport.from_message(report(session=DROP, context=DROP, tokens=DROP, piVersion=DROP))
    assert result == RunnerReport(outcome="completed")
