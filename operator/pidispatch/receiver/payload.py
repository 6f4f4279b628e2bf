"""A verified webhook body read as GitHub's payload: the JSON (or its form encoding), and the readers of its
fields that refuse what the event promises and lacks (:class:`Malformed`: 400, nothing created).

Shared by the delivery's facts (``delivery.py``) and a closed conversation's (``closed.py``). No I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from pidispatch.api.vocabulary import REPOSITORY_MAX

_FULL_NAME = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


class Malformed(Exception):
    """A verified payload that lacks what its event promises (400: nothing is created)."""


@dataclass(frozen=True)
class Ignored:
    """A verified delivery that no Trigger could ever match (202 with this reason)."""

    why: str


# -- payload -------------------------------------------------------------------------------------------------
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
FORM_FIELD = "payload"


def payload_of(body: bytes, content_type: str) -> Any:
    """The JSON payload of a verified body: the body itself, or, in GitHub's form encoding
    (``application/x-www-form-urlencoded``), its one ``payload`` field. Raises :class:`Malformed`.

    The signature covers the raw body in both encodings, so this runs only after it is checked.
    """
    if content_type == FORM_CONTENT_TYPE:
        try:
            fields = parse_qsl(body.decode("ascii"), keep_blank_values=True, strict_parsing=True,
                               errors="strict", max_num_fields=1)
        except (UnicodeDecodeError, ValueError):
            raise Malformed(f"the form-encoded body is not one {FORM_FIELD}=<JSON> field") from None
        if len(fields) != 1 or fields[0][0] != FORM_FIELD:
            raise Malformed(f"the form-encoded body is not one {FORM_FIELD}=<JSON> field")
        text: str | bytes = fields[0][1]
    else:
        text = body
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise Malformed("the payload is not JSON") from None


def object_at(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise Malformed(f"{where}{key} is missing or not an object")
    return value


def string_at(parent: dict[str, Any], key: str, where: str, *, nullable: bool = False) -> str | None:
    value = parent.get(key)
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise Malformed(f"{where}{key} is missing or not a string")
    return value


def number_at(parent: dict[str, Any], key: str, where: str) -> int:
    value = parent.get(key)
    # bool is an int in Python; GitHub's numbers never are.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Malformed(f"{where}{key} is missing or not a positive whole number")
    return value


def full_name_at(repo: dict[str, Any], where: str) -> str:
    name = string_at(repo, "full_name", where)
    assert name is not None
    if len(name) > REPOSITORY_MAX or not _FULL_NAME.fullmatch(name):
        raise Malformed(f"{where}full_name is not OWNER/NAME")
    return name
