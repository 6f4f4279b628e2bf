"""kopf registrations: each handler forwards one watch event to the job flow's :class:`Dispatcher`.

Watch-event handlers (not kopf's change-detecting ones) on purpose: the job flow's steps are
idempotent and keep their own journal, so kopf's progress annotations would only add API writes
per Job. Triggers are the exception only in spirit: they are few, and the handler still patches
status only when it changes.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from pidispatch.api.crds import GROUP, VERSION
from pidispatch.contract import JOB_LABEL
from pidispatch.jobflow.dispatcher import Dispatcher
from pidispatch.jobflow.retention import Retention


def register(registry: kopf.OperatorRegistry, dispatcher: Dispatcher, retention: Retention | None = None) -> None:
    """Add the operator's handlers to ``registry``; ``retention`` runs beside the dispatcher."""

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
        dispatcher.start()
        if retention is not None:
            retention.start()

    @kopf.on.cleanup(registry=registry)
    def cleanup(**_: Any) -> None:
        if retention is not None:
            retention.stop()
        dispatcher.stop()

    @kopf.on.event(GROUP, VERSION, "jobs", registry=registry)
    def job_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        dispatcher.on_job(event.get("type"), _plain(body))

    @kopf.on.event("", "v1", "pods", labels={JOB_LABEL: kopf.PRESENT}, registry=registry)
    def pod_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        if event.get("type") != "DELETED":
            dispatcher.on_pod(_plain(body))

    @kopf.on.event(GROUP, VERSION, "sessionkeys", registry=registry)
    def sessionkey_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        dispatcher.on_sessionkey(event.get("type"), _plain(body))

    @kopf.on.event(GROUP, VERSION, "triggers", registry=registry)
    def trigger_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        if event.get("type") == "DELETED":
            dispatcher.on_trigger_deleted(body.metadata.name)
        else:
            dispatcher.on_trigger(_plain(body))


def _plain(body: kopf.Body) -> dict[str, Any]:
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": dict(body.metadata),
            "spec": dict(body.spec), "status": dict(body.status)}
