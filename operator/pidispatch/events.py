"""Structured log events: one JSON object per line, with the spec's event names and fields.

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


def emit(event: str, **fields: Any) -> None:
    """Log one event as a JSON line (``{"event": ..., **fields}``)."""
    payload = {"event": event, **fields}
    logger.info(json.dumps(payload, separators=(",", ":"), default=str), extra={"fields": payload})


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
