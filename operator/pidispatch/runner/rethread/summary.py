"""The summary side call: the conversation as plain text for it, its command line, and its Markdown read back
as a handoff (writer ``summary``) when the agent's pack turn wrote none.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pidispatch.store.handoff import ENTRY_FIELDS, LETTER_FIELDS, TRUST_FIELDS

TRANSCRIPT_FOR_SUMMARY_CHARS = 48 * 1024
TOOL_OUTPUT_CHARS = 600


def summary_command(pi_bin: str, model: str | None, prompt: str, session_file: str) -> list[str]:
    """The side call: no tools, no extensions; pi prints the answer on stdout. Its own scratch session file
    (not the job's) is written only so that the call's usage can be read and billed to the job."""
    command = [pi_bin, "-p", "--session", session_file, "--no-extensions", "--no-tools", "--no-context-files"]
    if model is not None:
        command += ["--model", model]
    return [*command, prompt]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") == "toolCall":
            parts.append(f"[tool call {block.get('name')}: {json.dumps(block.get('arguments'))[:TOOL_OUTPUT_CHARS]}]")
    return "\n".join(parts)


def transcript_text(final: bytes, limit: int = TRANSCRIPT_FOR_SUMMARY_CHARS) -> str:
    """The conversation as plain text for the summary call: user, assistant and tool lines, the newest kept."""
    lines: list[str] = []
    for raw in final.split(b"\n"):
        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        message = entry.get("message") if isinstance(entry, dict) and entry.get("type") == "message" else None
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        text = _text_of(message.get("content"))
        if role == "toolResult":
            text = text[:TOOL_OUTPUT_CHARS]
        if text.strip():
            lines.append(f"[{role}]\n{text.strip()}")
    joined = "\n\n".join(lines)
    return joined if len(joined) <= limit else "[… earlier turns cut …]\n" + joined[-limit:]


_SUMMARY_HEADINGS = {title.split(":")[0].lower(): ("letter", name) for name, title in LETTER_FIELDS}
_SUMMARY_HEADINGS.update({title.lower(): ("entry", name) for name, title in (*TRUST_FIELDS, *ENTRY_FIELDS)})


def parse_summary(text: str) -> dict[str, Any] | None:
    """The side call's Markdown as a handoff object (writer ``summary``), or ``None`` when it has no sections."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.split("\n"):
        m = re.match(r"#{1,3}\s+(.+?)\s*$", line)
        if m:
            current = m.group(1).strip().rstrip(":").lower()
            sections.setdefault(current, [])
        elif current is not None:
            sections[current].append(line)
    if not sections:
        return None
    status_words = " ".join(sections.get("status", [])).lower().split()
    status = next((w.strip(".,") for w in status_words if w.strip(".,") in ("landed", "partial", "blocked")),
                  "partial")
    handoff: dict[str, Any] = {"writer": "summary", "status": status, "letter": {}, "entry": {}}
    found = 0
    for heading, lines in sections.items():
        where = _SUMMARY_HEADINGS.get(heading)
        body = "\n".join(lines).strip()
        if where is not None and body:
            handoff[where[0]][where[1]] = body
            found += 1
    return handoff if found else None
