"""GitHub's webhook payload schemas as the judge of every delivery the tests post (``docs/github-contracts.md``).

The schemas are ``@octokit/webhooks-schemas``' ``schema.json`` (JSON Schema draft 7, one definition per event and
action: ``issue_comment$created``; an event without actions is ``<event>$event``: ``ping$event``), pinned by
``testkit/github-schemas``. :func:`check_payload` picks the definition from the ``X-GitHub-Event`` header's
event and the payload's ``action`` and raises a :class:`~testkit.contracts.ContractError` naming the event's
definition and the JSON pointer of the failing field. An event or action GitHub does not send is an error too.

``testkit/fakegithub.py`` calls it where deliveries are built and where they are posted, so a new test's
payload is checked without asking. :data:`ALLOWANCES` lists where the schemas themselves are known to be wrong
(none so far); nothing else is loosened.
"""

from __future__ import annotations

import fnmatch
import functools
import threading
from dataclasses import dataclass
from typing import Any

from testkit.contracts import ContractError, error_pointer, load_json

SCHEMA_FILE = "@octokit/webhooks-schemas/schema.json"
URI = "urn:pidispatch:github-webhook-schemas"


@dataclass(frozen=True)
class Allowance:
    """One value GitHub sends although the schema refuses it at ``pointer`` of the definitions ``definition``
    names (a shell pattern: ``pull_request_review$*``)."""

    definition: str
    pointer: str
    value: Any
    reason: str


# The webhook schemas known to be wrong, one field at a time (docs/github-contracts.md, "Exceptions").
_DELETED_FORK = ("GitHub sends `head.repo: null` for a pull request whose head repository (a fork) was deleted. "
                 "The schema of `pull_request` deliveries allows it, the smaller pull request of review and "
                 "review-comment deliveries does not, though it is the same object (the REST description's "
                 "`pull-request-simple` has the same gap: github/rest-api-description#1811).")
ALLOWANCES: tuple[Allowance, ...] = (
    Allowance("pull_request_review$*", "/pull_request/head/repo", None, _DELETED_FORK),
    Allowance("pull_request_review_comment$*", "/pull_request/head/repo", None, _DELETED_FORK),
)


class Schemas:
    """The webhook schemas with a cached validator per definition."""

    def __init__(self, document: dict[str, Any]) -> None:
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT7

        self.document = document
        self.definitions: dict[str, Any] = document["definitions"]
        self.events = {name.split("$", 1)[0] for name in self.definitions if "$" in name}
        self.registry: Any = Registry().with_resource(URI, Resource(contents=document, specification=DRAFT7))
        self._validators: dict[str, Any] = {}
        self._lock = threading.Lock()

    def definition(self, event: str, payload: Any) -> str:
        """The definition of a delivery of ``event`` with this payload's ``action`` (``<event>$event``: none)."""
        if event not in self.events:
            raise ContractError(f"event {event!r}", "X-GitHub-Event", "", "GitHub sends no webhook of this event")
        action = payload.get("action") if isinstance(payload, dict) else None
        name = f"{event}${action}" if action is not None else f"{event}$event"
        if name not in self.definitions:
            actions = sorted(n.split("$", 1)[1] for n in self.definitions if n.startswith(event + "$"))
            which = f"with action {action!r}" if action is not None else "without an action"
            raise ContractError(name, "payload", "/action",
                                f"GitHub sends no {event} delivery {which} (its actions: {', '.join(actions)})")
        return name

    def validator(self, name: str) -> Any:
        with self._lock:
            found = self._validators.get(name)
        if found is None:
            from jsonschema import Draft7Validator

            found = Draft7Validator({"$ref": f"{URI}#/definitions/{name}"}, registry=self.registry,
                                    format_checker=Draft7Validator.FORMAT_CHECKER)
            with self._lock:
                self._validators[name] = found
        return found


def _allowed(name: str, error: Any) -> bool:
    return any(fnmatch.fnmatchcase(name, a.definition) and a.pointer == error_pointer(error)
               and error.instance == a.value for a in ALLOWANCES)


@functools.cache
def schemas() -> Schemas:
    """The webhook schemas, read once per process."""
    return Schemas(load_json(SCHEMA_FILE))


def check_payload(event: str, payload: Any) -> str:
    """Check a delivery of ``event``; returns the definition it was checked against."""
    from jsonschema.exceptions import best_match

    s = schemas()
    name = s.definition(event, payload)
    errors = [e for e in s.validator(name).iter_errors(payload) if not _allowed(name, e)]
    if errors:
        first = best_match(errors)
        others = sorted({error_pointer(e) or "/" for e in errors} - {error_pointer(first) or "/"})
        also = f" (also at {', '.join(others[:8])}{', ...' if len(others) > 8 else ''})" if others else ""
        raise ContractError(name, "payload", error_pointer(first), f"{first.message[:300]}{also}")
    return name
