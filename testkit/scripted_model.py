"""A scripted OpenAI-compatible chat-completions server for tests that run the real pi CLI.

pi talks to it as to any ``openai-completions`` provider (docs/pi-behaviour.md#the-model-wire-format): it answers
``POST /v1/chat/completions`` with the SSE stream pi expects (a role delta, content / reasoning /
tool-call deltas, a ``finish_reason`` delta, a ``choices: []`` usage chunk, ``data: [DONE]``), or a
plain ``chat.completion`` when the request does not ask to stream. Each request takes the next step of
the script; an empty script gives the default reply ``Scripted reply #<n> to: <last user text>`` where
``<n>`` counts the chat requests so far (as in the pi samples of ``tests/data/transcripts``).

In process::

    with ScriptedModel() as model:
        write_agent_dir(tmp / "agent", model.base_url)
        model.reply("hello", usage=Usage(prompt_tokens=1000, completion_tokens=7, cached_tokens=300))
        model.tool_call("read", {"path": "notes.txt"}).reply("done")
        model.error(500)
        ... run pi ...
        model.requests      # the chat request bodies, parsed, in arrival order
        model.messages(0)   # the messages of request 0

As a process (job Pods of the e2e tests are local processes and reach it on 127.0.0.1)::

    python -m testkit.scripted_model --port 18080 --log requests.jsonl [--port-file F] [--script S.json]

and from the test, ``RemoteScriptedModel("http://127.0.0.1:18080")`` has the same ``reply`` /
``tool_call`` / ``error`` / ``requests`` / ``messages`` API over the control endpoints
(``/_control/health``, ``/_control/script`` (POST appends, PUT replaces), ``/_control/requests``,
``/_control/reset``). ``read_request_log(path)`` reads the ``--log`` file: one JSON line per chat request
(``n``, ``path``, ``headers`` with lower-case names, ``body``), written when the request arrives, before it
is answered.

Standard library only: the tests and the e2e job Pods run it without installing anything.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PROVIDER = "fake"
MODEL_ID = "fake-model"
API_KEY = "fake-key"
DEFAULT_CONTEXT_WINDOW = 32000
DEFAULT_MAX_TOKENS = 4096
CHAT_PATH = "/v1/chat/completions"
CONTROL = "/_control"


@dataclass(frozen=True)
class Usage:
    """The usage a reply reports. pi maps it (docs/pi-behaviour.md#usage-mapping) to
    ``input = prompt - cached - cache_write``, ``cacheRead = cached``, ``cacheWrite = cache_write``,
    ``output = completion``."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    def to_openai(self) -> dict[str, Any]:
        details: dict[str, int] = {"cached_tokens": self.cached_tokens}
        if self.cache_write_tokens:
            details["cache_write_tokens"] = self.cache_write_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": details,
        }


UsageLike = Usage | Mapping[str, int] | None


def _usage_dict(usage: UsageLike) -> dict[str, int] | None:
    if usage is None:
        return None
    if isinstance(usage, Usage):
        return asdict(usage)
    unknown = set(usage) - set(Usage.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown usage fields {sorted(unknown)}; accepted: {sorted(Usage.__dataclass_fields__)}")
    return dict(usage)


# -- what a request is answered with -----------------------------------------------------------------------
#
# A script step is a plain JSON-able dict, so the same steps travel over the control endpoint and load
# from a --script file:
#   {"kind": "reply", "text": str, "thinking": str|None, "finish_reason": "stop", "usage": {...}|None,
#    "delay": seconds}
#   {"kind": "tool_call", "calls": [{"id", "name", "arguments": str (JSON)}], "text": str, "usage", "delay"}
#   {"kind": "error", "status": int, "body": str|dict|None, "delay": seconds}
# A usage dict may give some fields only; the others default to ceil(chars / 4) of request and reply.

STEP_KINDS = ("reply", "tool_call", "error")


def reply_step(text: str, *, usage: UsageLike = None, finish_reason: str = "stop", thinking: str | None = None,
               delay: float = 0.0, interval: float = 0.0) -> dict[str, Any]:
    """``interval``: seconds between two streamed chunks (a model that speaks slowly; 0: all at once)."""
    return {"kind": "reply", "text": text, "thinking": thinking, "finish_reason": finish_reason,
            "usage": _usage_dict(usage), "delay": delay, "interval": interval}


def tool_call_step(name: str, arguments: Mapping[str, Any] | str, *, call_id: str | None = None, text: str = "",
                   usage: UsageLike = None, delay: float = 0.0) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"kind": "tool_call", "calls": [{"id": call_id, "name": name, "arguments": args}], "text": text,
            "usage": _usage_dict(usage), "delay": delay}


def error_step(status: int = 500, body: str | Mapping[str, Any] | None = None, *, delay: float = 0.0) -> dict[str, Any]:
    return {"kind": "error", "status": status, "body": dict(body) if isinstance(body, Mapping) else body,
            "delay": delay}


def _check_step(step: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(step, Mapping) or step.get("kind") not in STEP_KINDS:
        raise ValueError(f"a script step is an object with kind in {STEP_KINDS}, got {step!r}")
    return dict(step)


def text_of(content: Any) -> str:
    """The text of an OpenAI message ``content``: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return text_of(message.get("content"))
    return ""


def _estimate(chars: int) -> int:
    return max(1, math.ceil(chars / 4))


def _prompt_chars(messages: list[dict[str, Any]]) -> int:
    total = 0
    for m in messages:
        total += len(text_of(m.get("content")))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            total += len(fn.get("name", "")) + len(fn.get("arguments", ""))
    return total


def _pieces(text: str, n: int = 4) -> list[str]:
    """``text`` cut into at most ``n`` non-empty pieces, so pi assembles the reply from several deltas."""
    if not text:
        return []
    size = max(1, math.ceil(len(text) / n))
    return [text[i:i + size] for i in range(0, len(text), size)]


class Answer:
    """One request's answer, computed from its step; rendered as an SSE stream or one JSON body."""

    def __init__(self, step: Mapping[str, Any], n: int, body: Mapping[str, Any]):
        self.step = step
        self.n = n
        self.id = f"chatcmpl-fake-{n}"
        self.model = str(body.get("model") or MODEL_ID)
        self.created = int(time.time())
        messages = body.get("messages") or []
        if step["kind"] == "reply":
            self.text = step["text"]
            self.thinking = step.get("thinking") or ""
            self.calls: list[dict[str, str]] = []
            self.finish_reason = step.get("finish_reason") or "stop"
        else:
            self.text = step.get("text") or ""
            self.thinking = ""
            self.calls = [{"id": c.get("id") or f"call_{n}_{i}", "name": c["name"], "arguments": c["arguments"]}
                          for i, c in enumerate(step["calls"])]
            self.finish_reason = "tool_calls"
        given = step.get("usage") or {}
        reply_chars = len(self.text) + len(self.thinking) + sum(len(c["name"]) + len(c["arguments"])
                                                                for c in self.calls)
        self.usage = Usage(
            prompt_tokens=given.get("prompt_tokens", _estimate(_prompt_chars(messages))),
            completion_tokens=given.get("completion_tokens", _estimate(reply_chars)),
            cached_tokens=given.get("cached_tokens", 0),
            cache_write_tokens=given.get("cache_write_tokens", 0),
        )

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": choices, **extra}

    def _delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return self._chunk([{"index": 0, "delta": delta, "finish_reason": finish_reason}])

    def chunks(self) -> Iterator[dict[str, Any]]:
        yield self._delta({"role": "assistant", "content": ""})
        for piece in _pieces(self.thinking):
            yield self._delta({"reasoning_content": piece})
        for piece in _pieces(self.text):
            yield self._delta({"content": piece})
        for index, call in enumerate(self.calls):
            # As OpenAI streams them: id, type and name first, then the JSON arguments in pieces.
            yield self._delta({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                               "function": {"name": call["name"], "arguments": ""}}]})
            for piece in _pieces(call["arguments"], 2):
                yield self._delta({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield self._delta({}, self.finish_reason)
        yield self._chunk([], usage=self.usage.to_openai())

    def completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in self.calls]
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
                "usage": self.usage.to_openai()}


# -- the script API, shared by the in-process server and the remote client ---------------------------------


class _ScriptAPI:
    def _push(self, steps: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    @property
    def log(self) -> list[dict[str, Any]]:
        """Every chat request so far: ``{"n", "method", "path", "headers", "body"}``."""
        raise NotImplementedError

    def reply(self, text: str, *, usage: UsageLike = None, finish_reason: str = "stop", interval: float = 0.0,
              thinking: str | None = None, delay: float = 0.0) -> _ScriptAPI:
        """Queue a text reply (``thinking`` is streamed as ``reasoning_content`` before the text)."""
        self._push([reply_step(text, usage=usage, finish_reason=finish_reason, thinking=thinking, delay=delay,
                               interval=interval)])
        return self

    def tool_call(self, name: str, arguments: Mapping[str, Any] | str, *, call_id: str | None = None,
                  text: str = "", usage: UsageLike = None, delay: float = 0.0) -> _ScriptAPI:
        """Queue a reply that calls tool ``name`` (pi runs it, then sends its result in the next request)."""
        self._push([tool_call_step(name, arguments, call_id=call_id, text=text, usage=usage, delay=delay)])
        return self

    def error(self, status: int = 500, body: str | Mapping[str, Any] | None = None, *,
              delay: float = 0.0) -> _ScriptAPI:
        """Queue an HTTP error answer (default body: an OpenAI-style error object)."""
        self._push([error_step(status, body, delay=delay)])
        return self

    def script(self, steps: list[Mapping[str, Any]]) -> _ScriptAPI:
        """Queue raw steps (the dicts of ``reply_step`` / ``tool_call_step`` / ``error_step``)."""
        self._push([_check_step(s) for s in steps])
        return self

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The chat request bodies received so far, parsed, in arrival order."""
        return [record["body"] for record in self.log]

    def messages(self, i: int) -> list[dict[str, Any]]:
        """The ``messages`` of chat request ``i`` (0-based; negative counts from the end)."""
        return self.requests[i]["messages"]

    def user_texts(self, i: int) -> list[str]:
        """The texts of the user messages of request ``i``, in order."""
        return [text_of(m.get("content")) for m in self.messages(i) if m.get("role") == "user"]

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Poll until at least ``count`` chat requests have arrived; fail naming what was awaited."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.requests
            if len(got) >= count:
                return got
            if time.monotonic() > deadline:
                raise TimeoutError(f"scripted model: waited {timeout}s for {count} chat request(s), got {len(got)}")
            time.sleep(0.02)


# -- the server --------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        model = self.server.model
        path = self.path.split("?", 1)[0]
        if path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [
                {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": PROVIDER}]})
        elif path == f"{CONTROL}/health":
            self._send_json(200, {"ok": True, "port": model.port, "requests": len(model.log),
                                  "pending": model.pending})
        elif path == f"{CONTROL}/requests":
            self._send_json(200, model.log)
        else:
            self._send_json(404, {"error": {"message": f"no route GET {path}", "type": "not_found"}})

    def do_PUT(self) -> None:
        if self.path == f"{CONTROL}/script":
            self._script(replace=True)
        else:
            self._send_json(404, {"error": {"message": f"no route PUT {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        model = self.server.model
        path = self.path.split("?", 1)[0]
        if path == f"{CONTROL}/script":
            self._script(replace=False)
        elif path == f"{CONTROL}/reset":
            self._body()
            model.reset()
            self._send_json(200, {"ok": True})
        elif path in (CHAT_PATH, "/chat/completions"):
            self._chat(path)
        else:
            self._body()
            self._send_json(404, {"error": {"message": f"no route POST {path}", "type": "not_found"}})

    def _script(self, *, replace: bool) -> None:
        try:
            steps = json.loads(self._body() or b"[]")
            if not isinstance(steps, list):
                raise ValueError("the script is a JSON list of steps")
            checked = [_check_step(s) for s in steps]
        except ValueError as e:
            self._send_json(400, {"error": {"message": str(e), "type": "invalid_request_error"}})
            return
        self.server.model._enqueue(checked, replace=replace)
        self._send_json(200, {"ok": True, "pending": self.server.model.pending})

    def _chat(self, path: str) -> None:
        model = self.server.model
        raw = self._body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"unparsed": raw.decode(errors="replace")}
        n, step = model._take(path, {k.lower(): v for k, v in self.headers.items()}, body)
        delay = float(step.get("delay") or 0)
        if delay and model._stopping.wait(delay):
            return
        if step["kind"] == "error":
            status = int(step.get("status") or 500)
            err = step.get("body")
            if err is None:
                err = {"error": {"message": f"scripted error {status} (request #{n})", "type": "server_error",
                                 "code": status}}
            data = err.encode() if isinstance(err, str) else json.dumps(err).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if isinstance(err, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        answer = Answer(step, n, body)
        if not body.get("stream"):
            self._send_json(200, answer.completion())
            return
        # No length and no chunked encoding: the stream ends when the connection closes.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        interval = float(step.get("interval") or 0)
        try:
            for i, chunk in enumerate(answer.chunks()):
                if i and interval and model._stopping.wait(interval):
                    return
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a test killed pi mid-stream)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    # socketserver's default backlog is 5: fifty clients connecting at once would see SYNs dropped and retried
    # a second later (bench/gateway_model.py's 50 at once).
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], model: ScriptedModel):
        self.model = model
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return  # a client that went away mid-request (a test SIGKILLed pi): nothing to report
        super().handle_error(request, client_address)


class ScriptedModel(_ScriptAPI):
    """The fake model, served from a background thread on ``host:port`` (port 0: a free one)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, log_file: str | os.PathLike[str] | None = None):
        self.host = host
        self._want_port = port
        self.log_file = Path(log_file) if log_file is not None else None
        self._lock = threading.Lock()
        self._steps: list[dict[str, Any]] = []
        self._log: list[dict[str, Any]] = []
        self._count = 0
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> ScriptedModel:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server((self.host, self._want_port), self)
        # A short poll interval: stop() waits up to one interval for the serving loop to notice.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="scripted-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # ends the delays of answers in flight
        self._server.shutdown()
        self._server.server_close()
        self._server = None

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Serve in the calling thread (the standalone process)."""
        if self._server is None:
            self._server = _Server((self.host, self._want_port), self)
        self._server.serve_forever()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("scripted model is not started (use it as a context manager or call start())")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The server root, e.g. ``http://127.0.0.1:34567`` (the control endpoints live under it)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What pi's ``models.json`` needs as ``baseUrl``: ``http://127.0.0.1:<port>/v1``."""
        return f"{self.url}/v1"

    # script and log
    def _push(self, steps: list[dict[str, Any]]) -> None:
        self._enqueue(steps, replace=False)

    def _enqueue(self, steps: list[dict[str, Any]], *, replace: bool) -> None:
        with self._lock:
            if replace:
                self._steps.clear()
            self._steps.extend(steps)

    def _take(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self._count += 1
            n = self._count
            # "at": when the request arrived, on the wall clock (bench/delivery.py compares it with other processes').
            record = {"n": n, "method": "POST", "path": path, "headers": headers, "body": body, "at": time.time()}
            self._log.append(record)
            if self.log_file is not None:
                with self.log_file.open("a") as f:
                    f.write(json.dumps(record) + "\n")
            if self._steps:
                return n, self._steps.pop(0)
        return n, reply_step(f"Scripted reply #{n} to: {last_user_text(body.get('messages') or [])}")

    def replace_script(self, steps: list[Mapping[str, Any]]) -> None:
        """Drop the steps not yet used and queue ``steps`` instead (``[]``: back to the default reply)."""
        self._enqueue([_check_step(s) for s in steps], replace=True)

    @property
    def log(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._log)

    @property
    def pending(self) -> int:
        """Script steps not yet used."""
        with self._lock:
            return len(self._steps)

    def reset(self) -> None:
        """Forget the script and the request log (the request counter restarts at 1)."""
        with self._lock:
            self._steps.clear()
            self._log.clear()
            self._count = 0


class RemoteScriptedModel(_ScriptAPI):
    """The script API of a standalone ``python -m testkit.scripted_model`` process, over its control endpoints."""

    def __init__(self, url: str, timeout: float = 10.0):
        self.url = url.rstrip("/").removesuffix("/v1")
        self.timeout = timeout

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read())

    def _push(self, steps: list[dict[str, Any]]) -> None:
        self._call("POST", f"{CONTROL}/script", steps)

    def replace_script(self, steps: list[Mapping[str, Any]]) -> None:
        self._call("PUT", f"{CONTROL}/script", [_check_step(s) for s in steps])

    @property
    def log(self) -> list[dict[str, Any]]:
        return self._call("GET", f"{CONTROL}/requests")

    @property
    def pending(self) -> int:
        return int(self.health()["pending"])

    def health(self) -> dict[str, Any]:
        return self._call("GET", f"{CONTROL}/health")

    def reset(self) -> None:
        self._call("POST", f"{CONTROL}/reset", {})

    def wait_until_up(self, timeout: float = 10.0) -> None:
        """Poll the health endpoint until the process answers."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.health()
                return
            except OSError as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"scripted model at {self.url}: no answer on {CONTROL}/health "
                                       f"after {timeout}s ({e})") from e
                time.sleep(0.05)


def read_request_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a ``--log`` file (``n``, ``path``, ``headers``, ``body``); a missing file is no requests."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


# -- pi's agent dir ----------------------------------------------------------------------------------------


def write_agent_dir(path: str | os.PathLike[str], base_url: str, *, context_window: int = DEFAULT_CONTEXT_WINDOW,
                    max_tokens: int = DEFAULT_MAX_TOKENS, fast_fail: bool = True,
                    model_ids: tuple[str, ...] = (MODEL_ID,), settings: Mapping[str, Any] | None = None) -> Path:
    """Write pi's ``models.json`` and ``settings.json`` into ``path`` (created) and return it.

    The provider is ``fake`` (api ``openai-completions``, ``baseUrl`` = ``base_url``) with ``model_ids``
    (the first is the default). ``fast_fail`` turns retries and auto-compaction off
    (docs/pi-behaviour.md#failing-fast), so a failing model costs one request and pi exits 1 in under a second
    instead of ~20 s. ``settings`` are merged over the generated settings.
    """
    agent = Path(path)
    agent.mkdir(parents=True, exist_ok=True)
    models = {"providers": {PROVIDER: {
        "baseUrl": base_url,
        "api": "openai-completions",
        "apiKey": API_KEY,
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False, "supportsStore": False},
        "models": [{"id": mid, "name": mid, "contextWindow": context_window, "maxTokens": max_tokens}
                   for mid in model_ids],
    }}}
    conf: dict[str, Any] = {"defaultProvider": PROVIDER, "defaultModel": model_ids[0], "quietStartup": True}
    if fast_fail:
        conf["retry"] = {"enabled": False, "provider": {"maxRetries": 0}}
        conf["compaction"] = {"enabled": False}
    conf.update(settings or {})
    (agent / "models.json").write_text(json.dumps(models, indent=2) + "\n")
    (agent / "settings.json").write_text(json.dumps(conf, indent=2) + "\n")
    return agent


# -- standalone --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.scripted_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 (default): a free port; see --port-file")
    parser.add_argument("--log", help="append one JSON line per chat request to this file")
    parser.add_argument("--port-file", help="write the chosen port here once listening")
    parser.add_argument("--script", help="a JSON file holding a list of script steps to start with")
    parser.add_argument("--agent-dir", help="also write pi's models.json / settings.json (fast-fail) here")
    args = parser.parse_args(argv)

    model = ScriptedModel(args.host, args.port, log_file=args.log)
    if args.script:
        model.script(json.loads(Path(args.script).read_text()))
    model._server = _Server((model.host, model._want_port), model)
    if args.agent_dir:
        write_agent_dir(args.agent_dir, model.base_url)
    if args.port_file:
        tmp = Path(args.port_file + ".tmp")
        tmp.write_text(f"{model.port}\n")
        tmp.replace(args.port_file)  # a reader never sees a half-written port
    print(f"scripted model listening on {model.base_url}", file=sys.stderr, flush=True)
    try:
        model.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
