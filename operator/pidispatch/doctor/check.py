"""One line of ``pidispatch doctor``'s report (:class:`Check`), how the report is printed, and the two helpers
every check's message uses (a count that agrees, the chart value that fixes it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One line of the report. ``fix`` is a literal shell command, or ``None`` when none would do."""

    name: str
    status: Status
    message: str
    fix: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"check": self.name, "status": self.status.value, "message": self.message, "fix": self.fix}


HELM_FIX = "helm upgrade <release> pi-dispatch{ns} --reuse-values --set {value}"

def plural(n: int, word: str, verb: str | None = None) -> str:
    """``1 Trigger arms`` / ``2 Triggers arm``: a count, its noun and (optionally) a verb that agrees."""
    if n == 1:
        return f"1 {word}" + (f" {verb}s" if verb else "")
    return f"{n} {word}s" + (f" {verb}" if verb else "")


def helm_fix(namespace: str | None, value: str = "sessions.enabled=true") -> str:
    """The chart value that fixes it (the release name is not knowable from inside its Pods)."""
    return HELM_FIX.format(ns=f" -n {namespace}" if namespace else "", value=value)


def exit_code(checks: Sequence[Check]) -> int:
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


def render_text(checks: Sequence[Check]) -> str:
    """One line per check (``ok    store      ...``); a fix on the indented line below it."""
    lines = []
    for c in checks:
        label = "FAIL" if c.status is Status.FAIL else c.status.value
        lines.append(f"{label:<6}{c.name:<11}{c.message}")
        if c.fix:
            lines.append(f"{'':<17}fix: {c.fix}")
    return "".join(line + "\n" for line in lines)


def render_json(checks: Sequence[Check]) -> str:
    return "".join(json.dumps(c.as_json(), separators=(", ", ": ")) + "\n" for c in checks)
