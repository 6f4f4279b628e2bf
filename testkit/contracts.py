"""What the GitHub contract checks share: where GitHub's published descriptions are, the error they raise, and
the process-wide record of every mismatch the fake forge met (``docs/github-contracts.md``).

The descriptions are npm packages pinned by ``testkit/github-schemas/package-lock.json`` and installed by
``make github-schemas`` (a dependency of ``make test`` and ``make unit``). A check that cannot find them fails
with :class:`ContractUnavailable`: a missing description never turns the checks off.

A mismatch met inside the fake's HTTP server thread cannot raise into the test, so it is answered with a 500
*and* appended to :data:`RECORD`; the autouse fixture ``github_contracts_kept`` (``testkit/contract_fixture.py``,
imported by ``tests/conftest.py`` and ``e2e/conftest.py``) fails every test during which one was recorded,
whatever the code under test made of the 500. A test that provokes a mismatch on purpose takes it out with
:func:`take`.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

SCHEMAS_DIR = Path(__file__).resolve().parent / "github-schemas"
NODE_MODULES = SCHEMAS_DIR / "node_modules"


class ContractUnavailable(RuntimeError):
    """GitHub's descriptions are not installed here (``make github-schemas``)."""


class ContractError(AssertionError):
    """What we sent or answered is not what GitHub's published description allows.

    ``where`` names the operation (``pulls/get GET /repos/{owner}/{repo}/pulls/{pull_number}``) or the webhook
    event (``issue_comment$created``); ``pointer`` is the JSON pointer of the failing field."""

    def __init__(self, where: str, part: str, pointer: str, message: str) -> None:
        super().__init__(f"GitHub contract: {where}: {part} at {pointer or '/'}: {message}")
        self.where, self.part, self.pointer, self.detail = where, part, pointer, message


def load_json(relative: str) -> Any:
    """A file of the pinned packages, parsed; :class:`ContractUnavailable` when it is not installed."""
    path = NODE_MODULES / relative
    try:
        with path.open("rb") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ContractUnavailable(f"{path} is missing: run `make github-schemas` (npm ci of "
                                  f"{SCHEMAS_DIR / 'package-lock.json'}); docs/github-contracts.md") from None


def installed_version(package: str) -> str:
    return str(load_json(f"{package}/package.json")["version"])


def pointer_of(path: Any) -> str:
    """A JSON pointer (RFC 6901) of a jsonschema error path."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def error_pointer(error: Any) -> str:
    """Where a jsonschema error is: for a missing required property, the property itself."""
    pointer = pointer_of(error.absolute_path)
    if error.validator == "required" and isinstance(error.message, str) and error.message.endswith(
            " is a required property"):
        name = error.message[: -len(" is a required property")].strip("'\"")
        pointer += "/" + name.replace("~", "~0").replace("/", "~1")
    return pointer


# -- the process-wide record -----------------------------------------------------------------------------------
RECORD: list[ContractError] = []
_lock = threading.Lock()


def record(error: ContractError) -> None:
    with _lock:
        RECORD.append(error)


def recorded() -> list[ContractError]:
    with _lock:
        return list(RECORD)


def take(errors: list[ContractError]) -> None:
    """Remove ``errors`` from the record: a test that provoked them on purpose has looked at them."""
    with _lock:
        for error in errors:
            for i, kept in enumerate(RECORD):
                if kept is error:
                    del RECORD[i]
                    break
