"""Offline context measurement: pi's `get_session_stats().contextUsage` without starting pi.

Implements docs/pi-behaviour.md#offline-measurement, which mirrors pi's own code (`SessionManager` loading,
`buildSessionContext`, `getContextUsage`, `estimateContextTokens`, `estimateTokens`). This is the
*tolerant* reading: like pi, it skips lines that do not parse and never rejects a file, because the
number must equal what pi would report for the same bytes. Stdlib only; never raises.

Where pi would throw or produce NaN on a malformed value (a missing `usage`, a non-numeric token
count, a missing tool-call `arguments`), the value counts as 0 here instead. Values that are not
JSON objects are skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pidispatch.transcript._jsjson import js_json_len, js_trim, loads, utf16_len

DEFAULT_CONTEXT_WINDOW = 128_000
_IMAGE_CHARS = 4800


@dataclass(frozen=True)
class ContextUsage:
    """`tokens` and `percent` are None when pi reports them as null (e.g. right after a compaction)."""

    tokens: int | None
    window: int
    percent: float | None


def _entries(data: bytes) -> list[dict[str, Any]] | None:
    """pi's load: trim, split on \\n, JSON.parse each non-blank line, drop what fails.

    None when there is no usable session (no entries, or the first is not a header with a string
    id): pi would start a new session instead.
    """
    text = js_trim(bytes(data).decode("utf-8", errors="replace"))
    values: list[Any] = []
    for line in text.split("\n"):
        if not js_trim(line):
            continue
        ok, value = loads(line)
        if ok:
            values.append(value)
    if not values:
        return None
    header = values[0]
    if not isinstance(header, dict) or header.get("type") != "session" or not isinstance(header.get("id"), str):
        return None
    return [value for value in values[1:] if isinstance(value, dict) and value.get("type") != "session"]


def _key(value: Any) -> tuple[str, Any] | None:
    """A dict key that compares like a JavaScript Map key (SameValueZero) for JSON scalars.

    Python would merge 1, 1.0 and True into one key, and keep 1 and 1.0 apart from "1" only by
    luck; JavaScript keeps numbers, booleans and strings apart and merges 1 with 1.0. Objects and
    arrays are keyed by identity in a Map, so a parentId can never find them: they get no key.
    """
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, (int, float)):
        try:
            return ("number", float(value))
        except OverflowError:
            return ("number", math.inf if value > 0 else -math.inf)
    if isinstance(value, str) or value is None:
        return (type(value).__name__, value)
    return None


def _same(left: Any, right: Any) -> bool:
    """JavaScript `===` for JSON values."""
    left_key, right_key = _key(left), _key(right)
    if left_key is None or right_key is None:
        return left is right
    return left_key == right_key


def _truthy(value: Any) -> bool:
    """JavaScript truthiness for JSON values (objects and arrays are truthy even when empty)."""
    if isinstance(value, (dict, list)):
        return True
    if isinstance(value, float) and math.isnan(value):
        return False
    return bool(value)


def _branch(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leaf = last entry; follow parentId to the root; stop on a missing parent or a repeat."""
    if not entries:
        return []
    by_id: dict[tuple[str, Any], dict[str, Any]] = {}
    for entry in entries:
        key = _key(entry.get("id"))
        if key is not None:
            by_id[key] = entry
    path: list[dict[str, Any]] = []
    seen: set[int] = set()
    current: dict[str, Any] | None = entries[-1]
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        path.append(current)
        parent = current.get("parentId")
        key = _key(parent) if _truthy(parent) else None
        current = by_id.get(key) if key is not None else None
    path.reverse()
    return path


def _num(value: Any) -> float:
    """A usage number as JavaScript holds it: a double (a huge integer becomes Infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _context_tokens(usage: Any) -> float:
    """pi's calculateContextTokens: `totalTokens || input + output + cacheRead + cacheWrite`."""
    if not isinstance(usage, dict):
        return 0
    total = _num(usage.get("totalTokens"))
    if total:
        return total
    return sum(_num(usage.get(key)) for key in ("input", "output", "cacheRead", "cacheWrite"))


def _context_messages(path: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """buildSessionContext: the messages pi would send, with the latest compaction applied."""
    compaction = None
    for entry in path:
        if entry.get("type") == "compaction":
            compaction = entry
    messages: list[dict[str, Any]] = []

    def append(entry: dict[str, Any]) -> None:
        kind = entry.get("type")
        if kind == "message":
            message = entry.get("message")
            if isinstance(message, dict):
                messages.append(message)
        elif kind == "custom_message":
            messages.append({"role": "custom", "content": entry.get("content")})
        elif kind == "branch_summary" and _truthy(entry.get("summary")):
            messages.append({"role": "branchSummary", "summary": entry.get("summary")})

    if compaction is None:
        for entry in path:
            append(entry)
        return messages
    messages.append({"role": "compactionSummary", "summary": compaction.get("summary")})
    index = next(
        i
        for i, entry in enumerate(path)
        if entry.get("type") == "compaction" and _same(entry.get("id"), compaction.get("id"))
    )
    kept = False
    for entry in path[:index]:
        if _same(entry.get("id"), compaction.get("firstKeptEntryId")):
            kept = True
        if kept:
            append(entry)
    for entry in path[index + 1 :]:
        append(entry)
    return messages


def _text_len(value: Any) -> int:
    return utf16_len(value) if isinstance(value, str) else 0


def _blocks_len(content: Any, *, images: bool) -> int:
    if isinstance(content, str):
        return utf16_len(content)
    if not isinstance(content, list):
        return 0
    chars = 0
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and _truthy(block.get("text")):
            chars += _text_len(block.get("text"))
        if images and block.get("type") == "image":
            chars += _IMAGE_CHARS
    return chars


def _estimate(message: dict[str, Any]) -> int:
    """pi's estimateTokens: ceil(UTF-16 characters / 4) of what the message carries."""
    role = message.get("role")
    if role == "user":
        chars = _blocks_len(message.get("content"), images=False)
    elif role == "assistant":
        chars = 0
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                chars += _text_len(block.get("text"))
            elif kind == "thinking":
                chars += _text_len(block.get("thinking"))
            elif kind == "toolCall":
                arguments = block.get("arguments")
                chars += _text_len(block.get("name")) + (js_json_len(arguments) if "arguments" in block else 0)
    elif role in ("custom", "toolResult"):
        chars = _blocks_len(message.get("content"), images=True)
    elif role == "bashExecution":
        chars = _text_len(message.get("command")) + _text_len(message.get("output"))
    elif role in ("branchSummary", "compactionSummary"):
        chars = _text_len(message.get("summary"))
    else:
        chars = 0
    return math.ceil(chars / 4)


def _valid_assistant(message: dict[str, Any]) -> bool:
    return message.get("role") == "assistant" and message.get("stopReason") not in ("aborted", "error")


def _model(path: list[dict[str, Any]]) -> tuple[Any, Any] | None:
    model = None
    for entry in path:
        if entry.get("type") == "model_change":
            model = (entry.get("provider"), entry.get("modelId"))
        elif entry.get("type") == "message":
            message = entry.get("message")
            if isinstance(message, dict) and message.get("role") == "assistant":
                model = (message.get("provider"), message.get("model"))
    return model


def _window(model: tuple[Any, Any] | None, models: Any) -> Any:
    """`contextWindow` of the session's model in a parsed models.json, else pi's default."""
    if model is None or not isinstance(models, dict):
        return DEFAULT_CONTEXT_WINDOW
    provider, model_id = model
    providers = models.get("providers")
    config = providers.get(provider) if isinstance(providers, dict) and isinstance(provider, str) else None
    listed = config.get("models") if isinstance(config, dict) else None
    for candidate in listed if isinstance(listed, list) else []:
        if isinstance(candidate, dict) and candidate.get("id") == model_id:
            window = candidate.get("contextWindow")
            return window if window is not None else DEFAULT_CONTEXT_WINDOW
    return DEFAULT_CONTEXT_WINDOW


def _as_int(value: float) -> int | None:
    """An integral, finite count as an int; anything else cannot be reported (None)."""
    if isinstance(value, int):
        return value if abs(value) <= 2**53 else None
    return int(value) if math.isfinite(value) and value.is_integer() else None


def context_usage(data: bytes, context_window: int | None = None, models: dict[str, Any] | None = None) -> ContextUsage:
    """What pi's `get_session_stats` would report as `contextUsage` for this transcript.

    `context_window` overrides the window; otherwise it comes from `models` (a parsed models.json)
    for the session's model (last `model_change` or assistant on the branch), default 128000.
    `tokens`/`percent` are None when pi reports null: no usable session, a compaction with no valid
    assistant reply after it, or a window that is not a positive number (pi reports nothing then).
    Never raises: the runner measures whatever the agent left behind.
    """
    entries = _entries(data)
    path = _branch(entries or [])
    window_value: Any = context_window if context_window is not None else _window(_model(path), models)
    if isinstance(window_value, bool) or not isinstance(window_value, (int, float)):
        window_value = DEFAULT_CONTEXT_WINDOW
    window = _as_int(window_value)
    if entries is None or window is None or window <= 0:
        return ContextUsage(None, window or 0, None)

    compaction_index = max((i for i, entry in enumerate(path) if entry.get("type") == "compaction"), default=-1)
    if compaction_index >= 0:
        measured = False
        for entry in reversed(path[compaction_index + 1 :]):
            message = entry.get("message") if entry.get("type") == "message" else None
            if isinstance(message, dict) and _valid_assistant(message):
                measured = _context_tokens(message.get("usage")) > 0
                break
        if not measured:
            return ContextUsage(None, window, None)

    messages = _context_messages(path)
    last = max(
        (i for i, message in enumerate(messages) if _valid_assistant(message) and _truthy(message.get("usage"))),
        default=-1,
    )
    if last < 0:
        tokens: float = sum(_estimate(message) for message in messages)
    else:
        tokens = _context_tokens(messages[last].get("usage")) + sum(_estimate(m) for m in messages[last + 1 :])
    as_int = _as_int(tokens)
    if as_int is None:
        return ContextUsage(None, window, None)
    return ContextUsage(as_int, window, as_int / window * 100)
