"""The one judge of a Trigger's status (flux's summarize, as ``summarize.py`` is a Job's).

Two steps concern a Trigger's status, and each says what it found as a small frozen outcome: the Trigger's
reading (``trigger.Triggers``: :class:`Readiness`, the conditions ``Ready``, ``ResumeArmed``, ``SessionStore`` and
the bounds in force) and the cron loop's firing record (``cron.py``: :class:`NextSlot`, :class:`Claimed`,
:class:`Skipped`, :class:`JobNoted`, its ``status.schedule``). :func:`summarize_trigger` turns either into the
status it wants; ``trigger.write_status`` (the one writer) patches it through ``status_patch.write_status``
(docs/architecture.md#status-writing).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pidispatch.api.conditions import set_condition
from pidispatch.api.placement import PLACEMENT_CONFLICT
from pidispatch.api.serves import NO_REPOSITORIES, NO_REPOSITORIES_MESSAGE
from pidispatch.api.views import TriggerView
from pidispatch.settings import Settings


@dataclass(frozen=True)
class Readiness:
    """The Trigger read as it is: the operator's settings (the store, the bounds), why its resumed jobs could not
    be placed on the operator's node (``None``: they can), and a cron Trigger's next slot (``None``: it does
    not fire)."""

    settings: Settings
    placement: str | None = None
    upcoming: datetime | None = None


@dataclass(frozen=True)
class NextSlot:
    """The cron loop found no slot due: the next one (RFC 3339; ``None``: the schedule has none)."""

    at: str | None


@dataclass(frozen=True)
class Claimed:
    """The cron loop claims ``slot`` (before its Job is created), with the slots it skipped counted in ``missed``
    (the total) and the next slot."""

    slot: str
    missed: int
    next_slot: str | None


@dataclass(frozen=True)
class Skipped:
    """The cron loop skips ``slot``, the latest due, as more than ``on.startingDeadlineSeconds`` late (nothing
    fires), with the slots skipped counted in ``missed`` (the total) and the next slot."""

    slot: str
    missed: int
    next_slot: str | None


@dataclass(frozen=True)
class JobNoted:
    """The claimed slot's Job exists: its name."""

    job: str


TriggerOutcome = Readiness | NextSlot | Claimed | Skipped | JobNoted


@dataclass(frozen=True)
class Bounds:
    """The store's bounds in force (the operator's settings), as the Trigger's status shows them."""

    ttl_days: int
    max_bytes: int
    max_age_days: int
    max_resume_chain: int
    max_context_pct: int | None

    @classmethod
    def of(cls, s: Settings) -> Bounds:
        return cls(s.ttl_days, s.max_bytes, s.max_age_days, s.max_resume_chain, s.max_context_pct)


@dataclass(frozen=True)
class Judged:
    """The Trigger read as it is: its conditions (``Ready``, ``ResumeArmed``, ``SessionStore``) for ``generation``,
    and the bounds in force."""

    generation: int | None
    conditions: list[dict[str, Any]]  # metav1.Condition, as ``set_condition`` keeps them
    bounds: Bounds


@dataclass(frozen=True)
class TriggerSummary:
    """The status a Trigger should have after one outcome: its reading (:class:`Judged`) or the cron loop's record
    (merged into ``status.schedule``). :meth:`to_patch` is the one place it becomes a dict."""

    found: Judged | NextSlot | Claimed | Skipped | JobNoted

    def to_patch(self) -> dict[str, Any]:
        """The status as a JSON merge patch wants it (``status_patch.write_status`` sends what changed of it)."""
        found = self.found
        if isinstance(found, Judged):
            b = found.bounds
            bounds = {"ttlDays": b.ttl_days, "maxBytes": b.max_bytes, "maxAgeDays": b.max_age_days,
                      "maxResumeChain": b.max_resume_chain, "maxContextPct": b.max_context_pct}
            return {"observedGeneration": found.generation, "conditions": found.conditions, "bounds": bounds}
        if isinstance(found, NextSlot):
            return {"schedule": {"nextSlot": found.at}}
        if isinstance(found, Claimed):
            return {"schedule": {"lastSlot": found.slot, "lastJob": None, "missed": found.missed,
                                 "nextSlot": found.next_slot}}
        if isinstance(found, Skipped):
            return {"schedule": {"lastSkipped": found.slot, "missed": found.missed, "nextSlot": found.next_slot}}
        return {"schedule": {"lastJob": found.job}}


def summarize_trigger(trigger: TriggerView, found: TriggerOutcome) -> TriggerSummary:
    """The status ``trigger`` wants after ``found``: its conditions and bounds (:class:`Readiness`), or its cron
    record. The patch helper sends only what changes."""
    if isinstance(found, Readiness):
        return trigger_status(trigger, found.settings, trigger.meta.generation,
                              trigger.stored_status.get("conditions"), found.placement, found.upcoming)
    return TriggerSummary(found)


def ready_message(trigger: TriggerView, upcoming: datetime | None) -> str:
    if upcoming is None or trigger.spec is None:
        return "The Trigger can run jobs."
    zone = trigger.spec.on.timeZone or "UTC"
    return (f"The Trigger can run jobs. It fires on its schedule {trigger.spec.on.schedule!r} ({zone}, the "
            f"operator's clock); next at {upcoming.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}.")


def trigger_status(trigger: TriggerView, settings: Settings, generation: int | None,
                   conditions: list[dict[str, Any]] | None, placement: str | None = None,
                   upcoming: datetime | None = None) -> TriggerSummary:
    """``Ready``, ``ResumeArmed``, ``SessionStore`` and the bounds in force, for one Trigger.

    ``placement``: why its resumed jobs cannot run on the operator's node (``api/placement.py``), if so;
    ``upcoming``: a cron Trigger's next slot (:func:`next_fire`), said in the Ready message."""
    # The view's refusal carries its reason (a schedule that cannot fire included): nothing parses a message.
    problem = trigger.refusal.message if trigger.refusal is not None else placement
    armed = trigger.armed
    store = settings.sessions_dir is not None
    reason = ("Loaded" if problem is None else trigger.refusal.reason if trigger.refusal is not None
              else PLACEMENT_CONFLICT)
    conditions = set_condition(conditions, "Ready", problem is None, reason,
                               ready_message(trigger, upcoming) if problem is None else problem, generation)
    if armed and problem is None:
        armed_reason = "Armed"
        armed_message = ("Each job of this cron Trigger continues the Trigger's own conversation."
                         if upcoming is not None else
                         "Jobs of this Trigger continue the previous conversation on their branch.")
    elif trigger.requested and problem is not None:
        armed_reason, armed_message = "Refused", "run.resume is set but the Trigger is refused (see Ready)."
    elif trigger.requested:
        armed_reason, armed_message = NO_REPOSITORIES, NO_REPOSITORIES_MESSAGE
    else:
        armed_reason, armed_message = "NotRequested", "run.resume is not set: every job starts a fresh conversation."
    conditions = set_condition(conditions, "ResumeArmed", armed and problem is None, armed_reason, armed_message,
                               generation)
    if store:
        store_status, store_reason, store_message = True, "Configured", "A session store is configured."
    elif armed:
        store_status, store_reason = False, "SessionsDirUnset"
        store_message = ("No session store is configured, so every delivery of this Trigger is refused "
                         "(sessions-dir-unset). Enable it with the Helm value sessions.enabled=true, or remove "
                         "run.resume.")
    else:
        store_status, store_reason, store_message = False, "NotConfigured", "No session store (not needed here)."
    conditions = set_condition(conditions, "SessionStore", store_status, store_reason, store_message, generation)
    return TriggerSummary(Judged(generation, conditions, Bounds.of(settings)))
