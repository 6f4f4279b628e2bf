"""The job flow's decisions (ARCHITECTURE §4), as pure functions over plain data.

``handlers/`` gathers (Job, Trigger, Pod, store readings), calls these, and acts. Nothing here does
I/O, so every branch of the flow is a table-driven unit test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pidispatch.api.conditions import reason_to_camel, set_condition
from pidispatch.api.trigger import first_refusal, resume_armed
from pidispatch.forge.head import Head, NoHead, no_key_reason
from pidispatch.record import JobReason
from pidispatch.settings import Settings
from pidispatch.store.keys import issue_branch, issue_key, pull_request_key

TERMINAL_PHASES = frozenset({"Succeeded", "Failed", "Refused"})
VENUE = "kubernetes"


@dataclass(frozen=True)
class Refusal:
    """Why a Job does not run. ``reason`` is a JobReason for the spec's refusals, else ``None``."""

    phase: str  # "Refused" (a deliberate refusal before any spend) or "Failed"
    reason: str | None
    condition_reason: str
    message: str


@dataclass(frozen=True)
class KeyRef:
    """A resolved session key and what it names. Branch and repository stay out of Job status."""

    key: str
    forge: str
    repository: str
    branch: str


SESSIONS_DIR_UNSET_MESSAGE = (
    "Trigger {trigger} asks to resume the previous conversation (run.resume: true), but this deployment has "
    "no session store, so the job did not run: without a store it would lose its conversation yet look "
    "successful. Either enable the store (Helm value sessions.enabled=true) or remove run.resume from the "
    "Trigger."
)
GH_SOURCE_MESSAGE = (
    "Trigger {trigger} arms run.resume while jobs get a long-lived full-scope gh token (auth source gh), so the "
    "job did not run: a transcript that ever echoed that token would be replayed into every later job on the "
    "branch. Switch the auth source to app or pat, or remove run.resume from the Trigger (or, knowingly, set "
    "PI_SESSIONS_ALLOW_GH_SOURCE=1). Run `pidispatch doctor` in the operator Pod for details."
)


def refusal(job_name: str, job_spec: dict[str, Any], trigger: dict[str, Any] | None,
            settings: Settings) -> Refusal | None:
    """Refusals before any spend (§4.1–2): no Pod, no slot, no store access."""
    trigger_name = job_spec.get("trigger", "")
    if trigger is None:
        return Refusal("Failed", None, "TriggerNotFound",
                       f"Trigger {trigger_name} does not exist in this namespace; create it, then re-create "
                       f"Job {job_name}.")
    spec = trigger.get("spec") or {}
    problem = first_refusal(spec)
    if problem is not None:
        return Refusal("Failed", None, "TriggerNotReady", f"Trigger {trigger_name} is not ready: {problem}")
    if not resume_armed(spec):
        return None
    if settings.sessions_dir is None:
        return Refusal("Refused", JobReason.SESSIONS_DIR_UNSET, "SessionsDirUnset",
                       SESSIONS_DIR_UNSET_MESSAGE.format(trigger=trigger_name))
    if gets_gh_login(job_spec, spec, settings) and not settings.allow_gh_source:
        return Refusal("Refused", JobReason.CONFIG_REFUSED, "ConfigRefused",
                       GH_SOURCE_MESSAGE.format(trigger=trigger_name))
    return None


def auth_source(job_spec: dict[str, Any], trigger_spec: dict[str, Any], settings: Settings) -> str:
    """The job's GitHub credential source: the Job's, else the Trigger's ``run.auth``, else the deployment's."""
    return str(job_spec.get("authSource") or (trigger_spec.get("run") or {}).get("auth")
               or settings.github_auth_source)


def gets_gh_login(job_spec: dict[str, Any], trigger_spec: dict[str, Any], settings: Settings) -> bool:
    """Would this job's Pod get the deployment's gh login (spec §10.2's full-scope credential)?

    ``pat`` and ``gh`` both hand the Pod the one Secret ``GITHUB_TOKEN_SECRET``, and what that Secret
    holds is the deployment's source: on a ``gh`` deployment, a Trigger or Job that says ``pat`` still
    gets the gh login, so it is refused the same way (the name of the source is not what counts).
    """
    source = auth_source(job_spec, trigger_spec, settings)
    return source == "gh" or (source == "pat" and settings.github_auth_source == "gh")


def needs_head_lookup(job_spec: dict[str, Any], trigger_spec: dict[str, Any]) -> bool:
    """Only a resume-armed pull-request job asks the forge for its head (§1.3); a payload fork never does."""
    return (resume_armed(trigger_spec) and job_spec.get("pullRequest") is not None
            and job_spec.get("fork") is not True)


def job_key(job_spec: dict[str, Any], trigger_spec: dict[str, Any], head: Head | None = None) -> KeyRef | None:
    """The session key of a Job (§1.2), or ``None``: resume off, a fork, a missing head, a manual run.

    ``head`` is what the forge API said of a pull request's head (:func:`needs_head_lookup`); it is the
    only source of a PR's branch when the operator has a GitHub client. Without one (``head`` is
    ``None``) the head comes from the Job's ``spec.resolved``, which only a cluster user can write.
    """
    return key_and_reason(job_spec, trigger_spec, head)[0]


def key_and_reason(job_spec: dict[str, Any], trigger_spec: dict[str, Any], head: Head | None = None
                   ) -> tuple[KeyRef | None, NoHead | None]:
    """:func:`job_key`, with the closed reason a pull-request job has no key (for the log)."""
    if not resume_armed(trigger_spec):
        return None, None
    forge, repo = job_spec.get("forge"), job_spec.get("repository")
    if not isinstance(forge, str) or not isinstance(repo, str):
        return None, None
    if job_spec.get("pullRequest") is not None:
        if job_spec.get("fork") is True:
            return None, NoHead.FORK_BY_PAYLOAD
        if head is None:
            resolved = job_spec.get("resolved")
            head = Head(resolved.get("headRef"), resolved.get("headRepository")) if isinstance(
                resolved, dict) else Head.failed(NoHead.NO_CLIENT)
        why = no_key_reason(repo, head)
        key = None if why is not None else pull_request_key(forge, repo, head.ref, head.repository)
        if key is None or not isinstance(head.ref, str):
            return None, why
        return KeyRef(key, forge, repo, head.ref), None
    number = job_spec.get("issue")
    key = issue_key(forge, repo, number)
    if key is None or not isinstance(number, int):
        return None, None
    return KeyRef(key, forge, repo, issue_branch(number)), None


def pod_env(job_name: str, job_spec: dict[str, Any], trigger_spec: dict[str, Any]) -> dict[str, str]:
    """The event and run facts a runner needs; the same with or without a session (none derive from the key)."""
    run = trigger_spec.get("run") or {}
    env = {
        "PI_JOB_NAME": job_name,
        "PI_TRIGGER": str(job_spec.get("trigger", "")),
        "PI_FORGE": str(job_spec.get("forge", "")),
        "PI_REPOSITORY": str(job_spec.get("repository", "")),
        "PI_JOB_SPEC": json.dumps({k: v for k, v in job_spec.items() if k != "resolved"}, sort_keys=True,
                                  separators=(",", ":")),
    }
    for name, value in (("PI_ISSUE", job_spec.get("issue")), ("PI_PULL_REQUEST", job_spec.get("pullRequest")),
                        ("PI_MODEL", run.get("model")), ("PI_VERSION", run.get("piVersion")),
                        ("PI_FLOW", run.get("flow"))):
        if value is not None:
            env[name] = str(value)
    return env


def pod_phase(pod: dict[str, Any] | None) -> str | None:
    """``Succeeded`` / ``Failed`` once the Pod has ended, else ``None``. A vanished Pod counts as failed."""
    if pod is None:
        return "Failed"
    phase = (pod.get("status") or {}).get("phase")
    return phase if phase in ("Succeeded", "Failed") else None


def termination_message(pod: dict[str, Any] | None) -> str | None:
    """The job container's termination message (the runner's report), if the Pod recorded one."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if status.get("name") == "pi" and terminated.get("message"):
            return str(terminated["message"])
    return None


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


def sessionkey_status(view: dict[str, Any], conditions: list[dict[str, Any]] | None,
                      last: dict[str, Any] | None = None) -> dict[str, Any]:
    """SessionKey status from ``store.inspect.inspect_key`` output plus the last job's facts."""
    stored = bool(view.get("directory")) and bool(view.get("bytes"))
    nxt = view.get("next") or "absent"
    conditions = set_condition(conditions, "Stored", stored, "TranscriptStored" if stored else "NoTranscript",
                               f"{view.get('bytes')} bytes stored." if stored else "No transcript is stored.",
                               None)
    assumed = " (judged with the pi version stamped on the key)" if view.get("assumedPiVersion") else ""
    conditions = set_condition(
        conditions, "Resumable", nxt == "resumed", "Resumable" if nxt == "resumed" else reason_to_camel(nxt),
        ("The next delivery would resume" + assumed + ".") if nxt == "resumed" else
        f"The next delivery would start cold: {nxt}{assumed}.", None)
    lock: dict[str, Any] = view.get("lock") or {}
    live = lock.get("state") == "live"
    conditions = set_condition(
        conditions, "Locked", live, "PromotionInProgress" if live else ("StaleLock" if lock else "Unlocked"),
        f"A promotion holds the lock ({lock.get('ageMs')} ms old)." if live else
        f"A stale lock ({lock.get('ageMs')} ms old) is left; the next promotion takes it over." if lock else
        "No promotion is running.", None)
    status: dict[str, Any] = {
        "conditions": conditions, "bytes": view.get("bytes"), "venue": view.get("venue"),
        "piVersion": view.get("piVersion"), "resumeChain": view.get("resumeChain") or 0,
        "context": view.get("context"), "next": nxt,
    }
    status.update(last or {})
    return status
