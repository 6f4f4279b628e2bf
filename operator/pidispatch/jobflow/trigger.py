"""Trigger status: ``Ready``, ``ResumeArmed``, ``SessionStore`` and the bounds in force.

The operator repeats the Trigger CRD's CEL refusals (defence in depth, and for clusters that apply the
CRD without CEL) and says, per Trigger, whether its jobs would resume and whether a store is there.
"""

from __future__ import annotations

from typing import Any

from pidispatch.api.conditions import set_condition
from pidispatch.api.views import JobView, TriggerView
from pidispatch.jobflow.cluster import Cluster
from pidispatch.settings import Settings


def trigger_status(trigger: TriggerView, settings: Settings, generation: int | None,
                   conditions: list[dict[str, Any]] | None) -> dict[str, Any]:
    """``Ready``, ``ResumeArmed``, ``SessionStore`` and the bounds in force, for one Trigger."""
    problem = trigger.refusal
    armed = trigger.armed
    store = settings.sessions_dir is not None
    conditions = set_condition(conditions, "Ready", problem is None, "Loaded" if problem is None else "ResumeConflict",
                               "The Trigger can run jobs." if problem is None else problem, generation)
    if armed and problem is None:
        armed_reason = "Armed"
        armed_message = "Jobs of this Trigger continue the previous conversation on their branch."
    elif armed:
        armed_reason, armed_message = "Refused", "run.resume is set but the Trigger is refused (see Ready)."
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

    def __init__(self, cluster: Cluster, settings: Settings) -> None:
        self.cluster = cluster
        self.settings = settings
        self._known: dict[str, TriggerView] = {}

    def on_trigger(self, trigger: TriggerView) -> None:
        """Remember ``trigger`` and write its status if that changed."""
        self._known[trigger.name] = trigger
        old = trigger.stored_status  # compared as stored: a write only when something changed
        status = trigger_status(trigger, self.settings, trigger.meta.generation, old.get("conditions"))
        if {k: old.get(k) for k in status} != status:
            self.cluster.api.patch(self.cluster.crd("triggers", trigger.name, "status"), {"status": status})

    def forget(self, name: str) -> None:
        self._known.pop(name, None)

    def of(self, job: JobView) -> TriggerView | None:
        """The Job's Trigger (one GET the first time a name is asked for), or ``None`` when there is none."""
        name = job.trigger_name
        known = self._known.get(name)
        if known is None:
            found = self.cluster.api.get_or_none(self.cluster.crd("triggers", name))
            if found is not None:
                known = self._known[name] = TriggerView.of(found)
        return known
