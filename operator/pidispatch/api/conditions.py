"""``metav1.Condition`` helpers: one list per resource, keyed by type, transitions kept honest.

Merge-patch replaces lists, so the whole list is always recomputed from the current status;
``lastTransitionTime`` moves only when a condition's status changes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[dict[str, Any]] | None,
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
    now: str | None = None,
) -> list[dict[str, Any]]:
    """Return a new list with ``type_`` set; ``None`` status is ``Unknown``."""
    value = "Unknown" if status is None else ("True" if status else "False")
    previous = next((c for c in conditions or [] if c.get("type") == type_), None)
    transition = previous["lastTransitionTime"] if previous and previous.get("status") == value else (
        now or now_rfc3339())
    condition: dict[str, Any] = {"type": type_, "status": value, "reason": reason, "message": message,
                                 "lastTransitionTime": transition}
    if generation is not None:
        condition["observedGeneration"] = generation
    others = [c for c in conditions or [] if c.get("type") != type_]
    return [*others, condition] if previous is None else [
        condition if c.get("type") == type_ else c for c in conditions or []]


def get_condition(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def reason_to_camel(token: str) -> str:
    """Condition reasons are CamelCase: ``context-too-full`` → ``ContextTooFull``."""
    return "".join(part[:1].upper() + part[1:] for part in token.split("-") if part)
