"""The one writer of a Job's ``phase`` and conditions (flux's summarize, cert-manager's single writer).

Every step of the flow says what it found as one of the typed changes below; :func:`summarize` turns
a change into the status patch, from the Job's current status: the phase, the condition the change
owns (``Started``, ``Completed`` or ``Commented``) and the fields that go with it. Nothing else in the
operator sets a Job's phase or calls ``set_condition`` for a Job, so a reader finds every status a
Job can show in this file.

The patch holds only what differs from the current status (``status_patch.changes``, the one "changed?"
rule every kind's status shares), so a change that is already recorded costs no API write (:func:`summarize`
returns ``{}``); ``Cluster.record`` writes it through ``status_patch.write_status``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from pidispatch.api.conditions import set_condition
from pidispatch.api.models import JobCheckout, JobGateway, JobHandoff, JobOutputs, JobSession, JobWorkspace
from pidispatch.api.views import JobView
from pidispatch.jobflow.status_patch import changes

TERMINAL_PHASES = frozenset({"Succeeded", "Failed", "Refused"})
STARTED, COMPLETED, COMMENTED = "Started", "Completed", "Commented"


@dataclass(frozen=True)
class Queued:
    """Waiting for a slot longer than the grace (``QUEUED_AFTER_SECONDS``)."""

    since: str
    capacity: int


@dataclass(frozen=True)
class Refused:
    """Ended before its Pod ran: a deliberate refusal (phase ``Refused``) or a failure for good (``Failed``).

    ``reason`` (``status.reason``) is a JobReason for every refusal, ``None`` for a failure (the condition's reason
    says which).
    """

    phase: str
    reason: str | None
    condition_reason: str
    message: str


@dataclass(frozen=True)
class Retrying:
    """A start failed for a passing reason; the Job waits out its back-off in line."""

    message: str


@dataclass(frozen=True)
class Running:
    """Its Pod exists. ``session`` is the host verdict as the Job shows it (``None`` without a session)."""

    pod_name: str
    session: JobSession | None
    message: str
    checkout: JobCheckout | None = None  # the commit the workspace holds (None: no checkout)


@dataclass(frozen=True)
class Ended:
    """Its Pod ended (``outcome`` ``Succeeded`` or ``Failed``), promotion done, the record merged."""

    outcome: str
    session: JobSession | None
    tokens: dict[str, float] | None
    condition_reason: str
    message: str
    workspace: JobWorkspace | None = None  # where the job left its workspace (the runner's word)
    handoff: JobHandoff | None = None  # the handoff promoted with the transcript
    gateway: JobGateway | None = None  # what the gateway counted and refused (its tokens are ``tokens``)
    outputs: JobOutputs | None = None  # what the forge confirms the job pushed (``outputs.read_outputs``)


@dataclass(frozen=True)
class Commented:
    """The refusal comment: posted, found already posted, or why not."""

    ok: bool
    reason: str
    message: str


Change = Queued | Refused | Retrying | Running | Ended | Commented


def summarize(job: JobView, change: Change, now: str) -> dict[str, Any]:
    """The status patch (a JSON merge patch, the one dict a Job's status is turned into) that records ``change`` at
    ``now`` (RFC 3339): only the fields that differ from the Job's status as stored.

    Conditions carry the Job's ``generation`` as their ``observedGeneration``; ``lastTransitionTime`` moves
    only when a condition's status does.
    """
    status, generation = job.status, job.meta.generation
    stored = job.stored_status  # what the merge patch applies to
    conditions = stored.get("conditions")

    def since(phase: str, field: str) -> str:
        # A phase's timestamp is when the Job entered it: recording the same phase again keeps it.
        entered = getattr(status, field)
        return str(entered) if status.phase == phase and entered else now

    wanted: dict[str, Any]
    if isinstance(change, Queued):
        wanted = {"phase": "Queued", "queuedAt": change.since, "conditions": set_condition(
            conditions, STARTED, False, "WaitingForSlot",
            f"Waiting for one of {change.capacity} job slots (maxConcurrentJobs).", generation, now)}
    elif isinstance(change, Refused):
        wanted = {"phase": change.phase, "reason": change.reason, "completedAt": since(change.phase, "completedAt"),
                  "conditions": set_condition(conditions, STARTED, False, change.condition_reason, change.message,
                                              generation, now)}
    elif isinstance(change, Retrying):
        wanted = {"conditions": set_condition(conditions, STARTED, False, "StartRetrying", change.message,
                                              generation, now)}
    elif isinstance(change, Running):
        wanted = {"phase": "Running", "podName": change.pod_name, "startedAt": since("Running", "startedAt"),
                  "session": dumped(change.session),
                  **({"checkout": dumped(change.checkout)} if change.checkout is not None else {}),
                  "conditions": set_condition(conditions, STARTED, True, "PodCreated", change.message, generation,
                                                  now)}
    elif isinstance(change, Ended):
        wanted = {"phase": change.outcome, "completedAt": since(change.outcome, "completedAt"),
                  "session": dumped(change.session),
                  **({"workspace": dumped(change.workspace)} if change.workspace is not None else {}),
                  **({"handoff": dumped(change.handoff)} if change.handoff is not None else {}),
                  **({"gateway": dumped(change.gateway)} if change.gateway is not None else {}),
                  **({"outputs": dumped(change.outputs)} if change.outputs is not None else {}),
                  "tokens": change.tokens, "conditions": set_condition(
                      conditions, COMPLETED, change.outcome == "Succeeded", change.condition_reason, change.message,
                      generation, now)}
    else:
        wanted = {"conditions": set_condition(conditions, COMMENTED, change.ok, change.reason, change.message,
                                              generation, now)}
    patch = changes(stored, wanted)
    if patch and status.observedGeneration != generation:
        patch["observedGeneration"] = generation
    return patch


def dumped(model: BaseModel | None) -> dict[str, Any] | None:
    """A status part as the patch carries it: the fields the step set, nulls included (a null clears one)."""
    return None if model is None else model.model_dump(mode="json", exclude_unset=True)
