"""A Job, a Trigger and a SessionKey as the job flow reads them: frozen views, parsed once at the edge.

The kopf handlers and the job flow's GETs and LISTs build a view with ``JobView.of(body)`` (and the
like); every step after that reads typed fields (``job.name``, ``job.spec.repository``,
``trigger.spec.run.auth``) instead of walking the raw object with ``.get(...) or {}``.

* The spec is validated strictly, as the CRD's schema would (``models.parsed``). A spec the schema
  refuses (a Job or Trigger stored without the CRD's validation) is no exception here: the view keeps
  ``spec = None`` and the first problem as ``invalid``, and the admission turns it into the refusal it
  always was (``InvalidSpec``, ``TriggerNotReady``).
* The status is the operator's own writing, checked by the apiserver against the same schema; it is
  read leniently: a field that does not fit its model (an object stored before a field changed, a
  hand edit) reads as absent instead of failing the step.
* ``body`` is the object as it was read: what a write needs beyond the typed fields (the stored status a
  merge patch is computed against, the ``resourceVersion`` of a conditional write).

A Pod is read where it arrives into ``jobflow/podview.PodView`` (the handful of its fields the operator reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from pidispatch.api import serves
from pidispatch.api.models import (
    JobSpec,
    JobStatus,
    SessionKeySpec,
    SessionKeyStatus,
    TriggerSpec,
    TriggerStatus,
    parsed,
)
from pidispatch.api.trigger import Refusal, refusal_of, resume_requested, schedule_problem, schedule_refusal

M = TypeVar("M", bound=BaseModel)


def lenient(model: type[M], data: Any) -> M:
    """``data`` as ``model``, each top-level field that does not fit it dropped (read as absent)."""
    values = dict(data) if isinstance(data, Mapping) else {}
    while True:
        try:
            return model.model_validate(values)
        except ValidationError as exc:
            bad = {err["loc"][0] for err in exc.errors(include_url=False) if err["loc"]}
            if not bad & values.keys():
                return model()
            for key in bad:
                values.pop(str(key), None)


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class ObjectMeta:
    """The metadata every view carries. ``uid`` is ``""`` for an object that has none (never in a cluster)."""

    name: str
    uid: str = ""
    generation: int | None = None
    resource_version: str | None = None
    created: str = ""  # creationTimestamp (RFC 3339): a Job's place in the FIFO
    deletion: str | None = None  # deletionTimestamp
    labels: Mapping[str, str] = field(default_factory=dict)
    finalizers: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)  # the requests a SessionKey carries (retire, ...)

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> ObjectMeta:
        md = _mapping(body.get("metadata"))
        generation = md.get("generation")
        return cls(name=str(md.get("name") or ""), uid=str(md.get("uid") or ""),
                   generation=generation if isinstance(generation, int) else None,
                   resource_version=md.get("resourceVersion"), created=str(md.get("creationTimestamp") or ""),
                   deletion=md.get("deletionTimestamp") or None, labels=_mapping(md.get("labels")),
                   finalizers=tuple(md.get("finalizers") or ()),
                   annotations={str(k): str(v) for k, v in _mapping(md.get("annotations")).items()})


@dataclass(frozen=True)
class JobView:
    """A Job: ``spec`` is ``None`` when the schema refuses it (``invalid`` says how)."""

    meta: ObjectMeta
    spec: JobSpec | None
    invalid: str | None
    status: JobStatus
    body: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> JobView:
        spec, invalid = parsed(JobSpec, body.get("spec"))
        return cls(ObjectMeta.of(body), spec, invalid, lenient(JobStatus, body.get("status")), dict(body))

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def uid(self) -> str:
        return self.meta.uid

    @property
    def phase(self) -> str | None:
        return self.status.phase

    @property
    def stored_status(self) -> dict[str, Any]:
        """The status as stored: what a merge patch is computed against (``summarize``)."""
        return _mapping(self.body.get("status"))

    @property
    def trigger_name(self) -> str:
        """The Trigger the Job names, read from the raw spec so that an invalid Job's refusal can name it."""
        return str(_mapping(self.body.get("spec")).get("trigger", ""))

    def with_spec(self, spec: JobSpec) -> JobView:
        """This Job with ``spec`` in place of its own (what the start learned: a fork the forge API revealed)."""
        return JobView(self.meta, spec, None, self.status, self.body)


@dataclass(frozen=True)
class TriggerView:
    """A Trigger, and the one place its derived meanings are decided (docs/architecture.md#reasons-are-data): the
    operator, the receiver and doctor ask these, never the raw spec.

    ``refusal``: why it runs nothing (``api/trigger.py``: its first load-time conflict, else a schedule that cannot
    fire; ``jobflow/trigger.py`` adds a placement conflict), ``None`` when it can run jobs; then ``spec`` is never
    ``None``. ``requested``: ``run.resume`` is exactly ``true`` (refused or not); ``named``: the Trigger names the
    repositories it serves (``api/serves.py``)."""

    meta: ObjectMeta
    spec: TriggerSpec | None
    refusal: Refusal | None
    body: dict[str, Any] = field(repr=False, compare=False)
    requested: bool = False
    named: tuple[str, ...] = ()

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> TriggerView:
        raw = _mapping(body.get("spec"))
        spec, invalid = parsed(TriggerSpec, raw)
        refusal = refusal_of(raw, invalid) or schedule_refusal(raw)
        return cls(ObjectMeta.of(body), spec, refusal, dict(body), requested=resume_requested(raw),
                   named=serves.entries_of(raw.get("on")))

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def armed(self) -> bool:
        """Resume armed, the one definition: ``run.resume`` exactly ``true`` on a Trigger that names the repositories
        it serves; ``false``, absence, or no repository named all mean off. Refused or not: :attr:`resumes` is
        whether its jobs do resume."""
        return self.requested and serves.names_repositories(self.named)

    @property
    def resumes(self) -> bool:
        """Armed and not refused: its jobs get a key. What ``ResumeArmed=True`` says, what the admission keys on
        and what doctor counts."""
        return self.armed and self.refusal is None

    def serves(self, repository: str) -> bool:
        """Whether this Trigger serves ``repository`` (OWNER/NAME; ``api/serves.py``): nothing named serves all."""
        return serves.serves(self.named, repository)

    @property
    def stored_status(self) -> dict[str, Any]:
        return _mapping(self.body.get("status"))

    @property
    def status(self) -> TriggerStatus:
        """The status, read leniently as a Job's and a SessionKey's are (the cron loop reads its ``schedule``)."""
        return lenient(TriggerStatus, self.body.get("status"))

    @property
    def schedule_problem(self) -> str | None:
        """Why this Trigger's ``on.schedule`` cannot fire (``api/trigger.py``), or ``None``."""
        return schedule_problem(_mapping(self.body.get("spec")))


@dataclass(frozen=True)
class SessionKeyView:
    """A SessionKey (its name is the key)."""

    meta: ObjectMeta
    spec: SessionKeySpec | None
    status: SessionKeyStatus
    body: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> SessionKeyView:
        spec, _ = parsed(SessionKeySpec, body.get("spec"))
        return cls(ObjectMeta.of(body), spec, lenient(SessionKeyStatus, body.get("status")), dict(body))

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def stored_status(self) -> dict[str, Any]:
        """The status as stored: what the refresh compares its judgement with."""
        return _mapping(self.body.get("status"))
