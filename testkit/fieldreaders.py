"""Which CRD fields no code handles: a walk of every field of the CRDs, each looked for in the operator's code.

A field the schema declares and no code reads (a spec field) or writes (a status field) tells the user something
untrue: the apiserver keeps it, ``kubectl explain`` documents it, and nothing happens. The walk takes each field
path of a CRD (``crds/*.yaml``: properties, list items, map values), resolves it to the pydantic model field it
was generated from (``operator/pidispatch/api/models/``; a path with no model field is an error: the CRDs must
come from the models), and looks for code that handles that field of that model.

The code is every module of ``operator/pidispatch`` but the models themselves (declaring a field is not handling
it), cut into *scopes*: each function or method (its nested functions with it), each module-level or class-level
statement. In a scope, the names a field can be handled by (:attr:`Scope.uses`):

* an attribute read, ``trigger.spec.run.image`` (``x.f(...)``, a method call, is not a field);
* a string constant, the camelCase key: ``run.get("kind")``, ``status["phase"]``, ``{"observedGeneration": n}``;
* a keyword argument, ``JobSpec(trigger=...)``;
* a module-level tuple or list of names used by name (``TOKEN_FIELDS``, ``LAST_FACTS``): each name in it.

A name alone proves little: ``observedGeneration`` is a field of the three statuses and of a condition, ``kind``
is a key of every manifest. So a scope counts for field ``f`` of model ``M`` only when it is also *about* ``M``
(:meth:`Readers.evidence`): its names (with its parameters', assigned variables' and model classes' names:
:attr:`Scope.context`) include an anchor of ``M`` other than ``f``:

* the name of a field that holds an ``M`` (its parent: ``run``, ``on``, ``tokens``) or ``M``'s class name;
* a field only the model of ``f`` holds (its children: ``schedule`` with ``lastSlot``);
* for a top-level model (a spec or a status), a field only ``M`` has, or the CRD's kind or plural;

or one of its dict displays has ``f`` as a key beside two other keys that are fields only ``M`` has (a status
writer's ``{"count": ..., "jobs": ..., "quarantinedAt": ...}``). A field whose model is passed on whole
(``run.tolerations`` dumped with ``model_dump`` into the Pod) counts as handled where its parent is: Kubernetes
reads each field as given.

This is evidence, not proof: a scope can name a field and an anchor for other reasons. It does catch a field that
is only declared (no scope names it about its model), and a field of one resource handled only for another
(``observedGeneration`` written for Triggers and Jobs, never for SessionKeys): ``tests/api/test_crd_fields_read.py``
shows both on crafted schemas and on the real code with a writer taken out.
"""

from __future__ import annotations

import ast
import typing
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

SIBLINGS = 2  # other keys of M's own in one dict display that make it a writer of M


@dataclass(frozen=True)
class FieldPath:
    """One field of a CRD: ``shown`` as ``Kind.spec.run.tolerations[].key``, the model and field it comes from."""

    shown: str
    model: type[BaseModel]
    field: str


def _models_in(annotation: Any) -> set[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    return {m for arg in typing.get_args(annotation) for m in _models_in(arg)}


def field_paths(crd: Mapping[str, Any], spec: type[BaseModel], status: type[BaseModel]) -> list[FieldPath]:
    """Every field path of ``crd`` (one version), resolved to the model field it was generated from."""
    kind = crd["spec"]["names"]["kind"]
    [version] = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    found: list[FieldPath] = []

    def walk(node: Mapping[str, Any], shown: str, model: type[BaseModel]) -> None:
        for name, prop in (node.get("properties") or {}).items():
            info = model.model_fields.get(name)
            if info is None:
                raise LookupError(f"{shown}.{name} is in the CRD but not a field of {model.__name__}: the CRDs are "
                                  "generated from the models (python -m pidispatch.api.crds --write crds)")
            found.append(FieldPath(f"{shown}.{name}", model, name))
            inner = _models_in(info.annotation)
            if len(inner) > 1:
                raise LookupError(f"{shown}.{name} holds more than one model: {sorted(m.__name__ for m in inner)}")
            if not inner:
                continue
            [child] = inner
            if isinstance(prop.get("items"), dict):
                walk(prop["items"], f"{shown}.{name}[]", child)
            elif isinstance(prop.get("additionalProperties"), dict):
                walk(prop["additionalProperties"], f"{shown}.{name}{{}}", child)
            else:
                walk(prop, f"{shown}.{name}", child)

    walk(schema["spec"], f"{kind}.spec", spec)
    walk(schema["status"], f"{kind}.status", status)
    return found


@dataclass(frozen=True)
class Scope:
    """One function, method or top-level statement: where it is, the names it handles fields by (``uses``),
    those and the names that say what it is about (``context``), its dict displays' keys, whether it dumps a
    model whole."""

    where: str
    uses: frozenset[str]
    context: frozenset[str]
    dict_keys: tuple[frozenset[str], ...]
    dumps: bool


def _constants(trees: Iterable[ast.Module]) -> dict[str, frozenset[str]]:
    """Module-level tuples, lists and sets of string constants (``*OTHER`` spliced in), by name."""
    raw: dict[str, list[ast.expr]] = defaultdict(list)
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                raw[node.targets[0].id].append(node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                raw[node.target.id].append(node.value)

    def names(name: str, seen: tuple[str, ...]) -> set[str]:
        out: set[str] = set()
        if name in seen:
            return out
        for value in raw.get(name, ()):
            if not isinstance(value, ast.Tuple | ast.List | ast.Set):
                continue
            items: set[str] = set()
            for element in value.elts:
                if isinstance(element, ast.Constant) and isinstance(element.value, str):
                    items.add(element.value)
                elif isinstance(element, ast.Starred) and isinstance(element.value, ast.Name):
                    items |= names(element.value.id, (*seen, name))
                else:
                    break
            else:
                out |= items
        return out

    return {name: frozenset(found) for name in raw if (found := names(name, ()))}


def _scope(where: str, node: ast.AST, constants: Mapping[str, frozenset[str]], model_names: frozenset[str]) -> Scope:
    called = {id(call.func) for call in ast.walk(node) if isinstance(call, ast.Call)}
    uses: set[str] = set()
    context: set[str] = set()
    keys: list[frozenset[str]] = []
    dumps = False
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute):
            if id(n) in called:
                dumps |= n.attr == "model_dump"
            else:
                uses.add(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            uses.add(n.value)
        elif isinstance(n, ast.keyword) and n.arg:
            uses.add(n.arg)
        elif isinstance(n, ast.arg):
            context.add(n.arg)
        elif isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Store) or n.id in model_names:
                context.add(n.id)
            uses |= constants.get(n.id, frozenset())
        if isinstance(n, ast.Dict):
            keys.append(frozenset(k.value for k in n.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)))
    return Scope(where, frozenset(uses), frozenset(uses | context), tuple(keys), dumps)


def scopes_of(sources: Mapping[str, str], model_names: frozenset[str]) -> list[Scope]:
    """The scopes of ``sources`` (path -> Python text)."""
    trees = {path: ast.parse(text, filename=path) for path, text in sources.items()}
    constants = _constants(trees.values())
    found: list[Scope] = []
    for path, tree in trees.items():
        for node in tree.body:
            bodies = node.body if isinstance(node, ast.ClassDef) else [node]
            prefix = f"{node.name}." if isinstance(node, ast.ClassDef) else ""
            for part in bodies:
                name = part.name if isinstance(part, ast.FunctionDef | ast.AsyncFunctionDef) else f"line {part.lineno}"
                found.append(_scope(f"{path}:{prefix}{name}", part, constants, model_names))
    return found


class Readers:
    """The models reachable from the CRDs' roots, and the code's scopes: who handles which field."""

    def __init__(self, roots: Mapping[str, tuple[type[BaseModel], type[BaseModel], str]],
                 sources: Mapping[str, str]) -> None:
        """``roots``: kind -> (spec model, status model, plural); ``sources``: path -> Python text."""
        self.fields: dict[type[BaseModel], dict[str, set[type[BaseModel]]]] = {}
        self.top: dict[type[BaseModel], set[str]] = defaultdict(set)
        for kind, (spec, status, plural) in roots.items():
            for model in (spec, status):
                self._visit(model)
                self.top[model] |= {kind, plural}
        self.owners: dict[str, set[type[BaseModel]]] = defaultdict(set)
        for model, fields in self.fields.items():
            for name in fields:
                self.owners[name].add(model)
        self.scopes = scopes_of(sources, frozenset(m.__name__ for m in self.fields))

    def _visit(self, model: type[BaseModel]) -> None:
        if model in self.fields:
            return
        self.fields[model] = {name: _models_in(info.annotation) for name, info in model.model_fields.items()}
        for inner in self.fields[model].values():
            for child in inner:
                self._visit(child)

    def own(self, model: type[BaseModel]) -> set[str]:
        """The fields only ``model`` has."""
        return {name for name in self.fields[model] if self.owners[name] == {model}}

    def anchors(self, model: type[BaseModel], field: str) -> set[str]:
        """The names that say a scope naming ``field`` is about ``model`` (see the module's docstring)."""
        found = {model.__name__}
        found |= {name for fields in self.fields.values() for name, inner in fields.items() if model in inner}
        for child in self.fields[model][field]:
            found |= self.own(child) | {child.__name__}
        if model in self.top:
            found |= self.own(model) | self.top[model]
        return found - {field}

    def evidence(self, model: type[BaseModel], field: str) -> list[str]:
        """Where ``field`` of ``model`` is handled: the scopes that name it and are about ``model``."""
        anchors = self.anchors(model, field)
        siblings = self.own(model) - {field}
        direct = [s.where for s in self.scopes if field in s.uses and (
            anchors & s.context or any(field in keys and len(siblings & keys) >= SIBLINGS for keys in s.dict_keys))]
        return direct or self.dumped(model)

    def dumped(self, model: type[BaseModel]) -> list[str]:
        """Where a field holding ``model`` is handled by passing it on whole (``model_dump``)."""
        holders = [(owner, name) for owner, fields in self.fields.items() for name, inner in fields.items()
                   if model in inner]
        dumping = {s.where for s in self.scopes if s.dumps}
        return [where for owner, name in holders for where in self.evidence(owner, name) if where in dumping]


def unread(paths: Iterable[FieldPath], readers: Readers) -> list[str]:
    """The field paths no scope handles, as shown."""
    return [p.shown for p in paths if not readers.evidence(p.model, p.field)]
