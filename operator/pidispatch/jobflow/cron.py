"""Cron Triggers fire: a Job for each slot of ``on.schedule`` (issue 34 item 4), on the leader only.

Slots are minutes of ``on.schedule`` read in ``on.timeZone`` (UTC unless set), on the operator's clock
(``api/cron.py``); they are recorded as UTC instants. A turn reads every Trigger and, for each cron Trigger that
may run jobs:

1. finishes a fire a predecessor left half done: ``status.schedule.lastSlot`` is claimed but ``lastJob``
   does not name its Job, so the Job is created (again);
2. finds the slots due since the last one fired or was skipped (since the Trigger's creation for a first fire).
   **The rule for missed runs is Kubernetes' CronJob's** (``syncCronJob`` and ``mostRecentScheduleTime``,
   docs/cron.md#missed-slots-and-startingdeadlineseconds): only the latest slot due fires, once; without
   ``on.startingDeadlineSeconds`` however late, with it only if it came due less than that long ago. Every other
   slot due, and a latest one past the deadline, is skipped: counted in ``status.schedule.missed`` and
   ``pidispatch_cron_missed``, never run; a latest one skipped for the deadline is also written to
   ``lastSkipped`` (a CronJob's controller never looks at a slot older than its deadline, so it leaves no trace;
   the record here keeps the same slot from being counted twice). More than :data:`TOO_MANY_MISSED` slots
   skipped at once is the CronJob's ``TooManyMissedTimes`` warning. An operator down for a day on
   ``*/5 * * * *`` starts one job when it comes back, not 288 (and none with a deadline shorter than its absence);
3. claims that slot: a status write conditional on the Trigger's ``resourceVersion`` (a 409: another writer
   came first, and the next turn reads what it wrote), **before** the Job is created. This module writes no
   status itself: each write is an outcome (``summarize_trigger.Claimed``, ``Skipped``, ``JobNoted``,
   ``NextSlot``) that the Trigger's one writer, ``trigger.write_status``, summarizes and writes;
4. creates the Job, named after the Trigger and the slot (:func:`job_name`), so a create retried by a
   restarted operator or a new leader answers 409 and is not a second Job; then notes it in ``lastJob``.

A crash between 3 and 4 leaves the slot claimed with no Job: step 1 of the next turn (this process or the
next leader) creates it, whatever the deadline (the slot started in time: its claim is the start). A Job deleted
by a person between its create and the ``lastJob`` note would be made again; nothing else makes a slot fire twice.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pidispatch import failpoints, metrics
from pidispatch.api import cron
from pidispatch.api.crds import GROUP, VERSION
from pidispatch.api.models import CronStatus
from pidispatch.api.views import TriggerView
from pidispatch.events import emit
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.summarize_trigger import Claimed, JobNoted, NextSlot, Skipped
from pidispatch.jobflow.trigger import firing, write_status
from pidispatch.kubeapi import ApiError

log = logging.getLogger("pidispatch.operator")

CREATED_BY_LABEL = "app.kubernetes.io/created-by"
CREATED_BY = "pi-dispatch-operator"
SLOT_ANNOTATION = "pi-dispatch.dev/cron-slot"
# The longest wait between turns: a Trigger created or changed is also read by the next turn this soon.
MAX_WAIT_SECONDS = 30.0
# A Trigger name longer than this is shortened (with a hash of the whole, so names stay distinct) in its Jobs'.
NAME_ROOM = 200


def rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: Any) -> datetime | None:
    """An RFC 3339 stamp as an aware UTC datetime; ``None`` for anything else."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.astimezone(UTC) if when.tzinfo is not None else when.replace(tzinfo=UTC)


def job_name(trigger: str, slot: datetime) -> str:
    """The Job of ``trigger``'s ``slot``: the same name whoever creates it, so a second create answers 409."""
    base = trigger
    if len(trigger) > NAME_ROOM:
        base = f"{trigger[:NAME_ROOM - 11]}-{hashlib.sha256(trigger.encode()).hexdigest()[:10]}"
    return f"{base}-cron-{slot.astimezone(UTC):%Y%m%d%H%M}"


# Kubernetes' CronJob warns (TooManyMissedTimes) past this many slots missed in one sync; so does the loop here.
TOO_MANY_MISSED = 100


@dataclass(frozen=True)
class Due:
    """What a turn does with the slots due: ``slot`` fires (``None``: none does), ``missed`` slots are skipped,
    and ``skipped`` is the latest of them when it was skipped for the deadline alone and nothing fires."""

    slot: datetime | None
    missed: int
    skipped: datetime | None = None


def due(schedule: cron.Schedule, since: datetime, now: datetime, deadline: int | None = None) -> Due | None:
    """The missed-run rule (the module's step 2): of the slots in ``(since, now]`` the latest fires if it is
    within ``deadline`` seconds of ``now`` (any, when ``None``), the others are missed; ``None``: no slot due.

    A slot exactly ``deadline`` seconds old is too late, as for a CronJob (its earliest time is ``now -
    deadline``, and a slot is strictly after it)."""
    latest, count = None, 0
    for slot in cron.slots_between(schedule, since, now):
        latest, count = slot, count + 1
    if latest is None:
        return None
    if deadline is not None and latest <= now - timedelta(seconds=deadline):
        return Due(None, count, latest)
    return Due(latest, count - 1)


def job_body(trigger: TriggerView, repository: str, slot: datetime) -> dict[str, Any]:
    """The Job a slot creates: a forge job on the Trigger's repository, with no issue and no pull request."""
    stamp = rfc3339(slot)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job",
            "metadata": {"name": job_name(trigger.name, slot), "labels": {CREATED_BY_LABEL: CREATED_BY},
                         "annotations": {SLOT_ANNOTATION: stamp}},
            "spec": {"trigger": trigger.name, "forge": "github", "repository": repository,
                     "deliveryId": f"cron-{stamp}"}}


class Cron:
    """The cron loop's turns for one namespace. ``wall``: the operator's clock (seconds since the epoch)."""

    def __init__(self, cluster: Cluster, wall: Callable[[], float],
                 blocked: Callable[[TriggerView], str | None] = lambda trigger: None) -> None:
        self.cluster = cluster
        self.wall = wall
        # Why a Trigger that may fire by its spec cannot run jobs now (its resumed jobs could not be placed:
        # Triggers.placement): its slots pass unfired, as missed, instead of making a refused Job each.
        self.blocked = blocked
        self.wake = threading.Event()  # a Trigger changed: the next turn comes now
        self._soonest: datetime | None = None

    def next_turn_in(self) -> float:
        """Seconds until the soonest slot of any cron Trigger (just past it), at most ``MAX_WAIT_SECONDS``."""
        if self._soonest is None:
            return MAX_WAIT_SECONDS
        return max(0.05, min(MAX_WAIT_SECONDS, self._soonest.timestamp() - self.wall() + 0.05))

    def turn(self) -> None:
        """Fire every cron Trigger whose slot came due; remember the soonest next slot."""
        soonest = None
        for body in self.cluster.api.list(self.cluster.crd("triggers")):
            trigger = TriggerView.of(body)
            try:
                upcoming = self.fire(trigger)
            except Exception as exc:  # one Trigger's failure must not keep the others from firing
                log.warning("cron Trigger %s: %s: %s", trigger.name, type(exc).__name__, exc)
                upcoming = None
            if upcoming is not None and (soonest is None or upcoming < soonest):
                soonest = upcoming
        self._soonest = soonest

    def fire(self, trigger: TriggerView) -> datetime | None:
        """One Trigger's turn (the module's steps 1-4); answers its next slot, ``None`` if it does not fire."""
        schedule = firing(trigger)
        spec = trigger.spec
        if schedule is None or spec is None or not spec.on.repository:
            return None
        now = datetime.fromtimestamp(self.wall(), UTC)
        if self.blocked(trigger) is not None:
            return cron.next_slot(schedule, now)
        record = trigger.status.schedule or CronStatus()
        version = trigger.meta.resource_version
        last = parse_time(record.lastSlot)
        if last is not None and record.lastJob != job_name(trigger.name, last):
            version = self._create(trigger, spec.on.repository, last, version)  # step 1
            if version is None:
                return None
        skipped = parse_time(record.lastSkipped)
        since = (max((t for t in (last, skipped) if t is not None), default=None)
                 or parse_time(trigger.meta.created) or now)
        found = due(schedule, since, now, spec.on.startingDeadlineSeconds)
        upcoming = cron.next_slot(schedule, now)
        nxt = rfc3339(upcoming) if upcoming is not None else None
        if found is None:
            write_status(self.cluster, trigger, NextSlot(nxt), version)
            return upcoming
        missed = (record.missed or 0) + found.missed
        if found.missed > TOO_MANY_MISSED:
            log.warning("cron Trigger %s: too many missed start times: %d. Set or decrease on.startingDeadlineSeconds, "
                        "or check the clock", trigger.name, found.missed)
            emit("cron_too_many_missed", trigger=trigger.name, missed=found.missed)
        if found.slot is None:
            assert found.skipped is not None
            if write_status(self.cluster, trigger, Skipped(rfc3339(found.skipped), missed, nxt), version) is not None:
                metrics.CRON_MISSED.inc(found.missed)
                emit("cron_skipped", trigger=trigger.name, slot=rfc3339(found.skipped), missed=found.missed,
                     deadline=spec.on.startingDeadlineSeconds)
            return upcoming
        claimed = write_status(self.cluster, trigger, Claimed(rfc3339(found.slot), missed, nxt), version)
        if claimed is None:
            return upcoming  # another writer came first: the next turn reads what it wrote
        if found.missed:
            metrics.CRON_MISSED.inc(found.missed)
        failpoints.at("cron-claimed", trigger.name)
        self._create(trigger, spec.on.repository, found.slot, claimed)
        metrics.CRON_FIRES.inc()
        emit("cron_fired", trigger=trigger.name, slot=rfc3339(found.slot), job=job_name(trigger.name, found.slot),
             missed=found.missed)
        return upcoming

    def _create(self, trigger: TriggerView, repository: str, slot: datetime, version: str | None) -> str | None:
        """Create the slot's Job (a 409: it exists already, the create of an earlier try), then note it in
        ``lastJob``; answers the Trigger's new resourceVersion, ``None`` when another writer came first."""
        body = job_body(trigger, repository, slot)
        try:
            self.cluster.api.create(self.cluster.crd("jobs"), body)
        except ApiError as exc:
            if exc.status != 409:
                raise
        return write_status(self.cluster, trigger, JobNoted(body["metadata"]["name"]), version)
