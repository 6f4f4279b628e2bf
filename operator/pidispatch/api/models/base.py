"""What every model of the API shares: the model base, the closed lists as Literal types, the schema markers
(:data:`NULLABLE`, ``format``s), ``metav1.Condition``, and :func:`parsed` / :func:`problem`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pidispatch.api.vocabulary import (
    AUTH_SOURCES,
    AUTHOR_ASSOCIATIONS,
    JOB_FORGES,
    JOB_PHASES,
    SESSIONKEY_FORGES,
    TRIGGER_EVENTS,
)
from pidispatch.record import SESSION_REASONS, JobReason

NULLABLE: dict[str, Any] = {"nullable": True}
DATE_TIME: dict[str, Any] = {"format": "date-time"}
INT64: dict[str, Any] = {"format": "int64"}


def one_of(values: tuple[str, ...] | list[str]) -> Any:
    return Literal.__getitem__(tuple(values))  # a Literal built from the vocabulary's tuple


# The closed lists as Literal types, built from the vocabulary's tuples (one source). mypy cannot follow
# a Literal built at run time, so it reads them as the strings they are.
if TYPE_CHECKING:
    TriggerEvent: TypeAlias = str
    AuthorAssociation: TypeAlias = str
    AuthSource: TypeAlias = str
    JobForge: TypeAlias = str
    JobPhase: TypeAlias = str
    JobReasonValue: TypeAlias = str
    SessionKeyForge: TypeAlias = str
    SessionReasonValue: TypeAlias = str
else:
    TriggerEvent = one_of(TRIGGER_EVENTS)
    AuthorAssociation = one_of(AUTHOR_ASSOCIATIONS)
    AuthSource = one_of(AUTH_SOURCES)
    JobForge = one_of(JOB_FORGES)
    JobPhase = one_of(JOB_PHASES)
    JobReasonValue = one_of([r.value for r in JobReason])
    SessionKeyForge = one_of(SESSIONKEY_FORGES)
    SessionReasonValue = one_of(SESSION_REASONS)


class ApiModel(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


# ---- metav1.Condition -------------------------------------------------------------------------------

CONDITION_TYPE = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(ApiModel):
    """``metav1.Condition`` as the Kubernetes API conventions define it."""

    type: Annotated[str, Field(max_length=316, pattern=CONDITION_TYPE)]
    status: Literal["True", "False", "Unknown"]
    observedGeneration: Annotated[int | None, Field(ge=0, json_schema_extra=INT64)] = None
    lastTransitionTime: Annotated[str, Field(json_schema_extra=DATE_TIME)]
    reason: Annotated[str, Field(max_length=1024, min_length=1, pattern=CONDITION_REASON)]
    message: Annotated[str, Field(max_length=32768)]


Conditions = Annotated[list[Condition], Field(max_length=16, json_schema_extra={
    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})]
SessionReason = Annotated[SessionReasonValue | None, Field(json_schema_extra=NULLABLE)]


M = TypeVar("M", bound=BaseModel)


def parsed(model: type[M], data: Any) -> tuple[M | None, str | None]:
    """``data`` as ``model`` (strictly: ``"true"`` is not a boolean, as for the apiserver), or ``None`` and
    the first way it breaks the model, as one line naming the field."""
    try:
        return model.model_validate(data, strict=True), None
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "spec"
        return None, f"{where}: {first['msg']}"


def problem(model: type[BaseModel], data: Any) -> str | None:
    """The first way ``data`` breaks ``model`` (:func:`parsed`); ``None`` when it is valid."""
    return parsed(model, data)[1]
