"""The API's models (``api/models.py``) are its one source: the CRD schemas come from them (``api/schema.py``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from pidispatch.api import crds, models
from pidispatch.api.models import NULLABLE, JobSpec, TriggerSpec, problem
from pidispatch.api.schema import structural

PARTS = [("triggers", models.TriggerSpec, models.TriggerStatus), ("jobs", models.JobSpec, models.JobStatus),
         ("sessionkeys", models.SessionKeySpec, models.SessionKeyStatus)]


def schema_of(crd: dict[str, Any], part: str) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][part]


@pytest.mark.parametrize(("plural", "spec", "status"), PARTS, ids=[p[0] for p in PARTS])
def test_each_crd_schema_is_its_models(plural: str, spec: type[BaseModel], status: type[BaseModel]) -> None:
    crd = crds.ALL[plural]()
    assert schema_of(crd, "spec") == {"type": "object", **structural(spec)}
    assert schema_of(crd, "status") == {"type": "object", **structural(status)}


def test_the_cel_rules_ride_on_the_trigger_spec() -> None:
    assert structural(TriggerSpec)["x-kubernetes-validations"] == crds.TRIGGER_RULES
    assert structural(JobSpec)["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"


class _Inner(BaseModel):
    """A docstring that is not the CRD's business."""

    n: int


class _Sample(BaseModel):
    optional: Annotated[str, Field(max_length=5)] | None = None
    nullable: Annotated[int | None, Field(json_schema_extra=NULLABLE)] = None
    fixed: Literal["only"]
    inner: Annotated[_Inner | None, Field(description="Said here.")] = None
    items: Annotated[list[_Inner], Field(max_length=2)] = []


def test_the_converter_speaks_structural_openapi() -> None:
    schema = structural(_Sample)
    assert schema["required"] == ["fixed"]
    props = schema["properties"]
    assert props["optional"] == {"type": "string", "maxLength": 5}, "optional: no null branch, no default"
    assert props["nullable"] == {"type": "integer", "nullable": True}
    assert props["fixed"] == {"type": "string", "enum": ["only"]}
    assert props["inner"] == {"type": "object", "description": "Said here.", "required": ["n"],
                              "properties": {"n": {"type": "integer"}}}, "inlined, the field's words only"
    assert props["items"]["items"]["properties"] == {"n": {"type": "integer"}}
    assert "$defs" not in schema and "title" not in str(schema)


@pytest.mark.parametrize(("spec", "named"), [
    ({"on": {"event": "issue_comment.created"}, "run": {"resume": "true"}}, "run.resume"),
    ({"on": {"event": "issue_comment.created"}, "run": {"replicas": 2.0}}, "run.replicas"),
    ({"on": {"event": "push"}, "run": {}}, "on.event"),
    ({"on": {"event": "cron"}}, "run"),
    ({"on": {"event": "issue_comment.created", "phrase": "x" * 201}, "run": {}}, "on.phrase"),
], ids=["a string for a boolean", "a float for an integer", "an unknown event", "no run", "a phrase too long"])
def test_validation_is_as_strict_as_the_apiserver(spec: dict[str, Any], named: str) -> None:
    found = problem(TriggerSpec, spec)
    assert found is not None and found.startswith(named + ":"), found


def test_a_valid_spec_with_fields_a_newer_version_adds_is_accepted() -> None:
    assert problem(TriggerSpec, {"on": {"event": "cron", "schedule": "* * * * *"}, "run": {"newField": 1}}) is None


def test_the_crd_schemas_are_structural_without_what_the_apiserver_refuses() -> None:
    """A CRD whose schema has propertyNames or patternProperties is refused whole by the apiserver
    ("patternProperties is not supported"): every install would fail. A dict's keys are checked by the model."""
    from pidispatch.api.crds import ALL
    from pidispatch.api.models import TriggerSpec, problem

    def walk(node: object, where: str) -> list[str]:
        if isinstance(node, dict):
            found = [f"{where}.{k}" for k in node if k in ("propertyNames", "patternProperties", "$ref", "$defs")]
            return found + [f for k, v in node.items() for f in walk(v, f"{where}.{k}")]
        if isinstance(node, list):
            return [f for i, v in enumerate(node) for f in walk(v, f"{where}[{i}]")]
        return []

    for name, build in ALL.items():
        assert walk(build(), name) == []
    on = {"event": "issue_comment.created"}
    assert problem(TriggerSpec, {"on": on, "run": {"nodeSelector": {"pool": "gpu"}}}) is None
    assert "not a label key" in str(problem(TriggerSpec, {"on": on, "run": {"nodeSelector": {"bad key!": "x"}}}))
