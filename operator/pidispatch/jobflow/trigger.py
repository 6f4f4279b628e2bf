"""Trigger status: ``Ready``, ``ResumeArmed``, ``SessionStore`` and the bounds in force.

The operator repeats the Trigger CRD's CEL refusals (defence in depth, and for clusters that apply the
CRD without CEL), adds its own (``api/trigger.py``: a field the Trigger's event never reads, a Trigger that could
never fire, ``run.kind: local``), and says, per Trigger, whether its jobs would resume and whether a store is there. A
Trigger whose resumed jobs could never be placed on the operator's node (ReadWriteOnce staging, mount
mode: ``api/placement.py``) is not Ready either, and its Jobs are refused at admission as any Job of a
Trigger that is not Ready. So is a cron Trigger whose ``on.schedule`` cannot fire (``InvalidSchedule``); a
cron Trigger that can says in its Ready message when it fires next (``jobflow/cron.py`` fires it).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pidispatch.api import cron
from pidispatch.api.conditions import set_condition
from pidispatch.api.placement import PLACEMENT_CONFLICT, OperatorNode, placement_conflict
from pidispatch.api.serves import NO_REPOSITORIES, NO_REPOSITORIES_MESSAGE
from pidispatch.api.trigger import Refusal
from pidispatch.api.views import JobView, TriggerView
from pidispatch.events import emit
from pidispatch.jobflow.cluster import Cluster
from pidispatch.kubeapi import ApiError
from pidispatch.settings import Settings
from pidispatch.settings.scheduling import Scheduling


def firing(trigger: TriggerView) -> cron.Schedule | None:
    """``trigger``'s schedule when it is a cron Trigger that may fire, else ``None``."""
    spec = trigger.spec
    if (spec is None or spec.on.event != "cron" or trigger.meta.deletion or trigger.refusal is not None
            or trigger.schedule_problem is not None or spec.on.schedule is None):
        return None
    return cron.parse(spec.on.schedule)


def next_fire(trigger: TriggerView, now: datetime) -> datetime | None:
    """When ``trigger`` fires next: the first slot after ``now``; ``None`` for a Trigger that does not fire."""
    schedule = firing(trigger)
    return cron.next_slot(schedule, now) if schedule is not None else None


def ready_message(trigger: TriggerView, upcoming: datetime | None) -> str:
    if upcoming is None or trigger.spec is None:
        return "The Trigger can run jobs."
    return (f"The Trigger can run jobs. It fires on its schedule {trigger.spec.on.schedule!r} (UTC, the operator's "
            f"clock); next at {upcoming.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}.")


def trigger_status(trigger: TriggerView, settings: Settings, generation: int | None,
                   conditions: list[dict[str, Any]] | None, placement: str | None = None,
                   upcoming: datetime | None = None) -> dict[str, Any]:
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
    s = settings
    bounds = {"ttlDays": s.ttl_days, "maxBytes": s.max_bytes, "maxAgeDays": s.max_age_days,
              "maxResumeChain": s.max_resume_chain, "maxContextPct": s.max_context_pct}
    return {"observedGeneration": generation, "conditions": conditions, "bounds": bounds}


class Triggers:
    """The Triggers as the watch last delivered them, and the one writer of their status."""

    def __init__(self, cluster: Cluster, settings: Settings, rules: Scheduling | None = None,
                 node_name: str | None = None, wall: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.wall = wall
        self.settings = settings
        self.rules = rules or Scheduling()
        self.node_name = node_name
        # The operator's Node as last read (None: co-location off, the name unknown, or the Node unreadable).
        self.node: OperatorNode | None = None
        self._node_unreadable = False
        self._known: dict[str, TriggerView] = {}

    def read_node(self) -> None:
        """Read the operator's Node (its labels and taints may change): only under co-location, where a
        resumed job Pod must land there. Unreadable (no ``get nodes`` grant): no placement check, said once."""
        if self.rules.colocate_with is None or not self.node_name:
            return
        try:
            body = self.cluster.api.get_or_none(f"/api/v1/nodes/{self.node_name}")
        except ApiError as exc:
            if exc.status not in (401, 403):
                raise
            body = None
        if body is None and not self._node_unreadable:
            emit("placement_unchecked", node=self.node_name,
                 why="the operator's Node cannot be read (RBAC get nodes), so Triggers whose resumed jobs could not "
                     "run there are not refused ahead")
        self._node_unreadable = body is None
        self.node = OperatorNode.of(body) if body is not None else None

    def placement(self, trigger: TriggerView) -> str | None:
        """Why ``trigger``'s resumed jobs cannot run on the operator's node, or ``None``."""
        if trigger.spec is None or trigger.refusal is not None:
            return None
        return placement_conflict(trigger, self.rules, self.node)

    def on_trigger(self, trigger: TriggerView) -> None:
        """Remember ``trigger`` and write its status if that changed."""
        self._known[trigger.name] = trigger
        old = trigger.stored_status  # compared as stored: a write only when something changed
        upcoming = next_fire(trigger, datetime.fromtimestamp(self.wall(), UTC))
        status = trigger_status(trigger, self.settings, trigger.meta.generation, old.get("conditions"),
                                self.placement(trigger), upcoming)
        if {k: old.get(k) for k in status} != status:
            self.cluster.api.patch(self.cluster.crd("triggers", trigger.name, "status"), {"status": status})

    def forget(self, name: str) -> None:
        self._known.pop(name, None)

    def of(self, job: JobView) -> TriggerView | None:
        """The Job's Trigger (one GET the first time a name is asked for), or ``None`` when there is none.

        A Trigger whose resumed jobs cannot be placed comes back refused (``refusal`` the placement
        conflict), so the admission refuses its Jobs as those of any Trigger that is not Ready; so does a cron
        Trigger whose schedule cannot fire."""
        name = job.trigger_name
        known = self._known.get(name)
        if known is None:
            found = self.cluster.api.get_or_none(self.cluster.crd("triggers", name))
            if found is not None:
                known = self._known[name] = TriggerView.of(found)
        if known is None:
            return None
        conflict = self.placement(known)  # None for a refused Trigger: its own refusal (a schedule's too) stands
        return known if conflict is None else dataclasses.replace(known, refusal=Refusal(PLACEMENT_CONFLICT, conflict))
