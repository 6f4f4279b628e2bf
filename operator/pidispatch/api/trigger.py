"""The Trigger's load-time refusals: the CRD's CEL rules repeated in the operator (defence in depth), and the
ones only the operator makes.

The CRD's CEL rules reject the resume conflicts at ``kubectl apply``; a CRD applied without CEL support, or an
object stored before the rules existed, still reaches the operator, which refuses it with the very
same messages (taken from :data:`pidispatch.api.vocabulary.TRIGGER_RULES`, the one source) and sets
``Ready=False``. So is a spec the CRD's schema would refuse (``models.TriggerSpec``).

The others are the operator's alone, each with a ``Ready`` reason of its own: a field
the Trigger's event never reads, a label or comment Trigger without the label or phrase it fires on, ``run.kind:
local`` (not implemented), and the ``run`` fields' own forms. They are not CEL rules: within ``v1alpha1`` a new
rule would leave a Trigger stored before it, which breaks it, unwritable, its status included
(``docs/crd-policy.md``). Such a Trigger stays stored, ``Ready=False``, saying why it runs nothing.

Each refusal is a :class:`Refusal`: the ``Ready`` reason and the message together, from the branch that decides it,
so nothing works a reason back out of a message's wording (docs/architecture.md#reasons-are-data).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pidispatch.api import cron
from pidispatch.api.models import TriggerSpec, problem
from pidispatch.api.vocabulary import TRIGGER_RULES
from pidispatch.contract import command_problem, flow_problem, run_secret_problem

RESUME_NOT_BOOLEAN = "run.resume must be true or false when present (leave it out to keep resume off)."

REPLICAS_ON_CRON = ("run.replicas is for Triggers of forge events: a cron Trigger's runs all work on its one branch "
                    "(pi/cron-<namespace>-<trigger>), so its replicas would push over each other. Remove "
                    "run.replicas, or start the attempts from an issue (a label or a comment Trigger).")
REPLICAS_ON_CRON_REASON = "ReplicasOnSchedule"
FLOW_REFUSAL_PREFIX = "run.flow: "
SECRETS_REFUSAL_PREFIX = "run.secrets: "
INVALID_SPEC_PREFIX = "its spec is not valid: "
INVALID_FLOW_REASON = "InvalidFlow"
COMMAND_REFUSAL_PREFIX = "run.command: "
INVALID_COMMAND_REASON = "InvalidCommand"
FLOW_AND_COMMAND = (f"{COMMAND_REFUSAL_PREFIX}a Trigger names one thing for its job to run, and this one sets both "
                    "run.flow (the repository's skill) and run.command (a command of the job image's extensions). "
                    "Keep one of the two; a second Trigger can run the other.")

# What each event-specific field of ``on`` is read for, by the receiver (``receiver/delivery.py``): the events whose
# deliveries it is matched against. On any other event it would be ignored, so a Trigger that sets it is refused.
LABEL_EVENTS = ("issues.labeled",)
PHRASE_EVENTS = ("issue_comment.created", "pull_request_review_comment.created", "pull_request_review.submitted")
EVENT_FIELDS = {"label": LABEL_EVENTS, "phrase": PHRASE_EVENTS, "authorAssociations": PHRASE_EVENTS}
NOT_FOR_EVENT = " is set but on.event is "
NOT_FOR_EVENT_REASON = "FieldNotForEvent"
# The field without which the receiver matches no delivery of the event: such a Trigger could never fire.
NEVER_FIRES = {
    "issues.labeled": ("label", "LabelMissing", "on.label is not set: an issues.labeled Trigger fires when an issue "
                       "gets the label it names, so this one can never fire. Name the label (on.label: pi)."),
    **{event: ("phrase", "PhraseMissing", f"on.phrase is not set: a Trigger of {event} fires on a comment that "
               "mentions its phrase, so this one can never fire (the receiver matches no comment to a Trigger without "
               "one, or every comment would start a job). Name the phrase (on.phrase: '@pi').")
       for event in ("issue_comment.created", "pull_request_review_comment.created")},
}
LOCAL_KIND = ("run.kind: local is not implemented: every job pi-dispatch runs is a forge job, with a checkout of its "
              "repository, so this Trigger's jobs would run as forge jobs while it says local. Remove run.kind "
              "(forge is what runs).")
LOCAL_KIND_REASON = "FieldNotImplemented"
RESUME_CONFLICT_REASON = "ResumeConflict"  # the store contract's resume refusals (docs/store-contract.md#refusals)
INVALID_SPEC_REASON = "InvalidSpec"
INVALID_SECRET_REASON = "InvalidSecretName"
INVALID_SCHEDULE_REASON = "InvalidSchedule"


@dataclass(frozen=True)
class Refusal:
    """Why a Trigger runs nothing: its ``Ready`` condition's ``reason`` and ``message``, decided together."""

    reason: str
    message: str


def resume_requested(spec: Mapping[str, Any]) -> bool:
    """``run.resume`` is exactly boolean ``true`` (``false``, absence, anything else: not asked for). What the CRD's
    CEL rules read, and ``TriggerView.requested``; whether resume is *armed* is ``TriggerView.armed``'s alone."""
    run = spec.get("run")
    return isinstance(run, Mapping) and run.get("resume") is True


def first_refusal(spec: dict[str, Any]) -> Refusal | None:
    """The first conflict in the documented order (docs/store-contract.md#trigger-admission), or ``None`` when
    loadable. Load-time only: a schedule that cannot fire is :func:`schedule_refusal`'s."""
    return refusal_of(spec, problem(TriggerSpec, spec))


def refusal_of(spec: dict[str, Any], invalid: str | None) -> Refusal | None:
    """:func:`first_refusal` of a spec already validated against ``TriggerSpec`` (``invalid``: the first way it
    breaks it, ``None`` when it does not), so that a view parses its Trigger once (``api/views.py``)."""
    run = spec.get("run") or {}
    if "resume" in run and run["resume"] is not None and not isinstance(run["resume"], bool):
        return Refusal(RESUME_CONFLICT_REASON, RESUME_NOT_BOOLEAN)
    if invalid is not None:  # what the CRD's schema refuses, for a Trigger stored without it
        return Refusal(INVALID_SPEC_REASON, f"{INVALID_SPEC_PREFIX}{invalid}.")
    if resume_requested(spec):  # asked for, whatever it names: the CRD's CEL rules read run.resume alone
        if "command" in run:
            return Refusal(RESUME_CONFLICT_REASON, TRIGGER_RULES[0]["message"])
        if run.get("kind") == "local":  # a cron Trigger's forge jobs resume (jobflow/cron.py)
            return Refusal(RESUME_CONFLICT_REASON, TRIGGER_RULES[1]["message"])
        if "replicas" in run:
            return Refusal(RESUME_CONFLICT_REASON, TRIGGER_RULES[2]["message"])
        if run.get("secrets"):
            return Refusal(RESUME_CONFLICT_REASON, TRIGGER_RULES[3]["message"])
    on = spec.get("on") or {}
    why = on_problem(on)
    if why is not None:
        return why
    if run.get("kind") == "local":
        return Refusal(LOCAL_KIND_REASON, LOCAL_KIND)
    if run.get("replicas") is not None and on.get("event") == "cron":
        return Refusal(REPLICAS_ON_CRON_REASON, REPLICAS_ON_CRON)
    if run.get("flow") is not None and run.get("command") is not None:
        return Refusal(INVALID_COMMAND_REASON, FLOW_AND_COMMAND)
    command = run.get("command")
    if isinstance(command, str) and command_problem(command) is not None:
        return Refusal(INVALID_COMMAND_REASON, f"{COMMAND_REFUSAL_PREFIX}{command_problem(command)}. It is the job's "
                                               "whole prompt, a command a pi extension of the job image registers.")
    flow = run.get("flow")
    if isinstance(flow, str) and flow_problem(flow) is not None:
        return Refusal(INVALID_FLOW_REASON, f"{FLOW_REFUSAL_PREFIX}{flow_problem(flow)}. It names the repository's "
                                            ".pi/skills/<flow> the job runs.")
    for secret in run.get("secrets") or ():
        why_not = run_secret_problem(secret)
        if why_not is not None:
            return Refusal(INVALID_SECRET_REASON, f"{SECRETS_REFUSAL_PREFIX}{why_not}. It names a Secret of the "
                                                  "Trigger's namespace, mounted into the job.")
    return None


def on_problem(on: dict[str, Any]) -> Refusal | None:
    """Why ``on`` cannot be what the Trigger says: a field its event never reads (the receiver would ignore it), or
    the field without which the receiver matches no delivery of its event (the Trigger would never fire)."""
    event = on.get("event")
    for name, events in EVENT_FIELDS.items():
        if on.get(name) is not None and event not in events:
            return Refusal(NOT_FOR_EVENT_REASON, f"on.{name}{NOT_FOR_EVENT}{event!r}: only a Trigger of "
                                                 f"{', '.join(events)} reads it, so here it would be ignored. Remove "
                                                 f"on.{name}, or set on.event to one of those.")
    required = NEVER_FIRES.get(str(event))
    if required is not None and not on.get(required[0]):
        return Refusal(required[1], required[2])
    return None


CRON_EXAMPLE = ("five fields: minute hour day-of-month month day-of-week, e.g. '0 6 * * 1-5' (in UTC, or in "
                "on.timeZone)")
INVALID_TIME_ZONE_REASON = "InvalidTimeZone"
CRON_ONLY = ("schedule", "timeZone", "startingDeadlineSeconds")  # what only a cron Trigger reads


def schedule_problem(spec: dict[str, Any]) -> str | None:
    """Why a cron Trigger cannot fire (no schedule, an invalid one, an unknown time zone, no repository), or a
    cron field on a Trigger that is not cron (it would never be read); ``None`` when the schedule is fine or there
    is none to read. :func:`schedule_refusal`'s message."""
    found = _schedule_refusal(spec)
    return found.message if found is not None else None


def schedule_refusal(spec: dict[str, Any]) -> Refusal | None:
    """:func:`schedule_problem` as the refusal it is (``InvalidTimeZone`` for ``on.timeZone``, ``InvalidSchedule``
    for the rest): a Trigger whose schedule cannot fire is not Ready, and its Jobs are refused as those of any
    Trigger that is not."""
    return _schedule_refusal(spec)


def _schedule_refusal(spec: dict[str, Any]) -> Refusal | None:
    """Checked at load (``jobflow/trigger.py``: ``Ready=False``), not by the CRD: the CRD's schema cannot parse
    cron or read the zone database."""
    on = spec.get("on") or {}
    text = on.get("schedule")
    if on.get("event") != "cron":
        for name in CRON_ONLY:
            if on.get(name) is not None:
                return Refusal(INVALID_TIME_ZONE_REASON if name == "timeZone" else INVALID_SCHEDULE_REASON,
                               f"on.{name} is set but on.event is {on.get('event')!r}: only a cron Trigger reads "
                               f"it. Set on.event: cron, or remove on.{name}.")
        return None
    zone = on.get("timeZone")
    if zone is not None:
        why = cron.zone_problem(zone) if isinstance(zone, str) else "it is not a string"
        if why is not None:
            return Refusal(INVALID_TIME_ZONE_REASON, f"on.timeZone {zone!r} is not a time zone ({why}): name one "
                                                     "of the IANA database, as a CronJob's spec.timeZone, or leave "
                                                     "it out for UTC.")
    if not isinstance(text, str) or not text.strip():
        return Refusal(INVALID_SCHEDULE_REASON, f"a cron Trigger fires on on.schedule, which is not set: add one "
                                                f"({CRON_EXAMPLE}).")
    why = cron.problem(text, zone)
    if why is not None:
        return Refusal(INVALID_SCHEDULE_REASON, f"on.schedule {text!r} is not valid cron ({why}): write "
                                                f"{CRON_EXAMPLE}.")
    if not on.get("repository"):
        return Refusal(INVALID_SCHEDULE_REASON, "a cron Trigger's jobs run on one repository, and on.repository is "
                                                "not set: name it (owner/name).")
    return None
