"""One event, whoever read it, to its Jobs (or its retirement): the path a webhook delivery and a polled event share.

The webhook shell (``app.py``) verifies a delivery, then calls :func:`intake` with the event's name, its payload,
the delivery id and the digest that names its Jobs; the poller (``receiver/poll/``) builds the same payload from
the forge's REST objects and calls the same function. Every decision (the event's facts, bots and the jobs' own
logins, the repositories served, the Triggers matched, the Jobs planned, a close's retirement) is made here and
in the pure core below it (``delivery.py``, ``closed.py``), so the two intakes cannot drift: what differs is only
how the event arrived (docs/triggers.md#polling-instead-of-a-webhook).

The answer is an :class:`Outcome`; the webhook shell turns it into an HTTP answer, the poller into a log line
and a cursor that moves on or does not.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from pidispatch.receiver import delivery as core
from pidispatch.receiver.closed import Closed, retirement_problem
from pidispatch.receiver.cluster import Cluster, ClusterUnavailable, JobRefused
from pidispatch.receiver.payload import Ignored, Malformed


class Kind(enum.Enum):
    """What became of one event."""

    MALFORMED = "malformed"  # the payload lacks what its event promises: nothing created, for good
    IGNORED = "ignored"  # no Trigger could or does match it (``why``)
    RETIRED = "retired"  # a close: the key's SessionKey annotated (``key``, ``reason``)
    CREATED = "created"  # Jobs created (``jobs``), perhaps some already there (``duplicates``)
    DUPLICATE = "duplicate"  # every Job already there: a redelivery or a replay
    REFUSED = "refused"  # a Job the API server refuses for good (``refused``: name → why); the others created
    UNAVAILABLE = "unavailable"  # the API server could not be reached: try the event again (``why``)


@dataclass(frozen=True)
class Outcome:
    """What :func:`intake` did with one event."""

    kind: Kind
    why: str = ""
    jobs: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    key: str | None = None
    reason: str | None = None
    # IGNORED: the answer lists the (empty) Jobs, as "no Trigger matches" does; UNAVAILABLE: it came among the
    # creates, so the answer lists what was created before it.
    listed: bool = False

    @property
    def done(self) -> bool:
        """Whether the event is handled for good (a poller's cursor may move past it): all but UNAVAILABLE."""
        return self.kind is not Kind.UNAVAILABLE


async def intake(cluster: Cluster, event_name: str, payload: Any, delivery: str, digest: str, *,
                 auth_source: str | None, ignore_logins: Collection[str]) -> Outcome:
    """``payload`` of ``event_name`` (one of ``core.HANDLED``) → its Jobs, named for ``digest``, or its retirement.

    ``ignore_logins`` casefolded. Jobs are created in Trigger-name order; the API server's 409 (a Job of that
    name exists) is a duplicate, so an event taken in twice creates nothing the second time.
    """
    try:
        event = core.parse_delivery(event_name, payload)
    except Malformed as exc:
        return Outcome(Kind.MALFORMED, f"not a {event_name} payload: {exc}")
    if isinstance(event, Ignored):
        return Outcome(Kind.IGNORED, event.why)
    if isinstance(event, Closed):
        return await _retire(cluster, event)
    ignored = core.sender_problem(event, ignore_logins)
    if ignored is not None:
        return Outcome(Kind.IGNORED, ignored.why)
    try:
        triggers = await cluster.triggers()
    except ClusterUnavailable as exc:
        return Outcome(Kind.UNAVAILABLE, str(exc))
    ignored = core.unserved(triggers, event)
    if ignored is not None:
        return Outcome(Kind.IGNORED, ignored.why)
    planned = core.plan_jobs(triggers, event, delivery, auth_source, digest)
    if not planned:
        return Outcome(Kind.IGNORED, f"no Trigger matches this {event.trigger_event} delivery", listed=True)
    created: list[str] = []
    duplicates: list[str] = []
    refused: dict[str, str] = {}  # name → why, for each Job that can never be created
    for job in planned:
        name = job.name
        if job.body is None:
            refused[name] = f"Job {name} would be refused by the API server: {job.problem}"
            continue
        try:
            fresh = await cluster.create_job(job.body)
        except JobRefused as exc:
            refused[name] = str(exc)
            continue
        except ClusterUnavailable as exc:
            return Outcome(Kind.UNAVAILABLE, str(exc), created, duplicates, listed=True)
        (created if fresh else duplicates).append(name)
    if refused:
        return Outcome(Kind.REFUSED, "; ".join(refused.values()), created, duplicates, refused)
    return Outcome(Kind.CREATED if created else Kind.DUPLICATE, "", created, duplicates)


async def _retire(cluster: Cluster, close: Closed) -> Outcome:
    """A closed pull request or issue: no Job; the key's SessionKey is annotated for the operator to retire.
    No SessionKey (no conversation was ever kept on that branch) is nothing to do; a close the Triggers do
    not trust is ignored."""
    try:
        ignored = retirement_problem(await cluster.triggers(), close)
        if ignored is not None:
            return Outcome(Kind.IGNORED, ignored.why)
        asked = await cluster.retire(close.key, close.reason, close.pull_request)
    except ClusterUnavailable as exc:
        return Outcome(Kind.UNAVAILABLE, str(exc))
    if not asked:
        return Outcome(Kind.IGNORED, "no conversation is stored for this branch", key=close.key)
    return Outcome(Kind.RETIRED, key=close.key, reason=close.reason)
