"""The runner's report (container contract, ARCHITECTURE §5): one JSON object in the termination message.

It crosses a trust boundary (the Pod runs an agent that owns ``/session``), so it is accepted field
by field: the closed reason enum, integers in range, known token fields only. Anything else is
dropped, never copied into a status a person trusts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from pidispatch.api.vocabulary import TOKEN_FIELDS
from pidispatch.contract import TERMINATION_MESSAGE_LIMIT
from pidispatch.record import MAX_SAFE_INTEGER, RunnerSession, parse_context, parse_runner_session

OUTCOMES = ("completed", "failed", "refused", "aborted")
_VERSION_CHARS = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-+_")


@dataclass(frozen=True)
class RunnerReport:
    """What survived validation; every field may be missing."""

    session: RunnerSession | None = None
    context: tuple[int, int] | None = None
    tokens: dict[str, float] = field(default_factory=dict)
    pi_version: str | None = None
    outcome: str | None = None


def _token_value(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0 or value > MAX_SAFE_INTEGER:
        return None
    return value


def parse_report(message: str | None) -> RunnerReport | None:
    """Parse a termination message; ``None`` when it is absent, too long, not JSON or not an object."""
    if not message or len(message.encode("utf-8", "replace")) > TERMINATION_MESSAGE_LIMIT:
        return None
    try:
        data = json.loads(message)
    except (ValueError, RecursionError):  # 4 KiB of brackets nests deeper than the parser recurses
        return None
    if not isinstance(data, dict):
        return None
    raw_tokens = data.get("tokens")
    tokens: dict[str, float] = {}
    if isinstance(raw_tokens, dict):
        for name in TOKEN_FIELDS:
            value = _token_value(raw_tokens.get(name))
            if value is not None:
                tokens[name] = value
    version = data.get("piVersion")
    if not (isinstance(version, str) and 0 < len(version) <= 64 and set(version) <= _VERSION_CHARS):
        version = None
    outcome = data.get("outcome")
    return RunnerReport(
        session=parse_runner_session(data.get("session")),
        context=parse_context(data.get("context")),
        tokens=tokens,
        pi_version=version,
        outcome=outcome if outcome in OUTCOMES else None,
    )
