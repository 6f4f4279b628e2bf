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
    total: int = 0
    cost: float = 0.0
    calls: int = 0

    def as_tokens(self) -> dict[str, float]:
        """The report's ``tokens`` part."""
        return {"input": self.input, "output": self.output, "total": self.total,
                "cost": round(self.cost, 10), "calls": self.calls}


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


def new_usage(final: bytes, before_ids: frozenset[str]) -> Usage:
    """Sum the usage of assistant messages in `final` whose entry id was not in the file before the run.

    Tolerant, like pi's own reading (malformed lines are skipped): pi only appends, but the agent can
    write to the file, and the report must still come out. Every billed reply counts, including error
    replies and replies on abandoned branches: this is what the run cost, not what the context holds.
    """
    totals = [0, 0, 0]
    cost = 0.0
    calls = 0
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
        totals[0] += _count(usage.get("input"))
        totals[1] += _count(usage.get("output"))
        totals[2] += _count(usage.get("totalTokens"))
        price = usage.get("cost")
        cost += _money(price.get("total")) if isinstance(price, dict) else 0.0
        calls += 1
    return Usage(input=totals[0], output=totals[1], total=totals[2], cost=cost, calls=calls)


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
    """`(tokens, window)` as pi's `get_session_stats` would report them (pi-cli §7.3), or None.

    None when pi would report null (e.g. right after a compaction) or the window is not positive: the
    spec includes `context` only when both are finite and the window is > 0.
    """
    usage = context_usage(final, context_window(models, model), models if isinstance(models, dict) else None)
    if usage.tokens is None or usage.tokens < 0 or usage.window <= 0:
        return None
    return usage.tokens, usage.window
