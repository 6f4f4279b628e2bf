"""pi's v3 session JSONL: header check, strict parser, entry tree, usage sums, context measurement.

Everything here is stdlib only. `header`, `compaction` and `context` are imported eagerly; the typed
models (two dozen frozen dataclasses, some milliseconds to define) and the strict parser are loaded
on first use, so the gate ladder and `pidispatch key` / `store` stay cheap to import
(docs/cli.md#start-up-cost).
"""

from __future__ import annotations

import importlib
from typing import Any

from pidispatch.transcript.compaction import (
    EmptyCompactionScanner,
    compaction_summary_is_empty,
    transcript_has_empty_compaction,
)
from pidispatch.transcript.context import ContextUsage, context_usage
from pidispatch.transcript.header import (
    HEADER_READ_LIMIT,
    header_timestamp_ms,
    is_session_header,
    read_first_line,
)

_LAZY = {
    "Problem": "parser",
    "Transcript": "parser",
    "TranscriptError": "parser",
    "UsageTotals": "parser",
    "check_transcript": "parser",
    "parse_transcript": "parser",
    "torn_tail": "parser",
}

__all__ = [
    "HEADER_READ_LIMIT",
    "ContextUsage",
    "EmptyCompactionScanner",
    "Problem",
    "Transcript",
    "TranscriptError",
    "UsageTotals",
    "check_transcript",
    "compaction_summary_is_empty",
    "context_usage",
    "header_timestamp_ms",
    "is_session_header",
    "parse_transcript",
    "read_first_line",
    "torn_tail",
    "transcript_has_empty_compaction",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
