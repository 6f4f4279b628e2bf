"""The runner's report (docs/architecture.md#container-contract): one model, written by the runner, read by the
operator.

One JSON object in the job container's termination message (and the runner's last stdout line):

    {"rethread": {"unpacked": bool, "packed": "agent" | "summary" | null, "detail": str},  # when either ran
     "workspace": {"head": sha, "pushed": sha | null} | {"failure": <CHECKOUT_FAILURES key>, "detail": str},
     "session": {"resumed": bool, "reason": <closed enum token>},
     "context": {"tokens": int, "window": int},            # only when measured (finite, window > 0)
     "tokens": {"input", "output", "cacheRead", "cacheWrite", "total", "calls", "unpriced"[, "cost"]},
                # the job's own replies, with or without a session; "cost" only when every reply was priced
     "piVersion": "<what pi --version said>",
     "outcome": "completed" | "failed" | "aborted" | "refused",
     "secrets": [{"length": int, "sha256": hex}]}  # the job's own secrets, by digest (contract/digests.py)

Optional parts are left out rather than sent as null. The runner writes it with
:meth:`RunnerReport.to_message`; the operator reads it with :meth:`RunnerReport.from_message`. The message
crosses a trust boundary (the Pod runs an agent that owns ``/session``), so reading accepts it field by
field: the closed enums, integers in range, known token fields only. Anything else is dropped, never copied
into a status a person trusts, and a message that is not a JSON object within the limit is no report at all.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from pidispatch.contract import TERMINATION_MESSAGE_LIMIT, TOKEN_FIELDS, is_commit
from pidispatch.contract.digests import SecretDigest, as_json, parse_digests
from pidispatch.record import MAX_SAFE_INTEGER, RunnerSession, parse_context, parse_runner_session

OUTCOMES = ("completed", "failed", "refused", "aborted")
# Why the runner could not check the workspace out (closed: the Job's condition reason is derived from it).
CHECKOUT_FAILURES = {"commit-gone": "CheckoutCommitGone", "auth-failed": "CheckoutAuthFailed",
                     "forbidden-path": "CheckoutForbiddenPath", "too-large": "CheckoutTooLarge",
                     "failed": "CheckoutFailed"}
HANDOFF_WRITERS = ("agent", "summary")
DETAIL_LIMIT = 300
_VERSION_CHARS = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-+_")
# Dropped first, in this order, should the message ever reach the limit: `session` and `outcome` stay.
_OPTIONAL = ("tokens", "context", "piVersion", "workspace", "rethread", "secrets")


def _detail(value: Any) -> str | None:
    """Free text from the Pod, made printable and capped; anything but a string is no detail."""
    if not isinstance(value, str):
        return None
    return "".join(c if c.isprintable() else " " for c in value)[:DETAIL_LIMIT]


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

    def to_json(self) -> dict[str, Any]:
        """The wire form: the failure and git's words when the clone failed, else the final state."""
        if self.failure is not None:
            return {"failure": self.failure, "detail": self.detail}
        return {"head": self.head, "pushed": self.pushed}

    @classmethod
    def from_json(cls, value: Any) -> Workspace | None:
        """Accept only commit ids, a known failure and printable detail; ``None`` unless an object."""
        if not isinstance(value, dict):
            return None
        head, pushed, failure = (value.get(k) for k in ("head", "pushed", "failure"))
        return cls(head=head if is_commit(head) else None, pushed=pushed if is_commit(pushed) else None,
                   failure=failure if failure in CHECKOUT_FAILURES else None, detail=_detail(value.get("detail")))


@dataclass(frozen=True)
class Rethread:
    """The rethread part of the report: whether the job unpacked a handoff, and who packed one at its end.

    A pack that was tried says who wrote the handoff (``None``: nobody could) and, when nobody did, why not;
    a job that only unpacked sends ``unpacked`` alone.
    """

    unpacked: bool = False
    packed: str | None = None  # "agent" | "summary"; None: no handoff was written
    detail: str | None = None  # why no handoff was written, when a pack was tried

    def to_json(self) -> dict[str, Any]:
        part: dict[str, Any] = {"unpacked": self.unpacked}
        if self.packed is not None or self.detail is not None:
            part["packed"] = self.packed
        if self.detail:
            part["detail"] = self.detail
        return part

    @classmethod
    def from_json(cls, value: Any) -> Rethread | None:
        if not isinstance(value, dict):
            return None
        packed = value.get("packed")
        return cls(value.get("unpacked") is True, packed if packed in HANDOFF_WRITERS else None,
                   _detail(value.get("detail")))


def _token_value(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0 or value > MAX_SAFE_INTEGER:
        return None
    return value


def _tokens(value: Any) -> dict[str, float]:
    """The known token fields with a JSON number in range; everything else is dropped."""
    tokens: dict[str, float] = {}
    if isinstance(value, dict):
        for name in TOKEN_FIELDS:
            number = _token_value(value.get(name))
            if number is not None:
                tokens[name] = number
    return tokens


def _version(value: Any) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= 64 and set(value) <= _VERSION_CHARS:
        return value
    return None


@dataclass(frozen=True)
class RunnerReport:
    """The runner's report; every field may be missing (a reader keeps only what survived validation)."""

    session: RunnerSession | None = None
    context: tuple[int, int] | None = None  # (tokens, window)
    tokens: dict[str, float] = field(default_factory=dict)
    pi_version: str | None = None
    outcome: str | None = None  # one of OUTCOMES; the runner always sets it
    workspace: Workspace | None = None
    rethread: Rethread | None = None
    # Digests of the job's own secrets (forge token, model keys) for the scan before the promotion.
    secrets: tuple[SecretDigest, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The report object, with the parts that are missing left out rather than sent as null."""
        report: dict[str, Any] = {}
        if self.rethread is not None:
            report["rethread"] = self.rethread.to_json()
        if self.workspace is not None:
            report["workspace"] = self.workspace.to_json()
        if self.session is not None:
            report["session"] = {"resumed": self.session.resumed, "reason": self.session.reason}
        if self.context is not None:
            report["context"] = {"tokens": self.context[0], "window": self.context[1]}
        if self.tokens:
            report["tokens"] = dict(self.tokens)
        if self.pi_version is not None:
            report["piVersion"] = self.pi_version
        if self.outcome is not None:
            report["outcome"] = self.outcome
        if self.secrets:
            report["secrets"] = as_json(self.secrets)
        return report

    def to_message(self) -> str:
        """One line of compact JSON, always within the termination message limit.

        Every field is bounded (the version by its shape, numbers by JSON), so this never trims in
        practice; if it ever would, the optional parts go first and ``session`` and ``outcome`` stay.
        """
        report = self.to_json()
        text = json.dumps(report, separators=(",", ":"), ensure_ascii=True)
        for optional in _OPTIONAL:
            if len(text.encode("utf-8")) < TERMINATION_MESSAGE_LIMIT:
                break
            report = {k: v for k, v in report.items() if k != optional}
            text = json.dumps(report, separators=(",", ":"), ensure_ascii=True)
        return text

    @classmethod
    def from_message(cls, message: str | None) -> RunnerReport | None:
        """Read a termination message; ``None`` when it is absent, too long, not JSON or not an object."""
        if not message or len(message.encode("utf-8", "replace")) > TERMINATION_MESSAGE_LIMIT:
            return None
        try:
            data = json.loads(message)
        except (ValueError, RecursionError):  # 4 KiB of brackets nests deeper than the parser recurses
            return None
        if not isinstance(data, dict):
            return None
        outcome = data.get("outcome")
        return cls(
            session=parse_runner_session(data.get("session")),
            context=parse_context(data.get("context")),
            tokens=_tokens(data.get("tokens")),
            pi_version=_version(data.get("piVersion")),
            outcome=outcome if outcome in OUTCOMES else None,
            workspace=Workspace.from_json(data.get("workspace")),
            rethread=Rethread.from_json(data.get("rethread")),
            secrets=parse_digests(data.get("secrets")),
        )
