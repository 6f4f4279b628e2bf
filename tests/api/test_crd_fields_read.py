"""Every field of the CRDs is handled by some code: a spec field read, a status field written
(``testkit/fieldreaders.py`` says how a field is looked for, and why a name alone is not enough).

The walk itself is tested on crafted schemas: it must report a field only declared, a field of one resource handled
only for another of the same name, and a common word in unrelated code; and on the real code with one writer taken
out (SessionKey ``status.observedGeneration``, declared and never written until it was found this way).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from pidispatch.api import models
from pidispatch.api.models.base import ApiModel
from pidispatch.api.schema import structural
from testkit.fieldreaders import FieldPath, Readers, field_paths, unread

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "operator" / "pidispatch"
DECLARATIONS = OPERATOR / "api" / "models"  # declaring a field is not handling it
ROOTS = {"Trigger": (models.TriggerSpec, models.TriggerStatus, "triggers"),
         "Job": (models.JobSpec, models.JobStatus, "jobs"),
         "SessionKey": (models.SessionKeySpec, models.SessionKeyStatus, "sessionkeys")}

# Fields read or written only by something other than the operator's Python, each with what reads it. An entry
# must name a field of the CRDs that the walk finds no code for (a stale entry fails): none today. The chart's
# templates and kubectl's printer columns read no field the operator does not also handle.
NOT_PYTHON: dict[str, str] = {}


def operator_sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(OPERATOR.rglob("*.py"))
            if DECLARATIONS not in p.parents}


def crd_paths() -> list[FieldPath]:
    paths: list[FieldPath] = []
    for kind, (spec, status, plural) in ROOTS.items():
        crd = yaml.safe_load((ROOT / "crds" / f"pi-dispatch.dev_{plural}.yaml").read_text())
        assert crd["spec"]["names"]["kind"] == kind
        paths += field_paths(crd, spec, status)
    return paths


@pytest.fixture(scope="module")
def readers() -> Readers:
    return Readers(ROOTS, operator_sources())


def test_every_crd_field_is_handled_by_the_operators_code(readers: Readers) -> None:
    paths = crd_paths()
    assert len(paths) > 150, "the walk reaches every field (properties, list items, map values)"
    missing = [shown for shown in unread(paths, readers) if shown not in NOT_PYTHON]
    assert missing == [], ("declared in the CRD, handled by no code: make the operator act on it (or write it), or "
                           f"remove it as docs/crd-policy.md allows: {missing}")


def test_the_allowlist_names_only_crd_fields_no_python_handles(readers: Readers) -> None:
    paths = {p.shown: p for p in crd_paths()}
    for shown, reader in NOT_PYTHON.items():
        assert shown in paths, f"{shown} is not a field of the CRDs"
        assert reader.strip(), f"{shown}: say what reads it"
        assert not readers.evidence(paths[shown].model, paths[shown].field), \
            f"{shown} is handled by Python: drop it from the allowlist"


def test_the_walk_reports_the_sessionkeys_observed_generation_when_its_writer_is_taken_out() -> None:
    """The reviewer's find: SessionKey ``status.observedGeneration`` was in the CRD and never written, while the
    Trigger's and the Job's were. Taking its writer out of the real code brings the report back."""
    sources = operator_sources()
    path = "operator/pidispatch/jobflow/summarize_sessionkey.py"
    line = '            "observedGeneration": judged.generation,'
    assert line in sources[path]
    sources[path] = sources[path].replace(line, "")
    assert unread(crd_paths(), Readers(ROOTS, sources)) == ["SessionKey.status.observedGeneration"]


# ---- the walk on crafted schemas --------------------------------------------------------------------------------

class Run(ApiModel):
    kind: str | None = None
    image: str | None = None


class CraftedSpec(ApiModel):
    run: Run | None = None
    label: str | None = None
    declared: str | None = None


class CraftedStatus(ApiModel):
    observedGeneration: int | None = None
    bounds: int | None = None


class OtherSpec(ApiModel):
    target: str | None = None


class OtherStatus(ApiModel):
    observedGeneration: int | None = None
    venue: str | None = None


CRAFTED = {"Crafted": (CraftedSpec, CraftedStatus, "crafteds"), "Other": (OtherSpec, OtherStatus, "others")}


def crd_of(kind: str, spec: type[BaseModel], status: type[BaseModel]) -> dict:
    """A CRD as ``api/crds.py`` writes one, around the models' generated schemas."""
    return {"spec": {"names": {"kind": kind}, "versions": [{"schema": {"openAPIV3Schema": {"properties": {
        "spec": {"type": "object", **structural(spec)}, "status": {"type": "object", **structural(status)}}}}}]}}


def crafted_unread(code: str) -> list[str]:
    paths = [p for kind, (spec, status, _) in CRAFTED.items() for p in field_paths(crd_of(kind, spec, status), spec,
                                                                                    status)]
    return unread(paths, Readers(CRAFTED, {"crafted.py": code}))


HANDLED = '''
def read(spec: CraftedSpec) -> str:
    return f"{spec.label} {spec.run.kind} {spec.run.image}"


def other(spec: OtherSpec) -> str:
    return spec.target


def write_crafted(api, name: str, generation: int) -> None:
    api.patch(crd("crafteds", name, "status"), {"status": {"observedGeneration": generation, "bounds": 3}})


def write_other(api, name: str, generation: int) -> None:
    api.patch(crd("others", name, "status"), {"status": {"observedGeneration": generation, "venue": "kubernetes"}})
'''


def test_a_field_only_declared_is_reported() -> None:
    assert crafted_unread(HANDLED) == ["Crafted.spec.declared"]
    assert crafted_unread(HANDLED.replace("return spec.target", "return 'x'")) == [
        "Crafted.spec.declared", "Other.spec.target"]


def test_a_name_two_resources_share_counts_only_for_the_one_its_code_is_about() -> None:
    """``observedGeneration`` written beside the Crafted status's own ``bounds`` says nothing of the Other status's
    field of the same name: without its own writer, that one is reported."""
    code = HANDLED.replace('{"observedGeneration": generation, "venue": "kubernetes"}', '{"venue": "kubernetes"}')
    assert crafted_unread(code) == ["Crafted.spec.declared", "Other.status.observedGeneration"]


def test_a_common_word_in_unrelated_code_is_no_reader() -> None:
    """``kind`` and ``image`` as a Pod manifest's keys are not ``run.kind``; ``run.get("kind")`` is."""
    code = HANDLED.replace("{spec.run.kind} ", "") + '''

def pod(image: str) -> dict:
    return {"kind": "Pod", "spec": {"containers": [{"image": image}]}}
'''
    assert crafted_unread(code) == ["Crafted.spec.run.kind", "Crafted.spec.declared"]
    raw = code + '''

def refusal(spec: dict) -> bool:
    run = spec.get("run") or {}
    return run.get("kind") == "local"
'''
    assert crafted_unread(raw) == ["Crafted.spec.declared"]


def test_a_crd_field_that_is_no_model_field_is_an_error() -> None:
    crd = crd_of("Crafted", CraftedSpec, CraftedStatus)
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["stray"] = {
        "type": "string"}
    with pytest.raises(LookupError, match="Crafted.spec.stray"):
        field_paths(crd, CraftedSpec, CraftedStatus)
