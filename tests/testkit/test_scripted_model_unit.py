"""The scripted model alone, spoken to over HTTP as pi's OpenAI client would (no pi, no cluster).

The wire format checked here is docs/pi-behaviour.md#the-model-wire-format; `test_scripted_model.py` proves the same
server against the real pi.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from testkit import pitool
from testkit.scripted_model import (
    RemoteScriptedModel,
    ScriptedModel,
    Usage,
    read_request_log,
    write_agent_dir,
)

ROOT = Path(__file__).resolve().parents[2]


def chat(base_url: str, text: str = "hello", *, stream: bool = True, messages: list[dict[str, Any]] | None = None,
         ) -> tuple[int, bytes]:
    body = {"model": "fake-model", "stream": stream, "stream_options": {"include_usage": True},
            "messages": messages or [{"role": "system", "content": "sys"},
                                     {"role": "user", "content": [{"type": "text", "text": text}]}]}
    req = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer fake-key"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def events(raw: bytes) -> list[Any]:
    """The SSE `data:` payloads, JSON-parsed except the final `[DONE]`."""
    blocks = raw.decode().split("\n\n")
    assert blocks[-1] == "", "the stream ends with a blank line after the last event"
    out: list[Any] = []
    for block in blocks[:-1]:
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def streamed_text(raw: bytes) -> str:
    return "".join(c["choices"][0]["delta"].get("content", "") for c in events(raw)[:-1] if c["choices"])


@pytest.fixture
def model():
    with ScriptedModel() as m:
        yield m


def test_a_text_reply_streams_role_content_finish_usage_then_done(model: ScriptedModel):
    model.reply("Hello from the script.", usage=Usage(prompt_tokens=1000, completion_tokens=7, cached_tokens=300))
    status, raw = chat(model.base_url)
    assert status == 200
    evs = events(raw)
    assert evs[-1] == "[DONE]"
    chunks = evs[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["id"] for c in chunks} == {"chatcmpl-fake-1"}
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:-2]]
    assert len(contents) > 1 and "".join(contents) == "Hello from the script."
    assert chunks[-2]["choices"] == [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 1000, "completion_tokens": 7, "total_tokens": 1007,
                                   "prompt_tokens_details": {"cached_tokens": 300}}


def test_a_tool_call_streams_its_json_arguments_in_pieces(model: ScriptedModel):
    model.tool_call("read", {"path": "notes.txt"}, call_id="call_x")
    evs = events(chat(model.base_url)[1])
    deltas = [c["choices"][0]["delta"] for c in evs[:-1] if c["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0] == {"index": 0, "id": "call_x", "type": "function",
                        "function": {"name": "read", "arguments": ""}}
    assert len(calls) > 2
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"path": "notes.txt"}
    assert evs[-3]["choices"][0]["finish_reason"] == "tool_calls"


def test_thinking_streams_as_reasoning_content_before_the_text(model: ScriptedModel):
    model.reply("answer", thinking="let me think")
    deltas = [c["choices"][0]["delta"] for c in events(chat(model.base_url)[1])[:-1] if c["choices"]]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    assert reasoning == "let me think"
    first_text = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert all("reasoning_content" not in d for d in deltas[first_text:])


def test_an_empty_script_answers_with_numbered_default_replies(model: ScriptedModel):
    model.reply("scripted")
    texts = [streamed_text(chat(model.base_url, prompt)[1]) for prompt in ("one", "two", "three")]
    assert texts == ["scripted", "Scripted reply #2 to: two", "Scripted reply #3 to: three"]
    assert model.pending == 0


def test_default_usage_is_a_quarter_of_the_characters(model: ScriptedModel):
    # prompt: "sys" + 13 x "a" = 16 chars -> 4 tokens; reply "Scripted reply #1 to: aaaaaaaaaaaaa" = 35 -> 9
    usage = events(chat(model.base_url, "a" * 13)[1])[-2]["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (4, 9)


@pytest.mark.parametrize("status, body, expected", [
    (500, None, {"error": {"message": "scripted error 500 (request #1)", "type": "server_error", "code": 500}}),
    (400, {"error": {"message": "context too long"}}, {"error": {"message": "context too long"}}),
    (429, "slow down", "slow down"),
], ids=["500-default-body", "400-json-body", "429-text-body"])
def test_an_error_step_answers_with_its_status_and_body(model: ScriptedModel, status, body, expected):
    model.error(status, body)
    got_status, raw = chat(model.base_url)
    assert got_status == status
    assert (raw.decode() if isinstance(expected, str) else json.loads(raw)) == expected
    assert chat(model.base_url)[0] == 200, "the error step is used once"


def test_a_non_streaming_request_gets_one_chat_completion(model: ScriptedModel):
    model.tool_call("bash", {"command": "true"}, text="running it")
    status, raw = chat(model.base_url, stream=False)
    answer = json.loads(raw)
    assert status == 200 and answer["object"] == "chat.completion"
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "running it"
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command": "true"}'}
    assert answer["usage"]["total_tokens"] == answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"]


def test_the_request_log_keeps_bodies_and_headers_in_order(model: ScriptedModel, tmp_path: Path):
    chat(model.base_url, "first")
    chat(model.base_url, "second")
    assert [model.user_texts(i) for i in range(2)] == [["first"], ["second"]]
    assert model.messages(-1)[0] == {"role": "system", "content": "sys"}
    assert model.log[0]["headers"]["authorization"] == "Bearer fake-key"
    assert [r["n"] for r in model.log] == [1, 2]
    model.reset()
    assert model.requests == []
    chat(model.base_url, "again")
    assert model.log[0]["n"] == 1


def test_models_endpoint_lists_the_fake_model(model: ScriptedModel):
    with urllib.request.urlopen(f"{model.base_url}/models", timeout=10) as resp:
        assert [m["id"] for m in json.loads(resp.read())["data"]] == ["fake-model"]


def test_an_unknown_usage_field_is_refused_when_scripted(model: ScriptedModel):
    with pytest.raises(ValueError, match="prompt_token"):
        model.reply("x", usage={"prompt_token": 5})


def test_standalone_process_is_scripted_and_logs_over_its_control_endpoints(tmp_path: Path):
    port_file, log = tmp_path / "port", tmp_path / "requests.jsonl"
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"kind": "reply", "text": "from the script file"}]))
    proc = subprocess.Popen([sys.executable, "-m", "testkit.scripted_model", "--port", "0",
                             "--port-file", str(port_file), "--log", str(log), "--script", str(script),
                             "--agent-dir", str(tmp_path / "agent")],
                            cwd=ROOT, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while not port_file.exists():
            if proc.poll() is not None:
                pytest.fail(f"scripted model exited {proc.returncode}: {proc.stderr.read().decode()}")
            if time.monotonic() > deadline:
                pytest.fail(f"scripted model wrote no port file at {port_file} within 15 s")
            time.sleep(0.02)
        remote = RemoteScriptedModel(f"http://127.0.0.1:{port_file.read_text().strip()}")
        remote.wait_until_up()
        models = json.loads((tmp_path / "agent" / "models.json").read_text())
        assert models["providers"]["fake"]["baseUrl"] == remote.base_url
        remote.error(503)
        assert remote.pending == 2
        assert streamed_text(chat(remote.base_url, "q1")[1]) == "from the script file"
        assert chat(remote.base_url, "q2")[0] == 503
        assert streamed_text(chat(remote.base_url, "q3")[1]) == "Scripted reply #3 to: q3"
        remote.replace_script([{"kind": "reply", "text": "replaced"}])
        assert streamed_text(chat(remote.base_url, "q4")[1]) == "replaced"
        assert [remote.user_texts(i) for i in range(4)] == [["q1"], ["q2"], ["q3"], ["q4"]]
        assert [r["body"] for r in read_request_log(log)] == remote.requests
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("fast_fail", [True, False], ids=["fast-fail", "pi-defaults"])
def test_agent_dir_points_pi_at_the_fake_provider(tmp_path: Path, fast_fail: bool):
    agent = write_agent_dir(tmp_path / "agent", "http://127.0.0.1:9/v1", context_window=1000, fast_fail=fast_fail)
    models = json.loads((agent / "models.json").read_text())
    provider = models["providers"]["fake"]
    assert provider["api"] == "openai-completions" and provider["baseUrl"] == "http://127.0.0.1:9/v1"
    assert provider["models"][0]["id"] == "fake-model" and provider["models"][0]["contextWindow"] == 1000
    settings = json.loads((agent / "settings.json").read_text())
    assert (settings["defaultProvider"], settings["defaultModel"]) == ("fake", "fake-model")
    if fast_fail:
        assert settings["retry"] == {"enabled": False, "provider": {"maxRetries": 0}}
        assert settings["compaction"] == {"enabled": False}
    else:
        assert "retry" not in settings and "compaction" not in settings


def test_pi_binary_says_run_make_pi_when_pi_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "package.json").write_text(json.dumps({"dependencies": {pitool.PACKAGE: "0.73.1"}}))
    monkeypatch.setattr(pitool, "PI_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"pi 0\.73\.1 is not installed .* run `make pi`"):
        pitool.pi_binary()
