"""Enough of GraphQL's executable grammar to read what a job's request asks for (docs/gateway.md#graphql).

The gateway does not execute GraphQL; it reads the request's operations, their root fields, every field's arguments
and the fragments they spread, so the policy (``forge_graphql.py``) can say which repository each root field names
and which mutations it runs. The grammar is the October 2021 specification's executable documents: operations
(``query``/``mutation``/``subscription`` or the ``{ ... }`` shorthand), fragments, inline fragments, aliases,
arguments, variables, directives and every literal (block strings too). Anything else is a ``GraphQLSyntaxError``:
the policy refuses what it cannot read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 64  # nesting of selections and values; deeper is refused, not recursed into
MAX_TOKENS = 50_000
MAX_FIELDS = 20_000  # fields of a document with its fragments opened


class GraphQLSyntaxError(ValueError):
    """The request is not a GraphQL document this reader can follow."""


@dataclass(frozen=True)
class Variable:
    name: str


@dataclass(frozen=True)
class Enum:
    name: str


@dataclass
class Field:
    name: str
    alias: str | None
    arguments: dict[str, Any]
    selections: list[Selection] = field(default_factory=list)


@dataclass
class Spread:
    """``...Name``: the fragment's selections belong here."""

    name: str


@dataclass
class Inline:
    """``... on Type { }`` or ``... @dir { }``."""

    type_condition: str | None
    selections: list[Selection]


Selection = Field | Spread | Inline


@dataclass
class Operation:
    kind: str  # query, mutation, subscription
    name: str | None
    selections: list[Selection]


@dataclass
class Document:
    operations: list[Operation]
    fragments: dict[str, list[Selection]]


_TOKEN = re.compile(r"""
    (?P<ignored>[\s,\ufeff]+|\#[^\n\r]*)
  | (?P<spread>\.\.\.)
  | (?P<punct>[!$&()\:=@\[\]{|}])
  | (?P<block>\"\"\"(?:\\\"\"\"|[^"]|"(?!""))*\"\"\")
  | (?P<string>"(?:\\["\\/bfnrt]|\\u[0-9A-Fa-f]{4}|[^"\\\n\r])*")
  | (?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
  | (?P<name>[_A-Za-z][_0-9A-Za-z]*)
""", re.VERBOSE)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise GraphQLSyntaxError(f"unexpected character at offset {pos}")
        pos = match.end()
        kind = match.lastgroup or ""
        if kind == "ignored":
            continue
        out.append((kind, match.group()))
        if len(out) > MAX_TOKENS:
            raise GraphQLSyntaxError("the document is too long")
    return out


def _string_value(kind: str, raw: str) -> str:
    if kind == "block":
        return raw[3:-3].replace('\\"""', '"""')
    import json
    try:
        value = json.loads(raw)
    except ValueError:
        raise GraphQLSyntaxError("a string literal this reader cannot decode") from None
    if not isinstance(value, str):
        raise GraphQLSyntaxError("a string literal this reader cannot decode")
    return value


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self, offset: int = 0) -> tuple[str, str] | None:
        index = self.pos + offset
        return self.tokens[index] if index < len(self.tokens) else None

    def take(self, value: str | None = None, kind: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (value is not None and token[1] != value) or (kind is not None and token[0] != kind):
            raise GraphQLSyntaxError(f"expected {value or kind}")
        self.pos += 1
        return token

    def at(self, value: str) -> bool:
        token = self.peek()
        return token is not None and token[1] == value and token[0] in ("punct", "spread", "name")

    def document(self) -> Document:
        operations: list[Operation] = []
        fragments: dict[str, list[Selection]] = {}
        if not self.tokens:
            raise GraphQLSyntaxError("an empty document")
        while self.peek() is not None:
            if self.at("{"):
                operations.append(Operation("query", None, self.selection_set(0)))
            elif self.at("fragment"):
                self.take("fragment")
                name = self.take(kind="name")[1]
                self.take("on")
                self.take(kind="name")
                self.directives(0)
                if name in fragments:
                    raise GraphQLSyntaxError("a fragment defined twice")
                fragments[name] = self.selection_set(0)
            elif self.peek() in (("name", "query"), ("name", "mutation"), ("name", "subscription")):
                kind = self.take()[1]
                token = self.peek()
                operation_name = self.take()[1] if token is not None and token[0] == "name" else None
                if self.at("("):
                    self.variable_definitions()
                self.directives(0)
                operations.append(Operation(kind, operation_name, self.selection_set(0)))
            else:
                raise GraphQLSyntaxError("expected an operation or a fragment")
        return Document(operations, fragments)

    def variable_definitions(self) -> None:
        self.take("(")
        while not self.at(")"):
            self.take("$")
            self.take(kind="name")
            self.take(":")
            self.type_ref(0)
            if self.at("="):
                self.take("=")
                self.value(0, const=True)
            self.directives(0)
        self.take(")")

    def type_ref(self, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise GraphQLSyntaxError("a type nested too deep")
        if self.at("["):
            self.take("[")
            self.type_ref(depth + 1)
            self.take("]")
        else:
            self.take(kind="name")
        if self.at("!"):
            self.take("!")

    def directives(self, depth: int) -> None:
        while self.at("@"):
            self.take("@")
            self.take(kind="name")
            if self.at("("):
                self.arguments(depth)

    def selection_set(self, depth: int) -> list[Selection]:
        if depth > MAX_DEPTH:
            raise GraphQLSyntaxError("selections nested too deep")
        self.take("{")
        out: list[Selection] = []
        while not self.at("}"):
            out.append(self.selection(depth))
        self.take("}")
        if not out:
            raise GraphQLSyntaxError("an empty selection set")
        return out

    def selection(self, depth: int) -> Selection:
        if self.at("..."):
            self.take("...")
            if self.at("on"):
                self.take("on")
                type_condition: str | None = self.take(kind="name")[1]
                self.directives(depth)
                return Inline(type_condition, self.selection_set(depth + 1))
            token = self.peek()
            if token is not None and token[0] == "name":
                name = self.take()[1]
                self.directives(depth)
                return Spread(name)
            self.directives(depth)
            return Inline(None, self.selection_set(depth + 1))
        name = self.take(kind="name")[1]
        alias = None
        if self.at(":"):
            self.take(":")
            alias, name = name, self.take(kind="name")[1]
        arguments = self.arguments(depth) if self.at("(") else {}
        self.directives(depth)
        selections = self.selection_set(depth + 1) if self.at("{") else []
        return Field(name, alias, arguments, selections)

    def arguments(self, depth: int) -> dict[str, Any]:
        self.take("(")
        out: dict[str, Any] = {}
        while not self.at(")"):
            name = self.take(kind="name")[1]
            self.take(":")
            if name in out:
                raise GraphQLSyntaxError("an argument given twice")
            out[name] = self.value(depth + 1)
        self.take(")")
        return out

    def value(self, depth: int, *, const: bool = False) -> Any:
        if depth > MAX_DEPTH:
            raise GraphQLSyntaxError("a value nested too deep")
        token = self.peek()
        if token is None:
            raise GraphQLSyntaxError("expected a value")
        kind, raw = token
        if kind == "punct" and raw == "$" and not const:
            self.take("$")
            return Variable(self.take(kind="name")[1])
        if kind == "punct" and raw == "[":
            self.take("[")
            items = []
            while not self.at("]"):
                items.append(self.value(depth + 1, const=const))
            self.take("]")
            return items
        if kind == "punct" and raw == "{":
            self.take("{")
            obj: dict[str, Any] = {}
            while not self.at("}"):
                key = self.take(kind="name")[1]
                self.take(":")
                if key in obj:
                    raise GraphQLSyntaxError("an object field given twice")
                obj[key] = self.value(depth + 1, const=const)
            self.take("}")
            return obj
        self.pos += 1
        if kind in ("string", "block"):
            return _string_value(kind, raw)
        if kind == "number":
            return float(raw) if any(c in raw for c in ".eE") else int(raw)
        if kind == "name":
            return {"true": True, "false": False, "null": None}.get(raw, Enum(raw))
        raise GraphQLSyntaxError("expected a value")


def parse(text: str) -> Document:
    """The operations and fragments of ``text``; ``GraphQLSyntaxError`` when it is not one this reader follows."""
    return _Parser(text).document()


def resolve(value: Any, variables: dict[str, Any]) -> Any:
    """``value`` with every variable replaced by the request's own (``None`` when not given, as GraphQL does)."""
    if isinstance(value, Variable):
        return variables.get(value.name)
    if isinstance(value, list):
        return [resolve(item, variables) for item in value]
    if isinstance(value, dict):
        return {key: resolve(item, variables) for key, item in value.items()}
    if isinstance(value, Enum):
        return value.name
    return value


def root_fields(selections: list[Selection], fragments: dict[str, list[Selection]]) -> list[Field]:
    """The fields of a selection set with its spreads and inline fragments opened (a fragment cycle is refused)."""
    out: list[Field] = []

    def walk(items: list[Selection], seen: tuple[str, ...]) -> None:
        for selection in items:
            if len(out) > MAX_FIELDS:
                raise GraphQLSyntaxError("the document opens into too many fields")
            if isinstance(selection, Field):
                out.append(selection)
            elif isinstance(selection, Inline):
                walk(selection.selections, seen)
            else:
                if selection.name in seen:
                    raise GraphQLSyntaxError("a fragment spreads itself")
                if selection.name not in fragments:
                    raise GraphQLSyntaxError("a spread of an undefined fragment")
                walk(fragments[selection.name], (*seen, selection.name))

    walk(selections, ())
    return out


def every_field(selections: list[Selection], fragments: dict[str, list[Selection]]) -> list[Field]:
    """Every field at any depth below ``selections``, fragments opened where they are spread. A document whose
    opened form exceeds ``MAX_FIELDS`` (fragments spread in fragments, doubling at each level) is refused."""
    out: list[Field] = []

    def walk(items: list[Selection], seen: tuple[str, ...], depth: int) -> None:
        if depth > MAX_DEPTH:
            raise GraphQLSyntaxError("selections nested too deep")
        for selection in items:
            if len(out) > MAX_FIELDS:
                raise GraphQLSyntaxError("the document opens into too many fields")
            if isinstance(selection, Field):
                out.append(selection)
                walk(selection.selections, seen, depth + 1)
            elif isinstance(selection, Inline):
                walk(selection.selections, seen, depth + 1)
            else:
                if selection.name in seen:
                    raise GraphQLSyntaxError("a fragment spreads itself")
                if selection.name not in fragments:
                    raise GraphQLSyntaxError("a spread of an undefined fragment")
                walk(fragments[selection.name], (*seen, selection.name), depth + 1)

    walk(selections, (), 0)
    return out
