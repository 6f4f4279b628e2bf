"""The measurements behind the runner's report (pure): this run's token use and the context it left.

The report itself is one model shared with the operator that reads it (``pidispatch.contract.report``);
these functions fill its ``tokens`` and ``context`` from the session file pi left.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from pidispatch.transcript.context import DEFAULT_CONTEXT_WINDOW, context_usage


@dataclass(frozen=True)
class Usage:
    """Sums of assistant `usage` over the entries one run added."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total: int = 0
    cost: float = 0.0
    calls: int = 0
    unpriced: int = 0  # replies whose model had no known price: their cost is not in `cost`

    def as_tokens(self) -> dict[str, float]:
        """The report's ``tokens`` part: ``cost`` only when every reply was priced (a partial sum would read as
        the job's whole cost)."""
        tokens: dict[str, float] = {"input": self.input, "output": self.output, "cacheRead": self.cache_read,
                                    "cacheWrite": self.cache_write, "total": self.total}
        if self.unpriced == 0:
            tokens["cost"] = round(self.cost, 10)
        return {**tokens, "calls": self.calls, "unpriced": self.unpriced}

    def plus(self, other: Usage) -> Usage:
        """Both runs' replies: a job's own and a side call's (the rethread summary) make one bill."""
        return Usage(self.input + other.input, self.output + other.output, self.cache_read + other.cache_read,
                     self.cache_write + other.cache_write, self.total + other.total, self.cost + other.cost,
                     self.calls + other.calls, self.unpriced + other.unpriced)


def _count(value: Any) -> int:
    """A token count as pi wrote it; anything else (a hostile or damaged value) counts 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if not math.isfinite(value) or value < 0 or value != int(value):
        return 0
    return int(value)


def _money(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return 0.0
    return float(value)


def priced_models(models: Any) -> frozenset[str]:
    """``provider/model`` of every model a parsed models.json gives prices for (a ``cost`` object)."""
    providers = models.get("providers") if isinstance(models, dict) else None
    priced: set[str] = set()
    for provider, config in providers.items() if isinstance(providers, dict) else ():
        listed = config.get("models") if isinstance(config, dict) else None
        for model in listed if isinstance(listed, list) else []:
            if isinstance(model, dict) and isinstance(model.get("id"), str) and isinstance(model.get("cost"), dict):
                priced.add(f"{provider}/{model['id']}")
    return frozenset(priced)


def new_usage(final: bytes, before_ids: frozenset[str], priced: frozenset[str] = frozenset()) -> Usage:
    """Sum the usage of assistant messages in `final` whose entry id was not in the file before the run.

    Tolerant, like pi's own reading (malformed lines are skipped): pi only appends, but the agent can
    write to the file, and the report must still come out. Every billed reply counts, including error
    replies and replies on abandoned branches: this is what the run cost, not what the context holds.

    A reply is priced when pi put a cost on it (a model pi knows the prices of) or its model is in `priced`
    (models.json gives its prices, which may be 0: a free model). pi writes cost 0 for a model without
    prices, which is not the same as free, so such a reply counts as `unpriced`.
    """
    totals = [0, 0, 0, 0, 0]
    cost = 0.0
    calls = unpriced = 0
    seen: set[str] = set()
    for line in final.split(b"\n"):
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(entry, dict) or entry.get("type") != "message":
            continue
        entry_id, message = entry.get("id"), entry.get("message")
        if not isinstance(entry_id, str) or entry_id in before_ids or entry_id in seen:
            continue
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        seen.add(entry_id)
        raw = message.get("usage")
        usage: dict[str, Any] = raw if isinstance(raw, dict) else {}
        for i, name in enumerate(("input", "output", "cacheRead", "cacheWrite", "totalTokens")):
            totals[i] += _count(usage.get(name))
        price = usage.get("cost")
        spent = _money(price.get("total")) if isinstance(price, dict) else 0.0
        cost += spent
        billed = _count(usage.get("totalTokens")) > 0  # a reply of no tokens costs 0 at any price
        if spent == 0.0 and billed and f"{message.get('provider')}/{message.get('model')}" not in priced:
            unpriced += 1
        calls += 1
    return Usage(input=totals[0], output=totals[1], cache_read=totals[2], cache_write=totals[3], total=totals[4],
                 cost=cost, calls=calls, unpriced=unpriced)


def context_window(models: Any, model: str | None) -> int | None:
    """`contextWindow` of `provider/model` in a parsed models.json; pi's default 128000 when not listed.

    None when no model was named: the session's own model then decides (`context_usage` looks it up).
    """
    if model is None:
        return None
    provider, _, model_id = model.partition("/")
    providers = models.get("providers") if isinstance(models, dict) else None
    config = providers.get(provider) if isinstance(providers, dict) else None
    listed = config.get("models") if isinstance(config, dict) else None
    for candidate in listed if isinstance(listed, list) else []:
        if isinstance(candidate, dict) and candidate.get("id") == model_id:
            window = candidate.get("contextWindow")
            if isinstance(window, int) and not isinstance(window, bool):
                return window
            return DEFAULT_CONTEXT_WINDOW
    return DEFAULT_CONTEXT_WINDOW


def measure_context(final: bytes, model: str | None, models: Any) -> tuple[int, int] | None:
    """`(tokens, window)` as pi's `get_session_stats` would report them (docs/pi-behaviour.md#offline-measurement), or
    None.

    None when pi would report null (e.g. right after a compaction) or the window is not positive: the
    spec includes `context` only when both are finite and the window is > 0.
    """
    usage = context_usage(final, context_window(models, model), models if isinstance(models, dict) else None)
    if usage.tokens is None or usage.tokens < 0 or usage.window <= 0:
        return None
    return usage.tokens, usage.window
