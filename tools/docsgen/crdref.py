"""The CRD field reference (``docs/reference/crds.md``) from the API's pydantic models.

The models in ``operator/pidispatch/api/models/`` are the API's one source: ``python -m pidispatch.api.crds --write
crds/`` turns them into the CRD manifests (through ``pidispatch.api.schema.structural``), and this page is written
from the same models, so a field, a limit, an enum or a description is stated once. Read from the models rather
than from the CRD YAML because the models also carry what a CRD leaves out: each field's default and each
object's own docstring. Every field of every spec and status gets a row: its path, its type, its default, and
its description with the limits the apiserver enforces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from tools.docsgen import REGENERATE_COMMAND
from tools.docsgen.limits import each, limits
from tools.docsgen.markdown import code, literal, prose, table


@dataclass(frozen=True)
class Resource:
    plural: str
    spec: type[BaseModel]
    status: type[BaseModel]


def resources() -> list[Resource]:
    from pidispatch.api import models

    return [Resource("triggers", models.TriggerSpec, models.TriggerStatus),
            Resource("jobs", models.JobSpec, models.JobStatus),
            Resource("sessionkeys", models.SessionKeySpec, models.SessionKeyStatus)]


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Rule:
    path: str
    rule: str
    message: str


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], bool, str]:
    """``node`` with ``X | None`` unwrapped and its ``$ref`` inlined; whether ``null`` is a value it may take
    (the models mark those ``nullable``); and the referenced model's docstring, for a field that has no words
    of its own."""
    node = dict(node)
    nullable = bool(node.pop("nullable", False))
    branches = node.pop("anyOf", None)
    if branches is not None:
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) != 1:
            raise ValueError(f"a field of two types has no CRD schema: {branches!r}")
        node = {**kept[0], **node}
    model_doc = ""
    ref = node.pop("$ref", None)
    if ref is not None:
        target = dict(defs[ref.rsplit("/", 1)[-1]])
        model_doc = target.pop("description", "")
        node = {**target, **node}
    if "const" in node:
        node["enum"] = [node.pop("const")]
    return node, nullable, model_doc


def _type(node: dict[str, Any], defs: dict[str, Any]) -> str:
    if "enum" in node and "type" not in node:
        return "string"
    kind = node.get("type", "any")
    if kind == "array":
        items, _, _ = _resolve(node.get("items", {}), defs)
        return f"list of {_type(items, defs)}"
    if kind == "object" and "properties" not in node and isinstance(node.get("additionalProperties"), dict):
        values, _, _ = _resolve(node["additionalProperties"], defs)
        return f"map of {_type(values, defs)}"
    if kind == "integer" and node.get("format") == "int64":
        return "integer (int64)"
    if kind == "string" and node.get("format") == "date-time":
        return "string (date-time)"
    return str(kind)


def _nested_limits(node: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        items, nullable, _ = _resolve(node["items"], defs)
        if "properties" not in items:
            return each("Each item", limits(items, nullable))
    if isinstance(node.get("additionalProperties"), dict) and "properties" not in node:
        values, nullable, _ = _resolve(node["additionalProperties"], defs)
        if "properties" not in values:
            return each("Each value", limits(values, nullable))
    return []


def _default(name: str, node: dict[str, Any], required: set[str]) -> str:
    if name in required:
        return "required"
    if "default" not in node or node["default"] is None:
        return "unset"
    return literal(node["default"])


def walk(schema: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> tuple[list[Row], list[Rule]]:
    """A row per field of the object ``schema`` and its nested objects, depth first in the models' order, and
    every CEL rule met on the way with the path it sits on."""
    rows: list[Row] = []
    rules: list[Rule] = [Rule(prefix.rstrip(".") or "(the object)", r["rule"], r["message"])
                         for r in schema.get("x-kubernetes-validations", [])]
    required = set(schema.get("required", []))
    for name, raw in schema.get("properties", {}).items():
        node, nullable, model_doc = _resolve(raw, defs)
        path = prefix + name
        if not model_doc and node.get("type") == "array" and isinstance(node.get("items"), dict):
            model_doc = _resolve(node["items"], defs)[2]  # a list of a model: the model's own words
        words = node.get("description") or model_doc
        parts = ([prose(words)] if words else []) + limits(node, nullable) + _nested_limits(node, defs)
        description = " ".join(parts) or "—"
        rows.append(Row(code(path), _type(node, defs), _default(name, raw, required), description))
        rules += [Rule(path, r["rule"], r["message"]) for r in node.get("x-kubernetes-validations", [])]
        child, child_prefix = _children(node, defs, path)
        if child is not None:
            nested_rows, nested_rules = walk(child, defs, child_prefix)
            rows += nested_rows
            rules += nested_rules
    return rows, rules


def _children(node: dict[str, Any], defs: dict[str, Any], path: str) -> tuple[dict[str, Any] | None, str]:
    """The object schema nested in ``node`` (itself, a list's item, a map's value) and the path prefix of its
    fields: ``run.``, ``run.tolerations[].``, ``run.credentials.<name>.``."""
    if "properties" in node:
        return node, path + "."
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        items, _, _ = _resolve(node["items"], defs)
        if "properties" in items:
            return items, path + "[]."
    if isinstance(node.get("additionalProperties"), dict):
        values, _, _ = _resolve(node["additionalProperties"], defs)
        if "properties" in values:
            return values, path + ".<name>."
    return None, ""


def _section(kind: str, model: type[BaseModel], root: str, intro: str) -> tuple[list[str], list[Rule]]:
    schema = model.model_json_schema(by_alias=True)
    rows, rules = walk(schema, schema.get("$defs", {}), root + ".")
    lines = [f"### {kind} {root}", ""]
    words = " ".join(part for part in (prose(schema.get("description", "")), intro) if part)
    if words:
        lines += [words, ""]
    lines += table(("Field", "Type", "Default", "Description"),
                   [(r.path, r.type, r.default, r.description) for r in rows])
    return lines + [""], [Rule(r.path.replace("(the object)", root), r.rule, r.message) for r in rules]


def _check_against_crd(crd: dict[str, Any], resource: Resource) -> None:
    """The models named here are the ones the CRD is built from (``pidispatch.api.crds``), or this page would
    describe other types."""
    from pidispatch.api.schema import structural

    properties = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    for part, model in (("spec", resource.spec), ("status", resource.status)):
        if properties[part] != {"type": "object", **structural(model)}:
            raise AssertionError(f"{resource.plural}: {model.__name__} is not the model of the CRD's {part}")


def render() -> str:
    from pidispatch.api import crds
    from pidispatch.api.vocabulary import CATEGORY, GROUP, VERSION

    lines = [
        f"<!-- Generated by `{REGENERATE_COMMAND}` from operator/pidispatch/api/models/; do not edit by hand. -->",
        "",
        "# CRD reference",
        "",
        f"The three custom resources of the API group {code(GROUP)}, version {code(VERSION)}, field by "
        "field. The page is generated from the pydantic models in `operator/pidispatch/api/models/`, which also "
        "generate the CRD manifests in `crds/` (`python -m pidispatch.api.crds --write crds/`); a test fails when "
        f"this page and the models disagree (regenerate with `{REGENERATE_COMMAND}`).",
        "",
        "How to read it: a path such as `run.tolerations[].key` is a field of each item of a list, "
        "`run.credentials.<name>.key` a field of each value of a map. *Default* `required` means the apiserver "
        "refuses an object without the field; `unset` means the field may be left out, and the operator then "
        "applies the deployment's setting where the description names one. Unknown fields are pruned by the "
        "apiserver, never refused: a newer operator's status is not an error to an older one "
        "([CRD policy](../crd-policy.md)).",
        "",
    ]
    for resource in resources():
        crd = crds.ALL[resource.plural]()
        _check_against_crd(crd, resource)
        names = crd["spec"]["names"]
        version = crd["spec"]["versions"][0]
        lines += [f"## {names['kind']}", "",
                  prose(version["schema"]["openAPIV3Schema"]["description"]), "",
                  f"`apiVersion: {GROUP}/{VERSION}`, `kind: {names['kind']}`; `kubectl get "
                  f"{names['plural']}`, or " + ", ".join(code(n) for n in names["shortNames"])
                  + f"; category {code(CATEGORY)} (`kubectl get {CATEGORY}`).", "",
                  "Columns of `kubectl get` (those marked *wide* with `-o wide`):", ""]
        lines += table(("Column", "Type", "JSONPath"),
                       [(c["name"] + (" (*wide*)" if c.get("priority") else ""), c["type"], code(c["jsonPath"]))
                        for c in version["additionalPrinterColumns"]])
        lines.append("")
        spec_lines, spec_rules = _section(names["kind"], resource.spec, "spec", "")
        status_lines, status_rules = _section(names["kind"], resource.status, "status",
                                                 "Written by the operator.")
        lines += spec_lines
        rules = spec_rules + status_rules
        if rules:
            lines += [f"### {names['kind']} validation rules", "",
                      "CEL rules the apiserver checks on every write (`kubectl apply` prints the message):", ""]
            lines += table(("On", "Rule", "Message"),
                           [(code(r.path), code(r.rule), prose(r.message)) for r in rules])
            lines.append("")
        lines += status_lines
    return "\n".join(lines).rstrip("\n") + "\n"
