"""The chart values reference (``docs/reference/values.md``) from ``charts/pi-dispatch/values.schema.json`` and
``values.yaml``.

The schema is what Helm enforces (it rejects an unknown key or a wrong type), so it decides which values exist and
their types; ``values.yaml`` gives each default, and the comment written above each key there is the value's
description (the schema's own ``description``, most often a shorter form of the same words, stands in for a
value without a comment). Every value the schema names gets a row; a key of ``values.yaml`` the schema does
not name stops the generator, as it would stop ``helm install``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tools.docsgen import REGENERATE_COMMAND
from tools.docsgen.limits import each, limits
from tools.docsgen.markdown import code, literal, prose, table

CHART = Path(__file__).resolve().parents[2] / "charts" / "pi-dispatch"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?:\s|$)")
_UNSET = object()


def comments(text: str) -> dict[str, list[str]]:
    """The comment block right above each key of a block-style YAML file, by dotted path: the ``#`` lines just
    before the key at its own indentation (a blank line ends a block, so a comment about a group of keys, set
    apart by one, belongs to none). A comment line indented past ``# `` is an example, kept as its own line."""
    found: dict[str, list[str]] = {}
    stack: list[tuple[int, str]] = []
    pending: list[tuple[int, str]] = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped:
            pending = []
            continue
        indent = len(line) - len(stripped)
        if stripped.startswith("#"):
            pending.append((indent, stripped[1:].removeprefix(" ")))
            continue
        match = _KEY.match(line)
        if match is None:  # a list item or a continued flow value: not a key of its own
            pending = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([name for _, name in stack] + [match["key"]])
        block = [words for at, words in pending if at == indent]
        if block:
            found[path] = block
        pending = []
        rest = line[match.end():].split(" #", 1)[0].strip()
        if not rest:
            stack.append((indent, match["key"]))
    return found


def _words(block: list[str]) -> str:
    """A comment block as one cell: prose lines joined, example lines (indented in the comment) as code."""
    parts: list[str] = []
    for line in block:
        if line.startswith(" ") and line.strip():
            parts.append(code(line.strip()))
        else:
            parts.append(prose(line))
    return " ".join(part for part in parts if part)


def _resolve(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    target = definitions[ref.rsplit("/", 1)[-1]]
    return {**_resolve(target, definitions), **{k: v for k, v in node.items() if k != "$ref"}}


def _type(node: dict[str, Any], definitions: dict[str, Any]) -> str:
    kind = node.get("type")
    if kind is None:
        if "enum" in node:
            kinds = {type(v).__name__ for v in node["enum"]}
            return {"str": "string", "bool": "boolean", "int": "integer"}.get(kinds.pop(), "any") \
                if len(kinds) == 1 else "any"
        return "any"
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array" and isinstance(node.get("items"), dict):
        return f"list of {_type(_resolve(node['items'], definitions), definitions)}"
    if kind == "object" and "properties" not in node and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(_resolve(node['additionalProperties'], definitions), definitions)}"
    return str(kind)


def _nested(node: dict[str, Any], definitions: dict[str, Any]) -> list[str]:
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        items = _resolve(node["items"], definitions)
        if "properties" not in items:
            return each("Each item", limits(items))
    if "properties" not in node and isinstance(node.get("additionalProperties"), dict):
        values = _resolve(node["additionalProperties"], definitions)
        if "properties" not in values:
            return each("Each value", limits(values))
    return []


def _lookup(values: Any, path: list[str]) -> Any:
    for name in path:
        if not isinstance(values, dict) or name not in values:
            return _UNSET
        values = values[name]
    return values


def _description(node: dict[str, Any], block: list[str] | None) -> str:
    """The comment above the key in values.yaml; without one, the schema's own description."""
    if block:
        return _words(block)
    return prose(node.get("description", ""))


def rows(schema: dict[str, Any], values: Any, notes: dict[str, list[str]], prefix: list[str],
         definitions: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """A row per value under ``schema``, depth first in the schema's order: an object the schema spells out gets
    its own row (its comment) and then its values'; any other value is one row, its default whole."""
    out: list[tuple[str, str, str, str]] = []
    for name, raw in schema.get("properties", {}).items():
        node = _resolve(raw, definitions)
        path = [*prefix, name]
        dotted = ".".join(path)
        default = _lookup(values, path)
        parts = [_description(node, notes.get(dotted)), *limits(node), *_nested(node, definitions)]
        description = " ".join(part for part in parts if part) or "—"
        if "properties" in node:
            out.append((code(dotted), "object", "—", description))
            out += rows(node, values, notes, path, definitions)
        else:
            shown = "not set" if default is _UNSET else literal(default)
            out.append((code(dotted), _type(node, definitions), shown, description))
    return out


def _undeclared(values: Any, schema: dict[str, Any], definitions: dict[str, Any], prefix: str = "") -> list[str]:
    """Keys of values.yaml the schema does not declare where it spells out an object's keys."""
    node = _resolve(schema, definitions)
    if not isinstance(values, dict) or "properties" not in node:
        return []
    missing = [prefix + k for k in values if k not in node["properties"]]
    for key, value in values.items():
        if key in node["properties"]:
            missing += _undeclared(value, node["properties"][key], definitions, f"{prefix}{key}.")
    return missing


def render(chart: Path = CHART) -> str:
    schema = json.loads((chart / "values.schema.json").read_text())
    text = (chart / "values.yaml").read_text()
    values = yaml.safe_load(text)
    definitions = schema.get("definitions", {})
    undeclared = _undeclared(values, schema, definitions)
    if undeclared:
        raise ValueError(f"values.yaml has keys values.schema.json does not declare: {', '.join(undeclared)}")
    notes = comments(text)
    header = ("Value", "Type", "Default", "Description")
    lines = [
        f"<!-- Generated by `{REGENERATE_COMMAND}` from charts/pi-dispatch/values.schema.json and values.yaml; "
        "do not edit by hand. -->",
        "",
        "# Chart values",
        "",
        "Every value of the `pi-dispatch` chart (`charts/pi-dispatch/`): its type and limits as "
        "`values.schema.json` states them (Helm refuses an unknown key or a wrong type before it renders anything), "
        "its default from `values.yaml`, and the comment `values.yaml` gives it (else the schema's description). "
        "*not set* means `values.yaml` leaves the value out. A test fails when this page and the chart "
        f"disagree (regenerate with `{REGENERATE_COMMAND}`). How the values fit together: "
        "[Installing and configuration](../installing.md).",
        "",
        "## Top-level values",
        "",
    ]
    top = {name: node for name, node in schema["properties"].items()
           if "properties" not in _resolve(node, definitions)}
    lines += table(header, rows({"properties": top}, values, notes, [], definitions))
    for name, node in schema["properties"].items():
        if name in top:
            continue
        lines += ["", f"## {name}", ""]
        lines += table(header, rows({"properties": {name: node}}, values, notes, [], definitions))
    return "\n".join(lines) + "\n"
