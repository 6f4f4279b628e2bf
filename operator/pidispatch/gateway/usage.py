"""The provider's own token figures, read from a reply as it passes (docs/gateway.md#the-model-path).

Mapped as pi maps them (docs/pi-behaviour.md#usage-mapping), so the ledger and the transcript agree:

* ``openai-completions``: the last ``usage`` (a chunk's, or a choice's as Moonshot sends it):
  ``cacheWrite = prompt_tokens_details.cache_write_tokens``, ``cacheRead = cached_tokens`` (or
  ``prompt_cache_hit_tokens``) less ``cacheWrite`` when both are given, ``input = prompt - cacheRead -
  cacheWrite`` (never below 0), ``output = completion_tokens``;
* ``openai-responses``: ``response.completed``'s ``usage``: ``cacheRead = input_tokens_details.cached_tokens``,
  ``input = input_tokens - cacheRead``, ``output = output_tokens``;
* ``anthropic-messages``: ``message_start``'s ``message.usage``, then each ``message_delta``'s ``usage``
  field by field where given (``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
  ``cache_creation_input_tokens``);
* a JSON reply (no stream): its ``usage`` the same way per API.

:class:`UsageReader` takes the reply's bytes as they come (an SSE event may be split across reads) and
holds only the unfinished line, so reading costs nothing the stream does not already pass through.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pidispatch.gateway.providers import ANTHROPIC_MESSAGES, OPENAI_COMPLETIONS, OPENAI_RESPONSES

MAX_LINE = 4 * 2**20  # an SSE line longer than this is not parsed (its bytes still pass through)
MAX_JSON = 64 * 2**20  # a non-streamed reply longer than this is passed through unread


@dataclass
class Usage:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write


def _n(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def from_completions(raw: dict[str, Any]) -> Usage:
    details = raw.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    reported = details.get("cached_tokens")
    if reported is None:
        reported = raw.get("prompt_cache_hit_tokens")
    cache_write = _n(details.get("cache_write_tokens"))
    cache_read = max(0, _n(reported) - cache_write) if cache_write else _n(reported)
    return Usage(input=max(0, _n(raw.get("prompt_tokens")) - cache_read - cache_write),
                 output=_n(raw.get("completion_tokens")), cache_read=cache_read, cache_write=cache_write)


def from_responses(raw: dict[str, Any]) -> Usage:
    details = raw.get("input_tokens_details")
    cached = _n(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(input=max(0, _n(raw.get("input_tokens")) - cached), output=_n(raw.get("output_tokens")),
                 cache_read=cached)


_ANTHROPIC_FIELDS = (("input_tokens", "input"), ("output_tokens", "output"),
                     ("cache_read_input_tokens", "cache_read"), ("cache_creation_input_tokens", "cache_write"))


def merge_anthropic(usage: Usage, raw: dict[str, Any]) -> None:
    """``raw``'s fields over ``usage``'s, where given (a ``message_delta`` may leave the input out)."""
    for wire, ours in _ANTHROPIC_FIELDS:
        if raw.get(wire) is not None:
            setattr(usage, ours, _n(raw[wire]))


_NEEDLES = {OPENAI_COMPLETIONS: (b'"usage"',), OPENAI_RESPONSES: (b"response.completed",),
            ANTHROPIC_MESSAGES: (b"message_start", b"message_delta")}


class UsageReader:
    """Reads one reply of ``api``; ``usage`` is ``None`` until the reply has carried the provider's figures."""

    def __init__(self, api: str, *, stream: bool) -> None:
        self.api = api
        self.stream = stream
        self.usage: Usage | None = None
        self._line = bytearray()
        self._overlong = False
        self._body = bytearray()
        self._event = ""

    def feed(self, data: bytes) -> None:
        if not self.stream:
            if len(self._body) + len(data) <= MAX_JSON:
                self._body += data
            else:
                self._overlong = True
            return
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                rest = data[start:]
                if len(self._line) + len(rest) > MAX_LINE:
                    self._overlong = True
                    self._line.clear()
                elif not self._overlong:
                    self._line += rest
                return
            if not self._overlong:
                self._line += data[start:end]
                self._on_line(bytes(self._line).rstrip(b"\r"))
            self._line.clear()
            self._overlong = False
            start = end + 1

    def finish(self) -> Usage | None:
        """The figures once the reply has ended (a JSON body is read here)."""
        if not self.stream and not self._overlong and self._body:
            try:
                data = json.loads(self._body)
            except ValueError:
                return self.usage
            if isinstance(data, dict):
                self._on_json(data)
        elif self.stream and self._line and not self._overlong:
            self._on_line(bytes(self._line).rstrip(b"\r"))
            self._line.clear()
        return self.usage

    def _on_line(self, line: bytes) -> None:
        if line.startswith(b"event:"):
            self._event = line[6:].strip().decode("utf-8", "replace")
            return
        if not line.startswith(b"data:"):
            if not line:
                self._event = ""
            return
        payload = line[5:].strip()
        if not payload or payload[:1] != b"{" or not any(needle in payload for needle in _NEEDLES[self.api]):
            return  # most of a stream is text deltas: only an event that can carry usage is decoded
        try:
            data = json.loads(payload)
        except ValueError:
            return
        if isinstance(data, dict):
            self._on_event(data)

    def _on_event(self, data: dict[str, Any]) -> None:
        kind = data.get("type") if isinstance(data.get("type"), str) else self._event
        if self.api == OPENAI_COMPLETIONS:
            raw = data.get("usage")
            if not isinstance(raw, dict):
                choices = data.get("choices")
                first = choices[0] if isinstance(choices, list) and choices else None
                raw = first.get("usage") if isinstance(first, dict) else None
            if isinstance(raw, dict):
                self.usage = from_completions(raw)
        elif self.api == OPENAI_RESPONSES:
            response = data.get("response")
            if kind == "response.completed" and isinstance(response, dict) and isinstance(response.get("usage"), dict):
                self.usage = from_responses(response["usage"])
        elif self.api == ANTHROPIC_MESSAGES:
            if kind == "message_start":
                message = data.get("message")
                raw = message.get("usage") if isinstance(message, dict) else None
                if isinstance(raw, dict):
                    self.usage = Usage()
                    merge_anthropic(self.usage, raw)
            elif kind == "message_delta" and isinstance(data.get("usage"), dict):
                if self.usage is None:
                    self.usage = Usage()
                merge_anthropic(self.usage, data["usage"])

    def _on_json(self, data: dict[str, Any]) -> None:
        raw = data.get("usage")
        if not isinstance(raw, dict):
            return
        if self.api == OPENAI_COMPLETIONS:
            self.usage = from_completions(raw)
        elif self.api == OPENAI_RESPONSES:
            self.usage = from_responses(raw)
        elif self.api == ANTHROPIC_MESSAGES:
            self.usage = Usage()
            merge_anthropic(self.usage, raw)
