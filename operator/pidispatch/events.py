"""Structured log events: one JSON object per line, with the store contract's event names and fields.

Events go through the ``pidispatch.events`` logger so the operator, the CLI and tests decide where
they land; each record also carries the fields as ``record.fields`` for programmatic checks.
Keys (hashes) may appear here; repository names, branches and tokens never do.

``logging`` is imported only when it is needed (docs/cli.md#start-up-cost): a ``pidispatch store`` command
in a process where nothing has loaded it writes its events to stderr itself, the very line its handler
would write (:func:`log_to_stderr`), and the logger and its handler are set up the moment anything loads
``logging`` or asks for :data:`logger`. In any other process (the operator, the services, pytest) ``logging``
is already loaded when this module is imported, and everything goes through the logger as it always has.
"""

from __future__ import annotations

import _thread
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging

    logger: logging.Logger

_INFO = 20  # logging.INFO, without importing logging
_NAME = "pidispatch.events"
# log_to_stderr's level while its handler is not installed yet: only in a process without ``logging``.
_stderr_level: int | None = None
_stderr_lock = _thread.allocate_lock()
_logger: logging.Logger | None = None


def _events_logger() -> logging.Logger:
    """The events logger, set up on first use: level INFO, and the CLI's handler if one is pending."""
    global _logger, _stderr_level
    if _logger is None:
        import logging

        _logger = logging.getLogger(_NAME)
        _logger.setLevel(logging.INFO)
    if _stderr_level is not None:
        level, _stderr_level = _stderr_level, None
        _install_stderr_handler(_logger, level)
    return _logger


def __getattr__(name: str) -> Any:
    if name == "logger":
        return _events_logger()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if "logging" in sys.modules:  # the logger as it always was, set up at import
    _events_logger()


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
    if "logging" not in sys.modules:
        # Nothing but the CLI's pending handler can receive it (no logging, so no other handler, filter or
        # capture): its line, written here, without loading logging to write it; else nothing (see above).
        if _stderr_level is not None and _INFO >= _stderr_level:
            with _stderr_lock:
                try:
                    sys.stderr.write(str(_JsonLine({"event": event, **fields})) + "\n")
                    sys.stderr.flush()
                except Exception:  # noqa: BLE001, S110 - as a logging handler: an event never fails the command
                    pass
        return
    logger = _events_logger()
    if logger.isEnabledFor(_INFO) and _received(logger):
        payload = {"event": event, **fields}
        logger.info("%s", _JsonLine(payload), extra={"fields": payload})


def _received(logger: logging.Logger) -> bool:
    """Whether an INFO record of :data:`logger` would reach a handler (or a filter of its own)."""
    import logging

    if logger.filters or logger.hasHandlers():
        return True
    last = logging.lastResort
    # No handler anywhere: logging offers the record to its last resort, or warns once when there is none.
    return last is None or logging.INFO >= last.level


def log_to_stderr(level: int = _INFO) -> None:
    """Send events to stderr as bare JSON lines (the CLI's setting; stdout stays machine output).

    Without ``logging`` loaded, the handler waits until something loads it (:func:`emit` writes its lines
    meanwhile); with it, it is installed now.
    """
    global _stderr_level
    if _logger is None and "logging" not in sys.modules:
        _stderr_level = level
        return
    _install_stderr_handler(_events_logger(), level)


def _install_stderr_handler(logger: logging.Logger, level: int) -> None:
    import logging

    if any(getattr(h, "_pidispatch", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler._pidispatch = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def _json_line(record: logging.LogRecord) -> str:
    """Every log record as one JSON line: events as their own object, anything else as level/logger/message."""
    fields = getattr(record, "fields", None)
    if fields is not None:
        return json.dumps(fields, separators=(",", ":"), default=str)
    return json.dumps({"level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()},
                      separators=(",", ":"))


def _JsonLinesFormatter() -> logging.Formatter:  # noqa: N802 - a class, defined once logging is loaded
    import logging

    class JsonLinesFormatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return _json_line(record)

    return JsonLinesFormatter()


def log_services_as_json(level: int = _INFO, quiet: tuple[str, ...] = ("urllib3",)) -> None:
    """The long-running services' logging (operator, receiver): all of it JSON lines on stderr.

    The CLI's own events handler is removed so each event is printed once, by the root handler.
    """
    import logging

    logger = _events_logger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLinesFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for own in [h for h in logger.handlers if getattr(h, "_pidispatch", False)]:
        logger.removeHandler(own)
    logger.propagate = True
    for name in quiet:
        logging.getLogger(name).setLevel(logging.WARNING)
