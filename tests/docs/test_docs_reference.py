"""The generated reference pages (tools/docsgen): committed as generated, and complete.

``docs/reference/crds.md`` is written from the API's pydantic models, ``docs/reference/values.md`` from the chart's
values.schema.json and values.yaml. A change to either source without regenerating fails here, naming the command;
the other tests prove the pages hold every field and every value, and that the check itself can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import tools.docsgen as docsgen
from tools.docsgen import REGENERATE_COMMAND, crdref, valuesref
from tools.docsgen.markdown import code, literal, prose

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pi-dispatch"


def test_the_committed_reference_pages_equal_a_fresh_generation() -> None:
    stale = [str(path.relative_to(ROOT)) for path in docsgen.stale()]
    assert not stale, f"{', '.join(stale)} out of date: run `{REGENERATE_COMMAND}` and commit the result"


def test_the_check_fails_on_a_page_edited_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docsgen, "REFERENCE", tmp_path)
    assert sorted(p.name for p in docsgen.stale()) == ["crds.md", "values.md"], "missing pages are stale"
    docsgen.write()
    assert docsgen.stale() == []
    page = tmp_path / "values.md"
    page.write_text(page.read_text().replace("`4`", "`5`", 1))
    assert docsgen.stale() == [page]


def test_the_command_checks_and_names_itself() -> None:
    result = subprocess.run([sys.executable, "-m", "tools.docsgen", "--check"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert REGENERATE_COMMAND == "python -m tools.docsgen"


# ---- the CRD reference holds every field -------------------------------------------------------------------------

def crd_paths(schema: dict[str, Any], prefix: str) -> list[str]:
    """Every field path of a CRD's structural schema, as the reference spells them."""
    paths: list[str] = []
    for name, node in schema.get("properties", {}).items():
        path = prefix + name
        paths.append(path)
        if "properties" in node:
            paths += crd_paths(node, path + ".")
        elif node.get("type") == "array" and "properties" in node.get("items", {}):
            paths += crd_paths(node["items"], path + "[].")
        elif isinstance(node.get("additionalProperties"), dict) and "properties" in node["additionalProperties"]:
            paths += crd_paths(node["additionalProperties"], path + ".<name>.")
    return paths


@pytest.mark.parametrize("plural", ["triggers", "jobs", "sessionkeys"])
def test_every_field_of_every_crd_has_a_row_with_its_description(plural: str) -> None:
    from pidispatch.api import crds

    crd = crds.ALL[plural]()
    kind = crd["spec"]["names"]["kind"]
    page = (ROOT / "docs" / "reference" / "crds.md").read_text()
    assert f"\n## {kind}\n" in page
    rows: dict[str, str] = {}
    for line in page.split(f"\n## {kind}\n", 1)[1].split("\n## ", 1)[0].splitlines():
        if line.startswith("| `"):  # the field tables come before the resource's table of CEL rules
            rows.setdefault(line.split(" | ")[0].removeprefix("| "), line)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in ("spec", "status"):
        for path in crd_paths(schema["properties"][part], part + "."):
            assert code(path) in rows, f"{plural}: {path} has no row"
    for path, node in walk_described(schema["properties"]["spec"], "spec."):
        assert prose(node["description"]) in rows[code(path)], f"{plural}: {path}'s description is not on its row"


def walk_described(schema: dict[str, Any], prefix: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, node in schema.get("properties", {}).items():
        if "description" in node:
            found.append((prefix + name, node))
        if "properties" in node:
            found += walk_described(node, prefix + name + ".")
    return found


def test_a_required_field_says_required_and_an_optional_one_unset() -> None:
    from pidispatch.api import models

    rows, rules = crdref.walk(models.TriggerSpec.model_json_schema(by_alias=True),
                              models.TriggerSpec.model_json_schema(by_alias=True)["$defs"], "spec.")
    by_path = {row.path: row for row in rows}
    assert by_path[code("spec.on.event")].default == "required"
    assert by_path[code("spec.run.resume")].default == "unset"
    assert by_path[code("spec.run.resume")].type == "boolean"
    assert by_path[code("spec.run.tolerations[].effect")].type == "string"
    assert by_path[code("spec.run.credentials.<name>.key")].default == "required"
    assert by_path[code("spec.run.replicas")].description.endswith("At least 2; at most 3.")
    assert len(rules) >= 4, "the Trigger's CEL rules are listed"


def test_a_pipe_or_a_tag_in_a_description_stays_text() -> None:
    assert prose("a | b <flow> *x* `a|b`") == "a \\| b &lt;flow&gt; \\*x\\* `a|b`"
    assert literal("") == '`""`' and literal(None) == "`null`" and literal({"a": 1}) == '`{"a": 1}`'


# ---- the values reference holds every value ------------------------------------------------------------------

def schema_paths(schema: dict[str, Any], definitions: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for name, node in schema.get("properties", {}).items():
        paths.append(prefix + name)
        if "$ref" in node:
            node = definitions[node["$ref"].rsplit("/", 1)[-1]]
        paths += schema_paths(node, definitions, f"{prefix}{name}.")
    return paths


def test_every_chart_value_has_a_row_with_its_default() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    page = (ROOT / "docs" / "reference" / "values.md").read_text()
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ") for line in page.splitlines()
            if line.startswith("| `")}
    for path in schema_paths(schema, schema.get("definitions", {})):
        assert code(path) in rows, f"{path} has no row"
        node: Any = values
        for name in path.split("."):
            node = node.get(name, KeyError) if isinstance(node, dict) else KeyError
        if node is not KeyError and not isinstance(node, dict):
            assert rows[code(path)][2] == literal(node), f"{path}: the default is not values.yaml's"


def test_a_values_comment_belongs_to_the_key_below_it() -> None:
    text = ("# a file header\n\n"
            "# the top value\n# on two lines\ntop: 1\n"
            "group:\n  # a nested value\n  #   - {an: example}\n  inner: x\n\n  # set apart\n\n  other: y\n"
            "after: []  # trailing\n")
    found = valuesref.comments(text)
    assert found == {"top": ["the top value", "on two lines"], "group.inner": ["a nested value", "  - {an: example}"]}
    assert valuesref._words(found["group.inner"]) == "a nested value `- {an: example}`"


def test_a_values_key_the_schema_does_not_declare_stops_the_generator(tmp_path: Path) -> None:
    for name in ("values.schema.json", "values.yaml"):
        (tmp_path / name).write_text((CHART / name).read_text())
    with open(tmp_path / "values.yaml", "a") as f:
        f.write("undeclared: 1\n")
    with pytest.raises(ValueError, match="undeclared"):
        valuesref.render(tmp_path)
