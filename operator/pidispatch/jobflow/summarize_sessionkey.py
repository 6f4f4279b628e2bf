"""The one judge of a SessionKey's status (flux's summarize, as ``summarize.py`` is a Job's).

The steps that concern a key each say what they found as one of the small frozen outcomes below, and write
nothing: the job's end (:class:`LastJob`, :class:`Rethreaded`, ``cost.JobUsage``), the lifecycle
(:class:`Promoted` from a promotion, :class:`FailedResume` and :class:`Released` from ``quarantine.py``,
:class:`Retirement` from ``retire.py``). :func:`summarize_sessionkey` folds them, over the status as stored
(``SessionKeyView.status``, typed) and the store's own reading of the key (``store.inspect.inspect_key``'s
answer, read once into :class:`StoreReading`), into the one status the key should have, a
:class:`SessionKeySummary`; its ``to_patch()`` is the only place that status becomes a dict (the JSON merge patch),
and ``sessionkey.write`` (the one writer) sends it through ``status_patch.write_status``.

So every status field of a SessionKey is decided here and nowhere else: ``failedResumes`` is counted, reset
by a promotion, released and emptied by a retirement in this file (docs/architecture.md#status-writing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pidispatch.api.conditions import reason_to_camel, set_condition
from pidispatch.api.models import (
    ContextReading,
    FailedResumes,
    JobPullRequest,
    KeyUsage,
    Retired,
    SessionKeyStatus,
    WaitingLetter,
)
from pidispatch.api.views import SessionKeyView, lenient
from pidispatch.api.vocabulary import AUTHOR_ASSOCIATIONS
from pidispatch.jobflow import cost, lifecycle
from pidispatch.jobflow.cost import JobUsage


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
    pull_request: JobPullRequest | None = None  # the forge's pull request on the job's branch (its outputs)


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


@dataclass(frozen=True)
class StoreReading:
    """The store's judgement of a key (``store.inspect.inspect_key``, which hands a dict as ``store inspect`` prints
    it), read once here: every field the SessionKey's status takes from it."""

    stored: bool  # a real key directory with a transcript of some bytes
    bytes: int | None
    venue: str | None
    pi_version: str | None
    population: tuple[str, ...] | None
    resume_chain: int
    context: ContextReading | None
    locked: bool  # a promotion's lock is there (live or stale)
    lock_live: bool
    lock_age_ms: int | None
    next: str
    assumed_pi_version: bool
    ledger_entries: int
    letter: WaitingLetter | None

    @classmethod
    def of(cls, found: Mapping[str, Any]) -> StoreReading:
        lock = _mapping(found.get("lock"))
        ledger = _mapping(found.get("ledger"))
        population = found.get("population")
        context, letter = found.get("context"), ledger.get("letter")
        return cls(stored=bool(found.get("directory")) and bool(found.get("bytes")), bytes=found.get("bytes"),
                   venue=found.get("venue"), pi_version=found.get("piVersion"),
                   population=tuple(population) if isinstance(population, list) else None,
                   resume_chain=found.get("resumeChain") or 0,
                   context=None if context is None else lenient(ContextReading, context),
                   locked=bool(lock), lock_live=lock.get("state") == "live", lock_age_ms=lock.get("ageMs"),
                   next=found.get("next") or "absent", assumed_pi_version=bool(found.get("assumedPiVersion")),
                   ledger_entries=ledger.get("entries") or 0,
                   letter=None if letter is None else lenient(WaitingLetter, letter))


@dataclass(frozen=True)
class Lifecycle:
    """``failedResumes`` and ``retired`` as the outcomes leave them, and which of the two they changed (only those
    are sent: ``None`` then empties the field)."""

    failed_resumes: FailedResumes | None
    retired: Retired | None
    changed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Judgement:
    """The store's judgement of the key with the last job's facts and the lifecycle on top: every status field a
    store decides. ``last``: the last job's facts the outcomes set (the rest stay as stored);
    ``usage``: the counters after a job's end (``None``: no job ended)."""

    reading: StoreReading
    generation: int | None
    conditions: list[dict[str, Any]]  # metav1.Condition, as ``set_condition`` keeps them
    next: str
    last: LastJob | None = None
    rethreaded: Rethreaded | None = None
    usage: KeyUsage | None = None


@dataclass(frozen=True)
class SessionKeySummary:
    """The status a SessionKey should have after the outcomes: the lifecycle, and the store's judgement (``None``:
    no store to judge from, the lifecycle alone). :meth:`to_patch` is the one place it becomes a dict."""

    lifecycle: Lifecycle
    judged: Judgement | None = None

    def to_patch(self) -> dict[str, Any]:
        """The status as a JSON merge patch wants it, as the CRD spells it (``status_patch.write_status`` sends what
        changed of it): the lifecycle fields the outcomes changed (``None`` empties one), and with a store the
        judgement, the last job's facts the outcomes set and the usage counted."""
        life: dict[str, Any] = {}
        lived = self.lifecycle
        if "failedResumes" in lived.changed:
            failed = lived.failed_resumes
            life["failedResumes"] = None if failed is None else failed.model_dump(mode="json")
        if "retired" in lived.changed:
            retired = lived.retired
            life["retired"] = None if retired is None else {"reason": retired.reason, "at": retired.at,
                                                            "archive": retired.archive}
        judged = self.judged
        if judged is None:
            return life
        reading = judged.reading
        status: dict[str, Any] = {
            # The spec this status was judged for, as the Trigger's and the Job's say.
            "observedGeneration": judged.generation,
            "conditions": judged.conditions, "bytes": reading.bytes, "venue": reading.venue,
            "ledger": {"entries": reading.ledger_entries,
                       "letter": None if reading.letter is None else reading.letter.model_dump(exclude_unset=True)},
            "piVersion": reading.pi_version, "population": _known(reading.population),
            "resumeChain": reading.resume_chain,
            "context": None if reading.context is None else reading.context.model_dump(exclude_unset=True),
            "next": judged.next,
        }
        last = judged.last
        if last is not None:
            with_ = last.judged_with
            status.update({"lastJob": last.job, "lastReason": last.reason, "judgedWith": {
                "piVersion": with_.pi_version, "model": with_.model,
                "population": None if with_.population is None else list(with_.population)}})
            if last.pull_request is not None:
                status["lastPullRequest"] = last.pull_request.model_dump(mode="json")
            if last.promoted_at is not None:
                status["lastPromotedAt"] = last.promoted_at
                if last.commit is not None:
                    status["lastCommit"] = {"sha": last.commit.sha, "pushed": last.commit.pushed}
        if judged.rethreaded is not None:
            by = judged.rethreaded
            status["rethreadedBy"] = None if by.job is None else {"job": by.job, "reason": by.reason}
        if judged.usage is not None:
            status["usage"] = cost.usage_patch(judged.usage)
        return {**status, **life}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def judged_with(stored: SessionKeyStatus, outcomes: Sequence[KeyOutcome]) -> JudgedWith:
    """What the next delivery is judged as if it ran: the last job's pi, model and population (this one's, or
    as stored); unknown where neither says."""
    for outcome in outcomes:
        if isinstance(outcome, LastJob):
            return outcome.judged_with
    judged = stored.judgedWith
    if judged is None:
        return JudgedWith(None, None, None)
    return JudgedWith(judged.piVersion, judged.model,
                      None if judged.population is None else tuple(judged.population))


def lifecycle_fields(sk: SessionKeyView, outcomes: Sequence[KeyOutcome]) -> Lifecycle:
    """``failedResumes`` and ``retired`` after ``outcomes``, in their order, and which of them they change."""
    failed, retired = sk.status.failedResumes, sk.status.retired
    was_retired = retired is not None
    changed: set[str] = set()
    for outcome in outcomes:
        if isinstance(outcome, FailedResume):
            failed = lifecycle.counted(sk.status.failedResumes, outcome.job, outcome.threshold, outcome.at)
            changed.add("failedResumes")
        elif isinstance(outcome, Released):
            if sk.status.failedResumes is not None:
                failed = None
                changed.add("failedResumes")
        elif isinstance(outcome, Retirement):
            if not (was_retired and outcome.archive is None):
                # Retired already and nothing was left to retire: the same request seen again (the watch shows
                # the annotation until it is removed); the first retirement's facts stand. Otherwise a failure
                # count belongs to the conversation that is gone: the next one starts with none.
                retired = Retired.model_construct(reason=outcome.reason, at=outcome.at, archive=outcome.archive)
                failed = None
                changed |= {"retired", "failedResumes"}
        elif isinstance(outcome, Promoted):
            failed = retired = None
            changed |= {"retired", "failedResumes"}
    return Lifecycle(failed, retired, frozenset(changed))


def summarize_sessionkey(sk: SessionKeyView, reading: StoreReading | None,
                         outcomes: Sequence[KeyOutcome] = ()) -> SessionKeySummary:
    """The status ``sk`` should have after ``outcomes``: the store's judgement (``reading``, judged with
    :func:`judged_with`), the last job's facts, its cost, and the lifecycle on top. ``reading`` ``None`` (no
    store to judge from): the lifecycle alone. The patch helper sends only what changed."""
    life = lifecycle_fields(sk, outcomes)
    if reading is None:
        return SessionKeySummary(life)
    old = sk.status
    last = next((outcome for outcome in reversed(outcomes) if isinstance(outcome, LastJob)), None)
    rethreaded = next((outcome for outcome in reversed(outcomes) if isinstance(outcome, Rethreaded)), None)
    usage = None
    for outcome in outcomes:
        if isinstance(outcome, JobUsage):
            usage = cost.counted(usage if usage is not None else old.usage, outcome.job, outcome.start,
                                 outcome.tokens)
    by: tuple[str | None, str | None] | None
    if rethreaded is not None:
        by = None if rethreaded.job is None else (rethreaded.job, rethreaded.reason)
    else:  # as stored (a merge patch keeps no null member: a lineage with neither is none)
        stored_by = old.rethreadedBy
        by = None if stored_by is None or (stored_by.job is None and stored_by.reason is None) else (
            stored_by.job, stored_by.reason)
    conditions, nxt = judge(reading, sk.stored_status.get("conditions"), by, sk.meta.generation)
    # Retired or quarantined (as stored, or as these outcomes just made it): say so.
    conditions, nxt = lifecycle.overlay(conditions, nxt, life.retired, life.failed_resumes, sk.name,
                                        sk.meta.generation)
    return SessionKeySummary(life, Judgement(reading, sk.meta.generation, conditions, nxt, last, rethreaded, usage))


def _known(population: tuple[str, ...] | None) -> list[str] | None:
    """The stamped population as the CRD takes it: a stamp with a token no Trigger can admit shows as unknown."""
    if population is None or not all(token in AUTHOR_ASSOCIATIONS for token in population):
        return None
    return list(population)


def judge(reading: StoreReading, conditions: list[dict[str, Any]] | None,
          rethreaded_by: tuple[str | None, str | None] | None = None,
          generation: int | None = None) -> tuple[list[dict[str, Any]], str]:
    """The conditions ``Stored``, ``Resumable``, ``Locked`` and ``Rethreaded`` from the store's ``reading`` (and the
    job that rethreaded the stored conversation, with the refusal it carried the work across), and ``next``."""
    nxt = reading.next
    stored = reading.stored
    conditions = set_condition(conditions, "Stored", stored, "TranscriptStored" if stored else "NoTranscript",
                               f"{reading.bytes} bytes stored." if stored else "No transcript is stored.",
                               generation)
    assumed = " (judged with the pi version stamped on the key)" if reading.assumed_pi_version else ""
    conditions = set_condition(
        conditions, "Resumable", nxt == "resumed", "Resumable" if nxt == "resumed" else reason_to_camel(nxt),
        ("The next delivery would resume" + assumed + ".") if nxt == "resumed" else
        f"The next delivery would start cold: {nxt}{assumed}.", generation)
    live, locked, age = reading.lock_live, reading.locked, reading.lock_age_ms
    conditions = set_condition(
        conditions, "Locked", live, "PromotionInProgress" if live else ("StaleLock" if locked else "Unlocked"),
        f"A promotion holds the lock ({age} ms old)." if live else
        f"A stale lock ({age} ms old) is left; the next promotion takes it over." if locked else
        "No promotion is running.", generation)
    by = rethreaded_by
    conditions = set_condition(
        conditions, "Rethreaded", by is not None, reason_to_camel(str(by[1])) if by else "NotRethreaded",
        f"Job {by[0]} started this conversation from the stored letter and ledger after the resume was "
        f"refused ({by[1]})." if by else "The stored conversation did not start from a handoff.",
        generation)
    return conditions, nxt


def sessionkey_status(reading: StoreReading, conditions: list[dict[str, Any]] | None, last: LastJob | None = None,
                      generation: int | None = None) -> SessionKeySummary:
    """The store's judgement alone (no lifecycle, no outcome but ``last``): what ``store inspect`` would show
    a SessionKey as."""
    judged, nxt = judge(reading, conditions, None, generation)
    return SessionKeySummary(Lifecycle(None, None), Judgement(reading, generation, judged, nxt, last))
