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
from pidispatch.contract import TERMINATION_MESSAGE_LIMIT, is_commit
from pidispatch.record import MAX_SAFE_INTEGER, RunnerSession, parse_context, parse_runner_session
from pidispatch.store.redact import SecretDigest, parse_digests

OUTCOMES = ("completed", "failed", "refused", "aborted")
# Why the runner could not check the workspace out (closed: the Job's condition reason is derived from it).
CHECKOUT_FAILURES = {"commit-gone": "CheckoutCommitGone", "auth-failed": "CheckoutAuthFailed",
                     "forbidden-path": "CheckoutForbiddenPath", "too-large": "CheckoutTooLarge",
                     "failed": "CheckoutFailed"}
DETAIL_LIMIT = 300
_VERSION_CHARS = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-+_")


@dataclass(frozen=True)
class RunnerReport:
    """What survived validation; every field may be missing."""

    session: RunnerSession | None = None
    context: tuple[int, int] | None = None
    tokens: dict[str, float] = field(default_factory=dict)
    pi_version: str | None = None
    outcome: str | None = None
    workspace: Workspace | None = None
    rethread: Rethread | None = None
    # Digests of the job's own secrets (forge token, model keys) for the scan before the promotion.
    secrets: tuple[SecretDigest, ...] = ()


@dataclass(frozen=True)
class Rethread:
    """The rethread part of the report: whether the job unpacked a handoff, and who packed one at its end."""

    unpacked: bool = False
    packed: str | None = None  # "agent" | "summary"; None: no handoff was written


def parse_rethread(value: Any) -> Rethread | None:
    if not isinstance(value, dict):
        return None
    packed = value.get("packed")
    return Rethread(value.get("unpacked") is True, packed if packed in ("agent", "summary") else None)


@dataclass(frozen=True)
class Workspace:
    """The workspace part of the report: the final ``HEAD``, what was pushed, or why the clone failed."""

    head: str | None = None
    pushed: str | None = None
    failure: str | None = None  # a key of CHECKOUT_FAILURES
    detail: str | None = None  # git's own words (no token: the clone never has one in a URL or argv)

    def status(self) -> dict[str, Any] | None:
        """``status.workspace`` of the Job (only when the clone happened)."""
        return {"head": self.head, "pushed": self.pushed} if self.head is not None else None


def parse_workspace(value: Any) -> Workspace | None:
    if not isinstance(value, dict):
        return None
    head, pushed, failure, detail = (value.get(k) for k in ("head", "pushed", "failure", "detail"))
    if isinstance(detail, str):
        detail = "".join(c if c.isprintable() else " " for c in detail)[:DETAIL_LIMIT]
    return Workspace(head=head if is_commit(head) else None, pushed=pushed if is_commit(pushed) else None,
                     failure=failure if failure in CHECKOUT_FAILURES else None,
                     detail=detail if isinstance(detail, str) else None)


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
        workspace=parse_workspace(data.get("workspace")),
        rethread=parse_rethread(data.get("rethread")),
        secrets=parse_digests(data.get("secrets")),
    )
