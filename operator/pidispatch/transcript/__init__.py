"""pi's v3 session JSONL: header check, strict parser, entry tree, usage sums, context measurement.

Everything here is stdlib only, and every name below is loaded on first use (PEP 562): the typed models
(two dozen frozen dataclasses, some milliseconds to define) and the strict parser, and also `header`,
`compaction` and `context`, so the gate ladder importing `header` alone, and `pidispatch key` / `store`, stay
cheap to import (docs/cli.md#start-up-cost).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from pidispatch.transcript.parser import (
        Problem,
        Transcript,
        TranscriptError,
        UsageTotals,
        check_transcript,
        parse_transcript,
        torn_tail,
    )

_LAZY = {
    "EmptyCompactionScanner": "compaction",
    "compaction_summary_is_empty": "compaction",
    "transcript_has_empty_compaction": "compaction",
    "ContextUsage": "context",
    "context_usage": "context",
    "HEADER_READ_LIMIT": "header",
    "header_timestamp_ms": "header",
    "is_session_header": "header",
    "read_first_line": "header",
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
