"""A job Pod as the job flow reads it: the handful of fields it decides on, read once at the edge
(docs/architecture.md#pod).

The Kubernetes API hands a Pod as a dict; :meth:`PodView.of` reads it where it arrives (the watch, a GET, the
create's answer) and every step after takes the view. A vanished Pod is ``None``, not an empty view: the
steps tell "gone" from "not ended yet" (:func:`pod_phase`).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pidispatch.contract import CONTAINER, ENV_CHECKOUT, JOB_LABEL


@dataclass(frozen=True)
class Waiting:
    """A container's ``waiting`` state, or a ``PodScheduled=False`` condition: its reason and message as given."""

    reason: str | None
    message: str | None


@dataclass(frozen=True)
class PodView:
    """The fields of a job Pod the operator reads, typed.

    ``owner_uid``: the controlling owner's uid (whatever its kind); ``owner_name``: the controlling Job's name.
    ``message``: the job container's termination message (the runner's report). ``oom_limit``: the job
    container's memory limit when the kernel killed it for going past it. ``finished_at``: when the Pod's last
    container finished. ``waiting``: the containers' non-empty waiting states, in order; ``unscheduled``: the
    first ``PodScheduled=False`` condition. ``checkout``: the job container's ``PI_CHECKOUT`` values, in order.
    """

    name: str
    phase: str | None = None
    reason: str | None = None
    created: float | None = None
    owner_uid: str | None = None
    owner_name: str | None = None
    job_label: str | None = None
    active_deadline_seconds: int | None = None
    message: str | None = None
    oom_limit: str | None = None
    finished_at: float | None = None
    waiting: tuple[Waiting, ...] = ()
    unscheduled: Waiting | None = None
    checkout: tuple[str, ...] = ()

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodView:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        controllers = [ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")]
        containers = {c.get("name"): c for c in spec.get("containers") or []}
        statuses = status.get("containerStatuses") or []
        ours = [(s.get("state") or {}).get("terminated") or {} for s in statuses if s.get("name") == CONTAINER]
        message = next((str(t["message"]) for t in ours if t.get("message")), None)
        oom_limit = None
        if any(t.get("reason") == "OOMKilled" for t in ours):
            limits = ((containers.get(CONTAINER) or {}).get("resources") or {}).get("limits") or {}
            oom_limit = str(limits.get("memory") or "the node's memory")
        waiting = tuple(Waiting(_str(w.get("reason")), _str(w.get("message")))
                        for w in ((s.get("state") or {}).get("waiting") or {} for s in statuses) if w)
        unscheduled = next((Waiting(_str(c.get("reason")), _str(c.get("message")))
                            for c in status.get("conditions") or []
                            if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
        return cls(
            name=str(meta.get("name") or ""),
            phase=_str(status.get("phase")),
            reason=_str(status.get("reason")),
            created=_epoch(meta.get("creationTimestamp")),
            owner_uid=cls.owner_uid_of(pod),
            owner_name=next((ref.get("name") for ref in controllers if ref.get("kind") == "Job"), None),
            job_label=_str((meta.get("labels") or {}).get(JOB_LABEL)),
            active_deadline_seconds=spec.get("activeDeadlineSeconds"),
            message=message,
            oom_limit=oom_limit,
            finished_at=_finished_at(statuses),
            waiting=waiting,
            unscheduled=unscheduled,
            checkout=_checkout_env(spec.get("containers") or []),
        )

    @staticmethod
    def owner_uid_of(pod: Mapping[str, Any]) -> str | None:
        """:attr:`owner_uid` of a Pod as the API sent it, without reading the rest: retention matches every job
        Pod against every ended Job on each pass, and a whole view per pair was a quarter of the operator's CPU
        in a 500-Job burst (docs/benchmarks.md#issue-41-one-event-path-measured-side-by-side-with-main)."""
        refs = (pod.get("metadata") or {}).get("ownerReferences") or []
        return next((ref.get("uid") for ref in refs if ref.get("controller")), None)

    @property
    def job(self) -> str | None:
        """The Job's name: from the owner reference (the label holds a short form when the name is long)."""
        return self.owner_name or self.job_label

    @property
    def deadline_exceeded(self) -> bool:
        """The kubelet stopped the Pod at its ``activeDeadlineSeconds`` (the job's run timeout)."""
        return self.reason == "DeadlineExceeded"

    def never_started(self, now: float, timeout_seconds: int) -> str | None:
        """Why a Pod that is still not running ``timeout_seconds`` after its creation has not started, or ``None``.

        The Pod's own words: a container's waiting reason and message (``ImagePullBackOff``,
        ``CreateContainerConfigError`` for a missing Secret or ConfigMap, ...), else why it is not
        scheduled, else its phase. A Pod whose container ran, or that ended, has started.
        """
        if self.phase not in (None, "Pending"):
            return None
        if self.created is None or now - self.created < timeout_seconds:
            return None
        for waiting in self.waiting:
            if waiting.reason and waiting.reason != "ContainerCreating":
                return f"{waiting.reason}: {waiting.message or 'no message'}"
        if self.unscheduled is not None:
            return f"{self.unscheduled.reason or 'Unschedulable'}: {self.unscheduled.message or 'no message'}"
        for waiting in self.waiting:
            return f"{waiting.reason}: {waiting.message or 'no message'}"
        return "Pending: the Pod was not scheduled or started"


def pod_phase(pod: PodView | None) -> str | None:
    """``Succeeded`` / ``Failed`` once the Pod has ended, else ``None``. A vanished Pod counts as failed."""
    if pod is None:
        return "Failed"
    return pod.phase if pod.phase in ("Succeeded", "Failed") else None


def _str(value: object) -> str | None:
    return str(value) if value is not None else None


def _epoch(stamp: Any) -> float | None:
    """``stamp`` (``%Y-%m-%dT%H:%M:%SZ``, as the apiserver writes it) in seconds since the epoch, else ``None``.

    ``datetime.fromisoformat`` first, a tenth of ``time.strptime``'s cost (a view is read per Pod event and per
    Pod in each retention pass); what it does not take in that exact shape (a leap second, one-digit fields)
    goes to ``strptime``, so the answer is ``strptime``'s in every case."""
    text = str(stamp)
    if len(text) == 20 and text[10] == "T" and text[19] == "Z":
        try:
            return datetime.fromisoformat(text[:19]).replace(tzinfo=UTC).timestamp()
        except ValueError:
            pass
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _finished_at(statuses: list[Any]) -> float | None:
    """When the Pod's last container finished (``None``: not known)."""
    stamps = []
    for status in statuses:
        stamp = ((status.get("state") or {}).get("terminated") or {}).get("finishedAt")
        try:
            stamps.append(datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp())
        except ValueError:
            continue
    return max(stamps) if stamps else None


def _checkout_env(containers: list[Any]) -> tuple[str, ...]:
    """The job container's ``PI_CHECKOUT`` values set as strings (one, as the operator writes its Pods)."""
    return tuple(str(env["value"]) for each in containers if each.get("name") == CONTAINER
                 for env in each.get("env") or []
                 if env.get("name") == ENV_CHECKOUT and isinstance(env.get("value"), str))
