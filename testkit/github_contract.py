"""GitHub's REST API description as the judge of a request and its answer (``docs/github-contracts.md``).

The description is ``@octokit/openapi``'s ``generated/api.github.com.json`` (OpenAPI 3.0.3, so ``nullable``:
validated with ``openapi-schema-validator``'s OAS 3.0 validators), pinned by ``testkit/github-schemas``.
:func:`check_request` finds the operation by the description's path templates (``/repos/{owner}/{repo}/pulls``;
a parameter marked ``x-multi-segment`` spans slashes, a literal segment beats a parameter) and checks the path
and query parameters and the JSON body against it; :func:`check_response` checks an answer's status and body
against the operation's response for that status. Each mismatch is a :class:`~testkit.contracts.ContractError`
naming the operation, the part (``request body``, ``response 201``, ``query parameter per_page``) and the JSON
pointer of the failing field. A path or method GitHub's API does not have is an error too.

An error status the operation does not list (GitHub answers any call with 401 for bad credentials, 403 for a
permission the token lacks, 404 for what the token cannot see, ...) is checked against GitHub's generic error
object (``basic-error``); a success status it does not list is an error.

Where GitHub's description is itself known to be wrong, :data:`ALLOWANCES` names the one field, the one value
it wrongly refuses, and why; nothing else is loosened.

The description (13 MB) is read once per process (:func:`description`) and every compiled validator is cached.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

from testkit.contracts import ContractError, error_pointer, load_json

DESCRIPTION_FILE = "@octokit/openapi/generated/api.github.com.json"
URI = "urn:pidispatch:github-rest-description"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


@dataclass(frozen=True)
class Allowance:
    """One value GitHub sends although its description refuses it: ``value`` at ``pointer`` of ``part``
    (``response 200``, ``request body``) of ``operation``."""

    operation: str
    part: str
    pointer: str
    value: Any
    reason: str


# GitHub's description known to be wrong, one field at a time (docs/github-contracts.md, "Exceptions").
ALLOWANCES: tuple[Allowance, ...] = (
    Allowance("pulls/get", "response 200", "/head/repo", None,
              "GitHub answers `head.repo: null` for a pull request whose head repository (a fork) was deleted; "
              "the 3.0 description says a repository object (github/rest-api-description#424, #1811). The "
              "operator must handle it (forge/head.py: a deleted fork is no head)."),
    Allowance("issues/get", "response 200", "/state_reason", None,
              "GitHub answers `state_reason: null` for every open issue; the description says `nullable: true` "
              "but its enum omits null, which OpenAPI 3.0.3 reads as refusing null (71 of the description's "
              "150 nullable enums omit it, the other 79 list it)."),
    Allowance("issues/list-events-for-repo", "response 200", "/*/issue/state_reason", None,
              "The same `state_reason: null` of an open issue, in each issue event's `issue` (`*`: any item)."),
    Allowance("pulls/list-review-comments-for-repo", "response 200", "/*/start_side", None,
              "GitHub answers `start_side: null` for a review comment on one line (not a range); the description "
              "says `nullable: true` with an enum that omits null, as `state_reason` above."),
)


@dataclass(frozen=True)
class Parameter:
    name: str
    where: str  # "path" | "query"
    required: bool
    schema_pointer: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class Operation:
    """One operation of the description: ``method`` (upper case) on ``template``."""

    id: str
    method: str
    template: str
    pointer: str  # JSON pointer of the operation object in the description
    regex: re.Pattern[str]
    specificity: tuple[int, int, int]
    parameters: dict[tuple[str, str], Parameter] = field(hash=False, compare=False)
    body_required: bool = False
    body_schemas: dict[str, str] = field(default_factory=dict, hash=False, compare=False)  # media type → pointer

    @property
    def where(self) -> str:
        return f"{self.id} ({self.method} {self.template})"


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


class Description:
    """GitHub's REST API description, indexed by path template, with cached validators."""

    def __init__(self, document: dict[str, Any]) -> None:
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT4

        self.document = document
        self.version = str(document.get("info", {}).get("version", "?"))
        # OpenAPI 3.0's schema objects are draft-4 shaped; refs (#/components/...) resolve inside the document.
        self.registry: Any = Registry().with_resource(URI, Resource(contents=document, specification=DRAFT4))
        self._by_first: dict[str, list[Operation]] = {}
        self._lock = threading.Lock()
        self._validators: dict[tuple[str, str], Any] = {}
        for template, item in document["paths"].items():
            shared = item.get("parameters", [])
            for method in METHODS:
                if method in item:
                    op = self._operation(template, method, item[method], shared)
                    first = template.split("/")[1]
                    self._by_first.setdefault("*" if first.startswith("{") else first, []).append(op)
        for ops in self._by_first.values():
            ops.sort(key=lambda o: o.specificity, reverse=True)

    # -- the index -----------------------------------------------------------------------------------------
    def resolve(self, node: Any, pointer: str) -> tuple[Any, str]:
        """``node`` (at ``pointer``) with its ``$ref`` followed: (the object, its pointer)."""
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            assert ref.startswith("#/"), ref
            pointer = ref[1:]
            node = self.document
            for part in pointer[1:].split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
        return node, pointer

    def _operation(self, template: str, method: str, op: dict[str, Any], shared: list[Any]) -> Operation:
        base = f"/paths/{_escape(template)}/{method}"
        params: dict[tuple[str, str], Parameter] = {}
        for i, raw in enumerate(shared):
            self._parameter(params, raw, f"/paths/{_escape(template)}/parameters/{i}")
        for i, raw in enumerate(op.get("parameters", [])):
            self._parameter(params, raw, f"{base}/parameters/{i}")
        multi = {name for (name, where), p in params.items() if where == "path" and p.schema.get("x-multi-segment")}
        pattern, literals, chars = "", 0, 0
        for segment in template.split("/")[1:]:
            names = re.findall(r"\{([^}]+)\}", segment)
            if not names:
                literals += 1
                chars += len(segment)
            piece = ""
            for text, name in re.findall(r"([^{]*)(?:\{([^}]+)\})?", segment):
                piece += re.escape(text)
                if name:
                    piece += f"(?P<{re.sub(r'[^0-9A-Za-z_]', '_', name)}>{'.+' if name in multi else '[^/]+'})"
            pattern += "/" + piece
        body_required, body_schemas = False, {}
        if "requestBody" in op:
            body, body_pointer = self.resolve(op["requestBody"], f"{base}/requestBody")
            body_required = bool(body.get("required"))
            for media, content in body.get("content", {}).items():
                if "schema" in content:
                    body_schemas[media] = f"{body_pointer}/content/{_escape(media)}/schema"
        return Operation(op.get("operationId", f"{method} {template}"), method.upper(), template, base,
                         re.compile(pattern or "/"), (literals, -len(multi), chars), params, body_required,
                         body_schemas)

    def _parameter(self, params: dict[tuple[str, str], Parameter], raw: Any, pointer: str) -> None:
        obj, where = self.resolve(raw, pointer)
        schema = dict(obj.get("schema", {}))
        if obj.get("x-multi-segment"):
            schema["x-multi-segment"] = True
        params[(obj["name"], obj["in"])] = Parameter(obj["name"], obj["in"], bool(obj.get("required")),
                                                     f"{where}/schema", schema)

    def by_id(self, operation_id: str) -> Operation:
        return next(op for ops in self._by_first.values() for op in ops if op.id == operation_id)

    def candidates(self, path: str) -> list[Operation]:
        first = path.split("/")[1] if path.count("/") >= 1 else ""
        return [*self._by_first.get(first, []), *self._by_first.get("*", [])]

    def find(self, method: str, path: str) -> tuple[Operation, dict[str, str]]:
        """The operation ``method path`` calls and its raw (still percent-encoded) path parameters."""
        matched: list[tuple[Operation, dict[str, str]]] = []
        for op in self.candidates(path):
            m = op.regex.fullmatch(path)
            if m is not None:
                matched.append((op, m.groupdict()))
        if not matched:
            raise ContractError(f"{method} {path}", "path", "", "GitHub's REST API has no such path")
        best = [(op, found) for op, found in matched if op.method == method]
        if not best:
            template = max(matched, key=lambda pair: pair[0].specificity)[0].template
            there = sorted(f"{op.method} {op.id}" for op, _ in matched if op.template == template)
            raise ContractError(f"{method} {template}", "method", "",
                                f"GitHub's REST API has no {method} here (it has {', '.join(there)})")
        best.sort(key=lambda pair: pair[0].specificity, reverse=True)
        op, raw = best[0]
        names = {re.sub(r"[^0-9A-Za-z_]", "_", n): n for (n, w) in op.parameters if w == "path"}
        return op, {names.get(k, k): v for k, v in raw.items()}

    # -- validation -----------------------------------------------------------------------------------------
    def validator(self, pointer: str, mode: str) -> Any:
        """A compiled validator of the schema at ``pointer``: ``read`` (an answer) or ``write`` (a request)."""
        key = (pointer, mode)
        with self._lock:
            found = self._validators.get(key)
        if found is None:
            from openapi_schema_validator import OAS30ReadValidator, OAS30WriteValidator, oas30_format_checker

            cls = OAS30ReadValidator if mode == "read" else OAS30WriteValidator
            found = cls({"$ref": f"{URI}#{pointer}"}, registry=self.registry, format_checker=oas30_format_checker)
            with self._lock:
                self._validators[key] = found
        return found

    def operation_object(self, op: Operation) -> dict[str, Any]:
        node: Any = self.document
        for part in op.pointer[1:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return dict(node)

    def response(self, op: Operation, status: int) -> tuple[dict[str, Any], str | None] | None:
        """What ``op`` declares for ``status`` (or its ``4XX``, its ``default``): (its content, the pointer of its
        JSON schema or ``None``); ``None`` when it declares nothing for it."""
        responses = self.operation_object(op).get("responses", {})
        key = next((k for k in (str(status), f"{status // 100}XX", "default") if k in responses), None)
        if key is None:
            return None
        response, pointer = self.resolve(responses[key], f"{op.pointer}/responses/{key}")
        content = response.get("content", {})
        media = next((m for m in content if m == "application/json" or m.endswith("+json")), None)
        if media is None or "schema" not in content[media]:
            return content, None
        return content, f"{pointer}/content/{_escape(media)}/schema"

    def errors(self, pointer: str, mode: str, instance: Any) -> list[Any]:
        return list(self.validator(pointer, mode).iter_errors(instance))


def _allowed(op: Operation, part: str, error: Any) -> bool:
    pointer = error_pointer(error)
    return any(a.operation == op.id and a.part == part and _pointer_matches(a.pointer, pointer)
               and error.instance == a.value for a in ALLOWANCES)


def _pointer_matches(allowed: str, pointer: str) -> bool:
    """``allowed`` names ``pointer``; a ``*`` segment of it stands for any one array index."""
    wanted, got = allowed.split("/"), pointer.split("/")
    if len(wanted) != len(got):
        return False
    return all(w == g or (w == "*" and g.isdigit()) for w, g in zip(wanted, got, strict=True))


def _raise_first(op: Operation, part: str, errors: Iterable[Any]) -> None:
    from jsonschema.exceptions import best_match

    kept = [e for e in errors if not _allowed(op, part, e)]
    if not kept:
        return
    first = best_match(kept)
    others = sorted({error_pointer(e) or "/" for e in kept} - {error_pointer(first) or "/"})
    also = f" (also at {', '.join(others[:8])}{', ...' if len(others) > 8 else ''})" if others else ""
    raise ContractError(op.where, part, error_pointer(first), f"{first.message[:300]}{also}")


def _coerce(value: str, schema: dict[str, Any]) -> Any:
    """A path or query parameter's text as the type its schema names (GitHub's form style, no explode)."""
    kind = schema.get("type")
    if kind == "integer" and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    if kind == "number":
        try:
            return float(value)
        except ValueError:
            return value
    if kind == "boolean" and value in ("true", "false"):
        return value == "true"
    return value


@functools.cache
def description() -> Description:
    """GitHub's REST API description, read once per process."""
    return Description(load_json(DESCRIPTION_FILE))


def check_request(method: str, path: str, query: str = "", body: bytes = b"") -> Operation:
    """The operation ``method path?query`` calls, after checking its parameters and body against it.

    ``path`` is the API path without the API prefix (``/api/v3`` on GitHub Enterprise), still percent-encoded;
    ``body`` the raw request body (empty: none)."""
    d = description()
    op, raw_params = d.find(method.upper(), path)
    for (name, where), param in op.parameters.items():
        if where == "path":
            value = _coerce(unquote(raw_params.get(name, "")), param.schema)
            _raise_first(op, f"path parameter {name}", d.errors(param.schema_pointer, "write", value))
    given = parse_qs(query, keep_blank_values=True)
    for name, values in given.items():
        param = op.parameters.get((name, "query"))
        if param is None:
            known = sorted(n for n, w in op.parameters if w == "query")
            raise ContractError(op.where, f"query parameter {name}", "",
                                f"not a parameter of this operation (it takes: {', '.join(known) or 'none'})")
        if param.schema.get("type") == "array":
            items = param.schema.get("items", {})
            parts = values if len(values) > 1 else values[0].split(",")
            value: Any = [_coerce(v, items) for v in parts]
        elif len(values) > 1:
            raise ContractError(op.where, f"query parameter {name}", "", f"given {len(values)} times")
        else:
            value = _coerce(values[0], param.schema)
        _raise_first(op, f"query parameter {name}", d.errors(param.schema_pointer, "write", value))
    for (name, where), param in op.parameters.items():
        if where == "query" and param.required and name not in given:
            raise ContractError(op.where, f"query parameter {name}", "", "required, not given")
    if not body:
        if op.body_required:
            raise ContractError(op.where, "request body", "", "required, none given")
        return op
    if not op.body_schemas:
        raise ContractError(op.where, "request body", "", "this operation takes no body")
    schema = op.body_schemas.get("application/json")
    if schema is None:
        return op  # a raw upload (application/octet-stream, text/plain): not JSON to check
    try:
        instance = json.loads(body)
    except ValueError:
        raise ContractError(op.where, "request body", "", "not JSON") from None
    _raise_first(op, "request body", d.errors(schema, "write", instance))
    return op


def check_response(op: Operation, status: int, payload: Any) -> None:
    """Check an answer to ``op``: ``status`` and its JSON ``payload`` (``None``: no body)."""
    d = description()
    part = f"response {status}"
    declared = d.response(op, status)
    if declared is None:
        if status < 400:
            listed = ", ".join(sorted(d.operation_object(op).get("responses", {})))
            raise ContractError(op.where, part, "", f"GitHub does not answer this operation with {status} "
                                                    f"(its responses: {listed})")
        if payload is not None:
            _raise_first(op, part, d.errors("/components/schemas/basic-error", "read", payload))
        return
    content, schema = declared
    if schema is None:
        if payload is not None and not content:
            raise ContractError(op.where, part, "", "GitHub answers this with no body")
        return
    if payload is None:
        raise ContractError(op.where, part, "", "GitHub answers this with a JSON body; none was given")
    _raise_first(op, part, d.errors(schema, "read", payload))
