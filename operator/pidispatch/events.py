"""Structured log events: one JSON object per line, with the store contract's event names and fields.

Events go through the ``pidispatch.events`` logger so the operator, the CLI and tests decide where
they land; each record also carries the fields as ``record.fields`` for programmatic checks.
Keys (hashes) may appear here; repository names, branches and tokens never do.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

logger = logging.getLogger("pidispatch.events")
logger.setLevel(logging.INFO)


class _JsonLine:
    """The record's message, serialised only if a handler asks for it (JsonLinesFormatter uses the fields)."""

    __slots__ = ("payload",)

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload

    def __str__(self) -> str:
        return json.dumps(self.payload, separators=(",", ":"), default=str)


def emit(event: str, **fields: Any) -> None:
    """Log one event as a JSON line (``{"event": ..., **fields}``).

    Nothing is built when nothing would receive it: with no handler on the way to the root, ``logging``
    drops an INFO record (its last-resort handler takes warnings and above), after building it in full
    (caller lookup, pid, thread, time). The operator and the CLI configure handlers, so there every
    event is built and written as before; a process that logs nowhere no longer pays for it.
    """
    if logger.isEnabledFor(logging.INFO) and _received():
        payload = {"event": event, **fields}
        logger.info("%s", _JsonLine(payload), extra={"fields": payload})


def _received() -> bool:
    """Whether an INFO record of :data:`logger` would reach a handler (or a filter of its own)."""
    if logger.filters or logger.hasHandlers():
        return True
    last = logging.lastResort
    # No handler anywhere: logging offers the record to its last resort, or warns once when there is none.
    return last is None or logging.INFO >= last.level


def log_to_stderr(level: int = logging.INFO) -> None:
    """Send events to stderr as bare JSON lines (the CLI's setting; stdout stays machine output)."""
    if any(getattr(h, "_pidispatch", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler._pidispatch = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


class JsonLinesFormatter(logging.Formatter):
    """Every log record as one JSON line: events as their own object, anything else as level/logger/message."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        if fields is not None:
            return json.dumps(fields, separators=(",", ":"), default=str)
        return json.dumps({"level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()},
                          separators=(",", ":"))


def log_services_as_json(level: int = logging.INFO, quiet: tuple[str, ...] = ("urllib3",)) -> None:
    """The long-running services' logging (operator, receiver): all of it JSON lines on stderr.

    The CLI's own events handler is removed so each event is printed once, by the root handler.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLinesFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for own in [h for h in logger.handlers if getattr(h, "_pidispatch", False)]:
        logger.removeHandler(own)
    logger.propagate = True
    for name in quiet:
        logging.getLogger(name).setLevel(logging.WARNING)
