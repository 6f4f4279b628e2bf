"""The real pi 0.73.1 against the scripted model: the proof pattern the e2e tests reuse.

pi runs as the job Pods will run it (`pi -p --session FILE PROMPT`, stdin /dev/null, agent dir and HOME
isolated, offline). What pi wrote is checked with our own strict transcript parser, and what the model
received with the scripted model's request log. No cluster; pi comes from `make pi` (a missing pi fails
these tests, it never skips them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pidispatch.transcript.parser import check_transcript
from testkit.pitool import pi_binary, run_pi
from testkit.scripted_model import ScriptedModel, Usage, text_of, write_agent_dir

pytestmark = pytest.mark.pi  # runs the real pi (make pi): not in `make unit`

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Pi:
    """pi wired to one scripted model, with its own agent dir, HOME and working directory."""

    model: ScriptedModel
    agent: Path
    home: Path
    cwd: Path

    def run(self, session: Path, prompt: str):
        return run_pi("-p", "--session", str(session), prompt, agent_dir=self.agent, home=self.home, cwd=self.cwd,
                      timeout=30)


@pytest.fixture
def pi(tmp_path: Path):
    try:
        pi_binary()
    except (FileNotFoundError, RuntimeError) as e:
        pytest.fail(str(e))
    with ScriptedModel() as model:
        cwd = tmp_path / "work"
        cwd.mkdir()
        yield Pi(model, write_agent_dir(tmp_path / "agent", model.base_url), tmp_path / "home", cwd)


def lines(session: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in session.read_text().splitlines()]


def assistant_messages(session: Path) -> list[dict[str, Any]]:
    return [e["message"] for e in lines(session)
            if e["type"] == "message" and e["message"]["role"] == "assistant"]


def roles_and_texts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], text_of(m.get("content"))) for m in messages]


def test_a_first_run_writes_a_v3_session_and_a_resume_replays_it(pi: Pi, tmp_path: Path):
    session = tmp_path / "s.jsonl"

    first = pi.run(session, "first question")
    assert first.returncode == 0, first.stderr
    assert first.stdout == "Scripted reply #1 to: first question\n"
    data = session.read_bytes()
    assert check_transcript(data) == []
    header = lines(session)[0]
    assert (header["type"], header["version"], header["cwd"]) == ("session", 3, str(pi.cwd))
    assert len(pi.model.requests) == 1
    assert roles_and_texts(pi.model.messages(0))[1:] == [("user", "first question")]
    assert pi.model.messages(0)[0]["role"] == "system" and str(pi.cwd) in pi.model.messages(0)[0]["content"]

    second = pi.run(session, "second question")
    assert second.returncode == 0, second.stderr
    assert second.stdout == "Scripted reply #2 to: second question\n"
    resumed = session.read_bytes()
    assert resumed.startswith(data), "a resume only appends"
    assert check_transcript(resumed) == []
    assert len(pi.model.requests) == 2
    assert roles_and_texts(pi.model.messages(1))[1:] == [
        ("user", "first question"),
        ("assistant", "Scripted reply #1 to: first question"),
        ("user", "second question"),
    ]
    added = lines(session)[len(data.splitlines()):]
    assert [e["message"]["role"] for e in added] == ["user", "assistant"]
    assert added[0]["parentId"] == lines(session)[len(data.splitlines()) - 1]["id"]


def test_a_scripted_tool_call_runs_in_pi_and_its_result_reaches_the_model(pi: Pi, tmp_path: Path):
    (pi.cwd / "notes.txt").write_text("the notes say 42\n")
    pi.model.tool_call("read", {"path": "notes.txt"}, call_id="call_read_1").reply("The notes say 42.")
    session = tmp_path / "s.jsonl"

    result = pi.run(session, "what do the notes say?")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "The notes say 42.\n"
    assert len(pi.model.requests) == 2
    assistant, tool = pi.model.messages(1)[-2:]
    assert assistant["tool_calls"][0]["function"] == {"name": "read", "arguments": '{"path":"notes.txt"}'}
    assert (tool["role"], tool["tool_call_id"], text_of(tool["content"])) == (
        "tool", "call_read_1", "the notes say 42\n")
    assert check_transcript(session.read_bytes()) == []
    messages = [e["message"] for e in lines(session) if e["type"] == "message"]
    assert [(m["role"], m.get("stopReason")) for m in messages] == [
        ("user", None), ("assistant", "toolUse"), ("toolResult", None), ("assistant", "stop")]
    assert messages[2]["isError"] is False


@pytest.mark.parametrize("usage, expected", [
    (Usage(prompt_tokens=1000, completion_tokens=7),
     {"input": 1000, "output": 7, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1007}),
    (Usage(prompt_tokens=1000, completion_tokens=7, cached_tokens=300),
     {"input": 700, "output": 7, "cacheRead": 300, "cacheWrite": 0, "totalTokens": 1007}),
    # pi reads cached_tokens as hits plus this request's writes (OpenRouter's convention): reads = 300 - 100.
    (Usage(prompt_tokens=1000, completion_tokens=7, cached_tokens=300, cache_write_tokens=100),
     {"input": 700, "output": 7, "cacheRead": 200, "cacheWrite": 100, "totalTokens": 1007}),
], ids=["prompt-and-completion", "cached-tokens-become-cache-read", "cache-writes-come-out-of-cached"])
def test_usage_from_the_model_lands_in_the_transcript(pi: Pi, tmp_path: Path, usage: Usage, expected):
    pi.model.reply("counted", usage=usage)
    session = tmp_path / "s.jsonl"
    assert pi.run(session, "count me").returncode == 0
    (message,) = assistant_messages(session)
    assert {k: v for k, v in message["usage"].items() if k != "cost"} == expected


def test_a_500_with_fast_fail_settings_costs_one_request_and_exits_nonzero(pi: Pi, tmp_path: Path):
    pi.model.error(500, {"error": {"message": "the scripted model is down", "type": "server_error"}})
    session = tmp_path / "s.jsonl"

    result = pi.run(session, "anyone there?")
    assert result.returncode == 1
    assert "the scripted model is down" in result.stderr
    assert len(pi.model.requests) == 1, "retries are off: one request, no SDK or agent retries"
    assert check_transcript(session.read_bytes()) == []
    (message,) = assistant_messages(session)
    assert (message["stopReason"], message["content"]) == ("error", [])
    assert "the scripted model is down" in message["errorMessage"]
