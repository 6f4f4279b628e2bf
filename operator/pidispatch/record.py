"""The run record's session verdict: the closed reason enum and the merge of verdicts.

The enum is defined once, here, in the order of docs/store-contract.md#reasons; CRD enums, the CLI
and the docs derive from it. The merge (docs/store-contract.md#verdict-merge) decides what a Job's ``status.session``
says after the job Pod ended, from three independent witnesses: the host's gate verdict, the runner's report and the
promotion result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class SessionReason(StrEnum):
    """Why a job resumed or started cold. Closed: anything else a runner reports becomes ``None``."""

    RESUMED = "resumed"
    ABSENT = "absent"
    EXPIRED = "expired"
    CONVERSATION_TOO_OLD = "conversation-too-old"
    RESUME_CHAIN_TOO_LONG = "resume-chain-too-long"
    CONTEXT_TOO_FULL = "context-too-full"
    COMPACTION_SUMMARY_EMPTY = "compaction-summary-empty"
    TOO_LARGE = "too-large"
    UNPARSEABLE = "unparseable"
    NOT_A_REGULAR_FILE = "not-a-regular-file"
    KEY_NOT_A_DIRECTORY = "key-not-a-directory"
    TRANSCRIPT_DIVERTED = "transcript-diverted"
    VENUE_CHANGED = "venue-changed"
    PI_VERSION_CHANGED = "pi-version-changed"
    TRANSCRIPT_REPLACED = "transcript-replaced"
    LOCKED = "locked"
    PROMOTE_FAILED = "promote-failed"
    DISABLED = "disabled"
    # Not pi-dispatch's (docs/store-divergences.md): the operator's own refusals, decided from the SessionKey
    # before the gates run. The key was retired (its pull request or issue closed), or its transcript is
    # quarantined after resumed jobs failed in a row (``jobflow/lifecycle.py``).
    RETIRED = "retired"
    QUARANTINED = "quarantined"
    # Ours too: the job's Trigger admits someone the conversation's builders' did not, or the conversation's
    # population is unknown (a store from before the stamp): gate 3a (store/population.py).
    POPULATION_WIDENED = "population-widened"


SESSION_REASONS: tuple[str, ...] = tuple(reason.value for reason in SessionReason)


class JobReason(StrEnum):
    """Job-level refusals before any spend (docs/store-contract.md#refusals): a Job that ends ``Refused`` says
    which in ``status.reason``. Not session reasons."""

    SESSIONS_DIR_UNSET = "sessions-dir-unset"
    CONFIG_REFUSED = "config-refused"
    # The Job asks for more than its Trigger allows (an auth source or a repository it would not give):
    # only a hand-made Job can, so no issue comment (the repository may not be the Trigger's at all).
    BEYOND_TRIGGER = "beyond-trigger"
    # A fork's pull request under a pat or gh token, whose scope the operator cannot narrow, on a Trigger
    # without run.forks: the fork's code would run with write access to the base repository.
    FORK_NOT_ALLOWED = "fork-not-allowed"
    # The Job's Trigger is not Ready (its Ready condition says why: a load-time refusal, a schedule that cannot
    # fire, a placement conflict): nothing of the Trigger's may run until it is fixed.
    TRIGGER_NOT_READY = "trigger-not-ready"
    # A flow Trigger's Job on a fork's pull request, known from the payload: a fork's skill is anyone's text.
    FLOW_ON_FORK = "flow-on-fork"


# Promotion results that are not record reasons (docs/store-contract.md#promotion-results).
PROMOTED = "promoted"
NO_KEY = "no-key"

# JavaScript's Number.MAX_SAFE_INTEGER: upstream reads integers through doubles, so anything
# larger cannot round-trip there and must not be trusted here either.
MAX_SAFE_INTEGER = 2**53 - 1


@dataclass(frozen=True)
class HostVerdict:
    """What the gates decided before the Pod ran (``bytes`` is the staged size on resume)."""

    resume: bool
    reason: str
    bytes: int | None = None


@dataclass(frozen=True)
class RunnerSession:
    """The ``session`` part of the runner's report, after validation."""

    resumed: bool
    reason: str | None


@dataclass(frozen=True)
class PromotionResult:
    """What promotion did with the staged copy. ``forgotten``: nothing was promoted because the key was
    forgotten (``kubectl delete sessionkey``) while the job ran; ``reason`` is then ``absent``, what the
    next delivery finds."""

    promoted: bool
    reason: str
    bytes: int | None = None
    forgotten: bool = False
    handoff: Any = None  # store.handoffdir.Written: what the promotion did with the Job's handoff, if it had to
    # How many credentials the scan before the promotion redacted (``store/redact.py``); ``None``: no scan ran.
    redacted: int | None = None


def parse_runner_session(value: Any) -> RunnerSession | None:
    """Accept the runner's ``session`` only in its exact shape.

    ``/session`` is agent-authored and the report crosses a trust boundary, so ``resumed`` must be a
    real boolean and ``reason`` a member of the closed enum; any other string (a path an attacker
    wrote, say) becomes ``None`` rather than reaching the record.
    """
    if not isinstance(value, dict) or not isinstance(value.get("resumed"), bool):
        return None
    reason = value.get("reason")
    return RunnerSession(value["resumed"], reason if reason in SESSION_REASONS else None)


def is_safe_int(value: Any, minimum: int) -> bool:
    """True for a JSON integer (not a bool, not a float) within ``minimum..2**53-1``."""
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_SAFE_INTEGER


def parse_context(value: Any) -> tuple[int, int] | None:
    """The runner's ``context`` reading as ``(tokens, window)``, or ``None`` unless tokens ≥ 0 and window > 0."""
    if not isinstance(value, dict):
        return None
    tokens, window = value.get("tokens"), value.get("window")
    if isinstance(tokens, float) and math.isfinite(tokens) and tokens.is_integer():
        tokens = int(tokens)
    if isinstance(window, float) and math.isfinite(window) and window.is_integer():
        window = int(window)
    if isinstance(tokens, int) and isinstance(window, int) and is_safe_int(tokens, 0) and is_safe_int(window, 1):
        return tokens, window
    return None


def merge_session(
    host: HostVerdict | None,
    runner: RunnerSession | None,
    promoted: PromotionResult | None,
) -> dict[str, Any] | None:
    """Merge the three verdicts into the record's ``session`` by the precedence of docs/store-contract.md#verdict-merge.

    The promotion refusal outranks everything because it says why the *next* run starts cold. A
    host refusal beats a runner ``absent`` because every host refusal stages 0 bytes, so the runner
    would always say ``absent`` and hide the gate that really refused.
    """
    if host is None and runner is None:
        return None
    resumed = runner.resumed if runner is not None else False
    runner_reason = runner.reason if runner is not None else None
    reason: str | None
    if promoted is not None and not promoted.promoted:
        reason = promoted.reason
    elif host is not None and not host.resume and host.reason and runner_reason == SessionReason.ABSENT:
        reason = host.reason
    elif runner_reason is not None:
        reason = runner_reason
    elif host is not None:
        reason = host.reason
    else:
        reason = None
    if promoted is not None and promoted.bytes is not None:
        size: int | None = promoted.bytes
    else:
        size = host.bytes if host is not None else None
    merged: dict[str, Any] = {"resumed": resumed, "reason": reason, "bytes": size}
    if promoted is not None and promoted.redacted is not None:
        merged["redacted"] = promoted.redacted  # the count only, never what was redacted
    return merged
