"""A fake Anthropic Messages API speaking its real wire format, for the gateway's tests.

``POST /v1/messages`` with ``x-api-key`` equal to ``key`` (else 401 with Anthropic's error shape). With
``"stream": true`` it answers the Messages SSE stream as Anthropic sends it: ``event:`` and ``data:`` lines
of ``message_start`` (the input and cache figures, ``output_tokens: 1``), ``content_block_start``, a
``ping``, ``content_block_delta`` per piece of text, ``content_block_stop``, ``message_delta`` (the final
``output_tokens``) and ``message_stop``; without, one ``message`` JSON with its ``usage``. ``usage=False``
leaves every usage field out (a provider that does not report). Each request's lower-cased headers and
body are kept in ``requests``.

Standard library only, like ``scripted_model``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-fake-1"


@dataclass
class AnthropicUsage:
    input_tokens: int = 25
    output_tokens: int = 15
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        fake = self.server.fake
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        with fake.lock:
            fake.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                  "body": body})
        if self.path.split("?")[0] != "/v1/messages":
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "Not found"}})
            return
        if self.headers.get("x-api-key") != fake.key:
            self._json(401, {"type": "error", "error": {"type": "authentication_error",
                                                        "message": "invalid x-api-key"}})
            return
        usage = fake.usage
        full = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                "cache_read_input_tokens": usage.cache_read_input_tokens,
                "cache_creation_input_tokens": usage.cache_creation_input_tokens}
        message: dict[str, Any] = {"id": f"msg_fake_{len(fake.requests)}", "type": "message", "role": "assistant",
                                   "model": body.get("model", MODEL), "stop_sequence": None}
        if not body.get("stream"):
            message.update(content=[{"type": "text", "text": fake.text}], stop_reason="end_turn")
            if fake.report_usage:
                message["usage"] = full
            self._json(200, message)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        start = dict(message, content=[], stop_reason=None)
        if fake.report_usage:
            start["usage"] = dict(full, output_tokens=1)
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("ping", {"type": "ping"}),
        ]
        step = max(1, len(fake.text) // 4)
        for i in range(0, len(fake.text), step):
            events.append(("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                   "delta": {"type": "text_delta", "text": fake.text[i:i + step]}}))
        delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}
        if fake.report_usage:
            delta["usage"] = {"output_tokens": usage.output_tokens}
        events += [("content_block_stop", {"type": "content_block_stop", "index": 0}), ("message_delta", delta),
                   ("message_stop", {"type": "message_stop"})]
        try:
            for i, (name, data) in enumerate(events):
                if i and fake.interval:
                    time.sleep(fake.interval)
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], fake: FakeAnthropic) -> None:
        super().__init__(address, _Handler)
        self.fake = fake


class FakeAnthropic:
    """``with FakeAnthropic(key="sk-ant-test") as fake: ... fake.base_url ... fake.requests``."""

    def __init__(self, key: str, *, text: str = "Hello from the fake Claude.", usage: AnthropicUsage | None = None,
                 report_usage: bool = True, interval: float = 0.0) -> None:
        self.key = key
        self.text = text
        self.usage = usage or AnthropicUsage()
        self.report_usage = report_usage
        self.interval = interval
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
