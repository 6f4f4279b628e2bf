"""A JSON Schema node's constraints in words, for a reference table's description cell: what the apiserver (a CRD)
or Helm (values.schema.json) refuses. Shared by the CRD and the chart values pages."""

from __future__ import annotations

from typing import Any

from tools.docsgen.markdown import code, literal

_BOUNDS = (("minLength", "at least", " character"), ("maxLength", "at most", " character"),
           ("minimum", "at least", ""), ("maximum", "at most", ""),
           ("minItems", "at least", " item"), ("maxItems", "at most", " item"),
           ("minProperties", "at least", " entry"), ("maxProperties", "at most", " entry"))


def count(n: int, unit: str) -> str:
    """``n`` and its unit, singular or plural: ``1 item``, ``16 entries``; a bare number without a unit."""
    if not unit or n == 1:
        return f"{n}{unit}"
    return f"{n}{unit[:-1]}ies" if unit.endswith("y") else f"{n}{unit}s"


def limits(node: dict[str, Any], nullable: bool = False) -> list[str]:
    """Sentences, in Markdown, for the constraints ``node`` states about its own value."""
    said: list[str] = []
    if "enum" in node:
        said.append("One of " + ", ".join(literal(v) for v in node["enum"]) + ".")
    if "const" in node:
        said.append("Only " + literal(node["const"]) + ".")
    stated = [f"{words} {count(node[key], unit)}" for key, words, unit in _BOUNDS if key in node]
    if stated:
        said.append("; ".join(stated).capitalize() + ".")
    if node.get("uniqueItems"):
        said.append("No item twice.")
    if "pattern" in node:
        said.append("Pattern " + code(node["pattern"]) + ".")
    names = node.get("propertyNames")
    if isinstance(names, dict):
        rules = []
        if "pattern" in names:
            rules.append("match " + code(names["pattern"]))
        if isinstance(names.get("not"), dict) and "pattern" in names["not"]:
            rules.append("do not match " + code(names["not"]["pattern"]))
        if rules:
            said.append("Keys " + " and ".join(rules) + ".")
    if node.get("x-kubernetes-list-type") == "map":
        keys = ", ".join(code(k) for k in node.get("x-kubernetes-list-map-keys", []))
        said.append(f"A list map keyed by {keys}.")
    if nullable:
        said.append("May be " + code("null") + ".")
    return said


def each(prefix: str, sentences: list[str]) -> list[str]:
    """``sentences`` said of each item or value: ``Each item: at most 253 characters.``"""
    return [f"{prefix}: {s[0].lower()}{s[1:]}" for s in sentences]
