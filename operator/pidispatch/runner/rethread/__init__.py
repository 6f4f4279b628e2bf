"""Rethreading in the job (docs/architecture.md#rethreading): pack a handoff at the end, unpack one at the start.

**Pack.** After pi's run, when the conversation's measured context use is at or above
``PI_SESSION_RETHREAD_PCT`` (default 70, 0 = never), the runner continues the same session with one
pack turn: pi is started again with the handoff tool (``handoff.ts``, loaded by ``-e``) as its only
tool, and the agent writes its letter and ledger entry through one call. If it does not, a side call
(``pi -p --no-session --no-tools``, the same model) writes them from the transcript, marked as a
summary. Either way the result is ``/session/handoff.json``, which the operator validates and renders
beside the transcript when the job is promoted (``store/handoff.py``).

**Unpack.** When the operator staged a letter (the gates refused for a lineage reason,
``PI_SESSION_RETHREAD=<reason>``), the session file is given a header whose ``parentSession`` names
the old session, and the first message carries the letter, the ledger and the new event and asks for a
three-line readback. A job that unpacked and was already over the bound right after its readback does
not pack again: the handoff would only copy itself forward (no loop).

**Prompts** are Markdown templates beside this file, overridable per repository by
``.pi/rethread/{pack,unpack,summary}.md`` in the checked-out commit: read from git by object id (a
regular blob, at most 16 KiB, UTF-8), never from the working tree and never executed.

This module is the package's face: ``templates.py`` (the prompts), ``unpacking.py`` (the letter read and the new
session's header), ``packing.py`` (the pack turn and the handoff written), ``summary.py`` (the side call's
transcript and its answer read back).
"""

from __future__ import annotations

from pidispatch.runner.rethread.packing import (
    EXTENSION,
    SIDE_CALL_TIMEOUT_S,
    TOOL,
    Packed,
    discard_handoff,
    extension_path,
    pack,
    pack_command,
    should_pack,
)
from pidispatch.runner.rethread.summary import (
    TOOL_OUTPUT_CHARS,
    TRANSCRIPT_FOR_SUMMARY_CHARS,
    parse_summary,
    summary_command,
    transcript_text,
)
from pidispatch.runner.rethread.templates import (
    TEMPLATE_MAX_BYTES,
    TEMPLATES,
    default_template,
    fill,
    repository_template,
    template,
)
from pidispatch.runner.rethread.unpacking import (
    Unpack,
    new_session_header,
    parent_of,
    read_unpack,
    unpack_prompt,
    uuid7,
)

__all__ = [
    "EXTENSION", "SIDE_CALL_TIMEOUT_S", "TEMPLATES", "TEMPLATE_MAX_BYTES", "TOOL", "TOOL_OUTPUT_CHARS",
    "TRANSCRIPT_FOR_SUMMARY_CHARS", "Packed", "Unpack", "default_template", "discard_handoff", "extension_path",
    "fill", "new_session_header", "pack", "pack_command", "parent_of", "parse_summary", "read_unpack",
    "repository_template", "should_pack", "summary_command", "template", "transcript_text", "unpack_prompt", "uuid7",
]
