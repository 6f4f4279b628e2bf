"""The job flow's reach into the cluster: resource paths and the few writes every step shares.

One namespace, the project's own API client (``kubeapi.Api``). Status is written through the status
subresources only, as merge patches, and only when it changed: ``summarize`` computes a Job's patch and
``status_patch.write_status`` (the one patch helper of every kind) writes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pidispatch import metrics
from pidispatch.api.conditions import now_rfc3339
from pidispatch.api.crds import GROUP, VERSION
from pidispatch.api.views import JobView, SessionKeyView
from pidispatch.jobflow.status_patch import write_status
from pidispatch.jobflow.summarize import Change, summarize
from pidispatch.kubeapi import Api, name_segment

log = logging.getLogger("pidispatch.operator")
COMPONENT = "pi-dispatch-operator"


class Cluster:
    """Paths and shared writes for one namespace. ``clock`` gives RFC 3339 stamps (a test passes its own)."""

    def __init__(self, api: Api, namespace: str, clock: Callable[[], str] = now_rfc3339) -> None:
        self.api = api
        self.ns = namespace
        self.clock = clock

    def crd(self, plural: str, name: str | None = None, sub: str | None = None) -> str:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.ns}/{plural}"
        if name is not None:
            path += "/" + name_segment(name)
        return path + (f"/{sub}" if sub else "")

    def pods(self, name: str | None = None) -> str:
        path = f"/api/v1/namespaces/{self.ns}/pods"
        return path if name is None else f"{path}/{name_segment(name)}"

    def secrets(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/secrets"

    def job(self, name: str) -> JobView | None:
        """The Job as it is now (a GET), or ``None`` when there is none."""
        found = self.api.get_or_none(self.crd("jobs", name))
        return JobView.of(found) if found is not None else None

    def jobs(self) -> list[JobView]:
        return [JobView.of(body) for body in self.api.list(self.crd("jobs"))]

    def sessionkey(self, key: str) -> SessionKeyView | None:
        """The SessionKey of ``key`` as it is now (a GET), or ``None`` when there is none."""
        found = self.api.get_or_none(self.crd("sessionkeys", key))
        return SessionKeyView.of(found) if found is not None else None

    def record(self, job: JobView, change: Change, resource_version: str | None = None) -> JobView:
        """Write ``change`` to the Job's status if it changes anything; return the Job as it now is.

        With ``resource_version``, the write happens only if the Job is still that version (409 otherwise).
        """
        now = self.clock()
        written = write_status(self.api, self.crd("jobs", job.name, "status"), job,
                               lambda current: summarize(current, change, now),
                               conditional=resource_version is not None, version=resource_version)
        if written is None:
            return job
        if "phase" in written.patch:
            metrics.JOB_TRANSITIONS.labels(written.patch["phase"]).inc()
        return JobView.of(written.body)

    def event(self, job: JobView, type_: str, reason: str, message: str) -> None:
        """A Kubernetes Event on ``job``. Best effort: a failure is not the Job's."""
        stamp = self.clock()
        body = {
            "metadata": {"generateName": f"{job.name[:200]}.", "namespace": self.ns},
            "involvedObject": {"apiVersion": job.body.get("apiVersion", f"{GROUP}/{VERSION}"),
                               "kind": job.body.get("kind", "Job"), "name": job.name, "namespace": self.ns,
                               "uid": job.uid or None},
            "type": type_, "reason": reason, "message": message[:1024],
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self.api.create(f"/api/v1/namespaces/{self.ns}/events", body)
        except Exception as exc:  # an Event is a courtesy: losing one must not fail the step that wrote it
            log.warning("event %s on %s not written: %s: %s", reason, job.name, type(exc).__name__, exc)
