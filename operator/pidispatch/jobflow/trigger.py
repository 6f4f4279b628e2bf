"""Trigger status: ``Ready``, ``ResumeArmed``, ``SessionStore`` and the bounds in force.

The operator repeats the Trigger CRD's CEL refusals (defence in depth, and for clusters that apply the
CRD without CEL) and says, per Trigger, whether its jobs would resume and whether a store is there.
"""

from __future__ import annotations

from typing import Any

from pidispatch.api.conditions import set_condition
from pidispatch.api.trigger import first_refusal, resume_armed
from pidispatch.settings import Settings


def trigger_status(spec: dict[str, Any], settings: Settings, generation: int | None,
                   conditions: list[dict[str, Any]] | None) -> dict[str, Any]:
    """``Ready``, ``ResumeArmed``, ``SessionStore`` and the bounds in force, for one Trigger."""
    problem = first_refusal(spec)
    armed = resume_armed(spec)
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
