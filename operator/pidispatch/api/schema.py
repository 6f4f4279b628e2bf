"""From a pydantic model's JSON Schema to a Kubernetes structural OpenAPI v3 schema (a CRD's).

What changes on the way: ``$ref`` is inlined (a CRD schema has no ``$defs``); an optional field's
``null`` branch is dropped, unless the field is marked ``nullable`` (``models.NULLABLE``), which
becomes ``nullable: true``; a single-value ``const`` becomes an ``enum``; pydantic's ``title``,
``default`` (a CRD default would change what the apiserver stores) and a model's
``additionalProperties: true`` (extra fields are pruned by the apiserver, not refused) are left out,
as are a model's own docstring descriptions; a map's ``additionalProperties`` (its values' schema)
and its ``maxProperties`` stay. Everything else (``type``, ``enum``, ``maxLength``, ``pattern``,
``minimum``, ``maxItems``, ``format``, ``x-kubernetes-*``, a field's ``description``) passes through.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_DROPPED = {"title", "default", "$defs"}
# The order a person reads a schema in (the YAML keeps it): what it is, its limits, then what it holds.
_ORDER = ("type", "description", "enum", "format", "nullable", "minimum", "maximum", "minLength", "maxLength",
          "pattern", "maxItems", "maxProperties", "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "required",
          "properties",
          "additionalProperties", "items", "x-kubernetes-validations")


def structural(model: type[BaseModel]) -> dict[str, Any]:
    """The CRD schema of ``model`` (an object schema with ``properties``, ``required`` and any extras)."""
    raw = model.model_json_schema(by_alias=True)
    defs = raw.get("$defs", {})
    top = {k: v for k, v in raw.items() if k != "description"}  # the CRD gives the object its own words
    converted: dict[str, Any] = _convert(top, defs)
    return converted


def _convert(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_convert(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    branches = node.pop("anyOf", None)
    if branches is not None:  # ``X | None``: the field's own keys sit beside the branches
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) != 1:
            raise ValueError(f"a CRD schema cannot say 'one of' {branches!r}")
        node = {**kept[0], **node}
    ref = node.pop("$ref", None)
    if ref is not None:
        target = {k: v for k, v in defs[ref.rsplit("/", 1)[-1]].items() if k != "description"}
        node = {**target, **node}  # the field's own keys (its description) win over the model's
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get("nullable") is not True:
        node.pop("nullable", None)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: _convert(prop, defs) for name, prop in value.items()}
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = _convert(value, defs)
        elif key == "items":
            out[key] = _convert(value, defs)
        else:
            out[key] = value
    if not out.get("required"):
        out.pop("required", None)
    rank = {key: i for i, key in enumerate(_ORDER)}
    return dict(sorted(out.items(), key=lambda item: rank.get(item[0], len(rank))))
