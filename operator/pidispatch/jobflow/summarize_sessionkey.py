"""The one judge of a SessionKey's status (flux's summarize, as ``summarize.py`` is a Job's).

The steps that concern a key each say what they found as one of the small frozen outcomes below, and write
nothing: the job's end (:class:`LastJob`, :class:`Rethreaded`, ``cost.JobUsage``), the lifecycle
(:class:`Promoted` from a promotion, :class:`FailedResume` and :class:`Released` from ``quarantine.py``,
:class:`Retirement` from ``retire.py``). :func:`summarize_sessionkey` folds them, over the status as stored
and the store's own reading of the key (``store.inspect.inspect_key``), into the one status the key should
have; ``sessionkey.write`` (the one writer) patches it through ``status_patch.write_status``.

So every status field of a SessionKey is decided here and nowhere else: ``failedResumes`` is counted, reset
by a promotion, released and emptied by a retirement in this file (docs/architecture.md#status-writing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pidispatch.api.conditions import reason_to_camel, set_condition
from pidispatch.api.views import SessionKeyView
from pidispatch.api.vocabulary import AUTHOR_ASSOCIATIONS
from pidispatch.jobflow import cost, lifecycle
from pidispatch.jobflow.cost import JobUsage

# The last job's facts a status keeps when a refresh (no job ended) judges the key again.
LAST_FACTS = ("lastJob", "lastReason", "lastPromotedAt", "lastCommit", "judgedWith", "rethreadedBy", "usage")


@dataclass(frozen=True)
class JudgedWith:
    """The pi, model and population of a key's last job: the next delivery is judged as if it ran them."""

    pi_version: str | None
    model: str | None
    population: tuple[str, ...] | None  # sorted; ``None``: unknown (a job of an older operator)


@dataclass(frozen=True)
class LastCommit:
    """The commit a promoted conversation's workspace ended on, and whether it was pushed."""

    sha: str
    pushed: bool


@dataclass(frozen=True)
class LastJob:
    """What a job's end tells its SessionKey: which job, its reason, what it was judged with and, for a
    promoted conversation, when and on which commit (``sessionkey.last_job_facts``)."""

    job: str
    reason: str | None
    judged_with: JudgedWith
    promoted_at: str | None = None
    commit: LastCommit | None = None

    def fields(self) -> dict[str, Any]:
        """The status fields it sets, as the CRD spells them."""
        judged = self.judged_with
        facts: dict[str, Any] = {"lastJob": self.job, "lastReason": self.reason,
                                 "judgedWith": {"piVersion": judged.pi_version, "model": judged.model,
                                                "population": None if judged.population is None
                                                else list(judged.population)}}
        if self.promoted_at is not None:
            facts["lastPromotedAt"] = self.promoted_at
            if self.commit is not None:
                facts["lastCommit"] = {"sha": self.commit.sha, "pushed": self.commit.pushed}
        return facts


@dataclass(frozen=True)
class Rethreaded:
    """The lineage of a conversation a job that did not resume promoted: the job that started it from the
    stored letter and ledger and the refusal it carried the work across, or neither (``job`` ``None``: it
    began afresh)."""

    job: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Promoted:
    """A promotion on the key (``complete.record_end``): a new conversation, so the failure count starts again
    and a retirement ends."""


@dataclass(frozen=True)
class FailedResume:
    """A resumed job that failed in a way that may be its transcript's doing (``quarantine.count``): counted
    towards quarantining it at ``threshold`` in a row, stamped ``at`` when it does."""

    job: str
    threshold: int
    at: str


@dataclass(frozen=True)
class Released:
    """A person released the quarantine (the ``pi-dispatch.dev/release-quarantine`` annotation): the count
    starts again at zero."""


@dataclass(frozen=True)
class Retirement:
    """The key was retired in the store (``retire.retire``): why, when, and the store root's entry its directory
    was archived as (``None``: deleted, or nothing was left to retire)."""

    reason: str
    at: str
    archive: str | None


KeyOutcome = LastJob | Rethreaded | Promoted | FailedResume | Released | Retirement | JobUsage


def judged_with(stored: Mapping[str, Any], outcomes: Sequence[KeyOutcome]) -> JudgedWith:
    """What the next delivery is judged as if it ran: the last job's pi, model and population (this one's, or
    as stored); unknown where neither says."""
    for outcome in outcomes:
        if isinstance(outcome, LastJob):
            return outcome.judged_with
    judged = stored.get("judgedWith") or {}
    admits = judged.get("population")
    return JudgedWith(judged.get("piVersion"), judged.get("model"),
                      tuple(admits) if isinstance(admits, list) else None)


def lifecycle_fields(sk: SessionKeyView, outcomes: Sequence[KeyOutcome]) -> dict[str, Any]:
    """``failedResumes`` and ``retired`` after ``outcomes``, in their order: only the fields they change."""
    stored = sk.stored_status
    fields: dict[str, Any] = {}
    for outcome in outcomes:
        if isinstance(outcome, FailedResume):
            failed = lifecycle.counted(sk.status.failedResumes, outcome.job, outcome.threshold, outcome.at)
            fields["failedResumes"] = None if failed is None else failed.model_dump(mode="json")
        elif isinstance(outcome, Released):
            if stored.get("failedResumes"):
                fields["failedResumes"] = None
        elif isinstance(outcome, Retirement):
            if not (stored.get("retired") and outcome.archive is None):
                # Retired already and nothing was left to retire: the same request seen again (the watch shows
                # the annotation until it is removed); the first retirement's facts stand. Otherwise a failure
                # count belongs to the conversation that is gone: the next one starts with none.
                fields["retired"] = {"reason": outcome.reason, "at": outcome.at, "archive": outcome.archive}
                fields["failedResumes"] = None
        elif isinstance(outcome, Promoted):
            fields["failedResumes"] = None
            fields["retired"] = None
    return fields


def summarize_sessionkey(sk: SessionKeyView, inspected: dict[str, Any] | None,
                         outcomes: Sequence[KeyOutcome] = ()) -> dict[str, Any]:
    """The status ``sk`` should have after ``outcomes``: the store's judgement (``inspected``, judged with
    :func:`judged_with`), the last job's facts, its cost, and the lifecycle on top. ``inspected`` ``None`` (no
    store to judge from): the lifecycle fields alone. The patch helper sends only what changed."""
    old = sk.stored_status
    life = lifecycle_fields(sk, outcomes)
    if inspected is None:
        return life
    last: dict[str, Any] = {}
    for outcome in outcomes:
        if isinstance(outcome, LastJob):
            last.update(outcome.fields())
        elif isinstance(outcome, Rethreaded):
            last["rethreadedBy"] = None if outcome.job is None else {"job": outcome.job, "reason": outcome.reason}
    facts = {**{k: old[k] for k in LAST_FACTS if k in old}, **last}
    for outcome in outcomes:
        if isinstance(outcome, JobUsage):
            facts["usage"] = cost.counted(old.get("usage"), outcome.job, outcome.start, outcome.tokens)
    status = sessionkey_status(inspected, old.get("conditions"), {**facts, **life}, sk.meta.generation)
    # Retired or quarantined (as stored, or as these outcomes just made it): say so.
    return lifecycle.overlay(status, {**old, **last, **life}, sk.name, sk.meta.generation)


def _known(population: list[str] | None) -> list[str] | None:
    """The stamped population as the CRD takes it: a stamp with a token no Trigger can admit shows as unknown."""
    if population is None or not all(token in AUTHOR_ASSOCIATIONS for token in population):
        return None
    return population


def sessionkey_status(view: dict[str, Any], conditions: list[dict[str, Any]] | None,
                      last: Mapping[str, Any] | None = None, generation: int | None = None) -> dict[str, Any]:
    """SessionKey status from ``store.inspect.inspect_key`` output plus the last job's facts."""
    stored = bool(view.get("directory")) and bool(view.get("bytes"))
    nxt = view.get("next") or "absent"
    conditions = set_condition(conditions, "Stored", stored, "TranscriptStored" if stored else "NoTranscript",
                               f"{view.get('bytes')} bytes stored." if stored else "No transcript is stored.",
                               generation)
    assumed = " (judged with the pi version stamped on the key)" if view.get("assumedPiVersion") else ""
    conditions = set_condition(
        conditions, "Resumable", nxt == "resumed", "Resumable" if nxt == "resumed" else reason_to_camel(nxt),
        ("The next delivery would resume" + assumed + ".") if nxt == "resumed" else
        f"The next delivery would start cold: {nxt}{assumed}.", generation)
    lock: dict[str, Any] = view.get("lock") or {}
    live = lock.get("state") == "live"
    conditions = set_condition(
        conditions, "Locked", live, "PromotionInProgress" if live else ("StaleLock" if lock else "Unlocked"),
        f"A promotion holds the lock ({lock.get('ageMs')} ms old)." if live else
        f"A stale lock ({lock.get('ageMs')} ms old) is left; the next promotion takes it over." if lock else
        "No promotion is running.", generation)
    by = (last or {}).get("rethreadedBy")
    conditions = set_condition(
        conditions, "Rethreaded", bool(by), reason_to_camel(by["reason"]) if by else "NotRethreaded",
        f"Job {by['job']} started this conversation from the stored letter and ledger after the resume was "
        f"refused ({by['reason']})." if by else "The stored conversation did not start from a handoff.",
        generation)
    ledger = view.get("ledger") or {}
    status: dict[str, Any] = {
        "observedGeneration": generation,  # the spec this status was judged for, as the Trigger's and the Job's say
        "conditions": conditions, "bytes": view.get("bytes"), "venue": view.get("venue"),
        "ledger": {"entries": ledger.get("entries") or 0, "letter": ledger.get("letter")},
        "piVersion": view.get("piVersion"), "population": _known(view.get("population")),
        "resumeChain": view.get("resumeChain") or 0,
        "context": view.get("context"), "next": nxt,
    }
    status.update(last or {})
    return status
