"""kopf registrations: each watch handler only queues its event in the operator's one queue
(``handlers/feed.py``), whose workers hand it to the job flow's :class:`Dispatcher`; a handler never does
work itself (docs/architecture.md#event-path).

The Jobs are fed by the operator's own watch (``handlers/jobwatch.py``), started when this replica leads
and stopped with it; kopf keeps the login, the Pod, SessionKey and Trigger watches, the start-up and
clean-up, and the liveness endpoint.

Watch-event handlers (not kopf's change-detecting ones) on purpose: the job flow's steps are
idempotent and keep their own journal, so kopf's progress annotations would only add API writes
per Job. Triggers are the exception only in spirit: they are few, and the handler still patches
status only when it changes.

With no change-detecting handler, kopf has no use for a diff base, yet by default it builds one for
every event it processes: a deep copy of the body (a whole Pod, for each of a job Pod's updates) to
diff against the last handled state. :class:`NoDiffBase` skips that (docs/benchmarks.md: about 0.5 ms
of CPU per job-Pod event, 0.15 ms per Job event; 40–45 ms of operator CPU per Job in a burst, was
48–50 ms), and refuses loudly if a change handler is ever added.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import kopf

from pidispatch.api.crds import GROUP, VERSION
from pidispatch.contract import JOB_LABEL
from pidispatch.handlers.feed import Body, Feed
from pidispatch.handlers.jobwatch import JobWatch
from pidispatch.handlers.leadership import Leadership
from pidispatch.jobflow.dispatcher import Dispatcher
from pidispatch.jobflow.retention import Retention


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's diff base for an operator whose handlers all react to watch events: none is kept.

    Each event's essence is empty and no last state is read, so kopf's change detection (which only
    change handlers and daemons use) costs nothing. A change handler needs a real diff base: ``store``
    refuses, so adding one without choosing a storage fails at its first event instead of treating
    every event as a creation.
    """

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        raise NotImplementedError("a change-detecting handler needs a diff base storage: see handlers/register.py")


def register(registry: kopf.OperatorRegistry, dispatcher: Dispatcher, retention: Retention | None = None,
             leadership: Leadership | None = None, jobs: JobWatch | None = None, feed: Feed | None = None) -> None:
    """Add the operator's handlers to ``registry``; ``retention``, the queue and the watch of the Jobs run
    beside the dispatcher.

    ``leadership``: the dispatcher, retention, the queue and the Jobs' watch start when this replica takes the
    Lease, and every kopf event is dropped until then (``handlers/leadership.py``). ``None``: they start with
    kopf (one process, tests). ``feed``: the queue, by default to the dispatcher; ``jobs``: the Jobs' watch, by
    default of the dispatcher's namespace, into the queue.
    """

    def acting() -> bool:
        return leadership is None or leadership.leading

    # Its workers start only once this replica leads (from ``start_acting``, before ``leading`` is set), so
    # they ask the fence alone as each event is taken: has the Lease been renewed within the renew deadline.
    if feed is None:
        feed = Feed(dispatcher, acting=lambda: leadership is None or leadership.holds())
    events = feed
    if jobs is None:
        jobs = JobWatch(dispatcher.api, dispatcher.cluster.crd("jobs"),
                        lambda event_type, body: events.event("Job", event_type, body))
    job_watch = jobs

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # The official client's loaders: in-cluster ServiceAccount in a Pod, KUBECONFIG elsewhere.
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING  # our own Events say what happened; kopf's would repeat it
        settings.execution.max_workers = 16
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.peering.mandatory = False
        settings.persistence.diffbase_storage = NoDiffBase()
        if leadership is None:
            start_acting()
        else:
            leadership.start(start_acting)

    def start_acting() -> None:
        dispatcher.start()
        if retention is not None:
            retention.start()
        events.start()
        job_watch.start()

    @kopf.on.cleanup(registry=registry)
    def cleanup(**_: Any) -> None:
        job_watch.stop()
        events.stop()
        if retention is not None:
            retention.stop()
        dispatcher.stop()
        if leadership is not None:
            leadership.stop()  # releases the Lease: the standby takes over at once

    @kopf.on.event("", "v1", "pods", labels={JOB_LABEL: kopf.PRESENT}, registry=registry)
    def pod_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        if acting():
            events.event("Pod", event.get("type"), _plain(body))

    @kopf.on.event(GROUP, VERSION, "sessionkeys", registry=registry)
    def sessionkey_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        if acting():
            events.event("SessionKey", event.get("type"), _plain(body))

    @kopf.on.event(GROUP, VERSION, "triggers", registry=registry)
    def trigger_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        if acting():
            events.event("Trigger", event.get("type"), _plain(body))


def _plain(body: kopf.Body) -> Body:
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": dict(body.metadata),
            "spec": dict(body.spec), "status": dict(body.status)}
