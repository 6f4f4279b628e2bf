"""Writing Markdown table cells from free text (schema descriptions, values.yaml comments) that MkDocs renders as
written: ``<flow>`` stays visible instead of becoming an HTML tag, ``PI_SESSION*`` starts no emphasis, a ``|`` in
prose does not split the cell. Text in backticks is kept as code (Python-Markdown's tables read no ``|`` inside a
code span as a cell border)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

_CODE = re.compile(r"(``?)(.+?)\1")
_PROSE_ESCAPES = {"\\": "\\\\", "*": "\\*", "_": "\\_", "[": "\\[", "]": "\\]", "|": "\\|",
                  "<": "&lt;", ">": "&gt;", "&": "&amp;"}


def prose(text: str) -> str:
    """``text`` for one table cell: whitespace folded to single spaces, reST's ````code```` and Markdown's
    ```code``` as code spans, everything else escaped."""
    text = " ".join(text.split())
    out, end = [], 0
    for match in _CODE.finditer(text):
        out.append(_escape(text[end:match.start()]))
        out.append(code(match.group(2)))
        end = match.end()
    out.append(_escape(text[end:]))
    return "".join(out)


def _escape(text: str) -> str:
    return "".join(_PROSE_ESCAPES.get(char, char) for char in text)


def code(text: str) -> str:
    """``text`` as one inline code span (a longer fence when it holds a backtick)."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def literal(value: Any) -> str:
    """A default or an enum value as the YAML a user writes, in flow style (``""``, ``null``, ``{}``, ``4``)."""
    return code(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table; every cell already Markdown (one line each)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
