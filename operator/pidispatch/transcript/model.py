"""Typed models of pi's v3 session file (one JSON object per line).

Sources: docs/pi-behaviour.md#session-file-format, the real pi 0.73.1 samples, and pi's `session-manager.ts` /
`messages.ts` / pi-ai message types for the entry types plain `-p` runs do not produce
(`custom_message`, `branch_summary`, `context_edit`, `usage`, `custom`, `label`, `session_info`).

The models are frozen dataclasses; each field names the check that `strict.validate` runs on it
(`strict.py` says why this is not pydantic: the start-up cost of `pidispatch transcript check`).

Strictness, and where it is relaxed on purpose:

- Values are validated strictly (no "3" for 3, no true for 1). An integer is accepted where a
  float is declared (costs), and `version` 3 may be written 3.0 (JSON.parse cannot tell them
  apart); both as under pydantic's strict mode, which these models used before.
- **Envelopes** (the header and each entry's top-level fields) forbid unknown fields. They are pi's
  own file format, small and versioned; an unknown field there means a format this checker does not
  know, which is what `transcript check` exists to report. Optional fields that later pi versions
  add to an entry type (`usage` and `systemMessage` on `compaction`, `usage` on `branch_summary`, a
  null `firstKeptEntryId`) are declared, so files from those versions still pass.
- **Message payloads** (`message`, content blocks, `usage`) allow unknown fields and keep them in
  `extra_fields`: they are pi-ai's provider-facing types, which gain fields with providers
  (signatures on text/thinking blocks, diagnostics on assistant messages) without the session
  format changing.
- Message roles accepted in a `message` entry: `user`, `assistant`, `toolResult`, and also
  `bashExecution` (pi's `!command`) and `custom` (what v2 `hookMessage` became), which pi persists
  as message entries. `branchSummary` / `compactionSummary` exist only in rebuilt context, never on disk.
- Entry ids are non-empty strings; pi writes 8 hex characters but falls back to a full UUID on a
  collision, so the shape is not enforced. Timestamps must be ISO-8601 with a zone (what pi writes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pidispatch.transcript.strict import (
    Envelope,
    Payload,
    anything,
    boolean,
    integer,
    iso_timestamp,
    json_object,
    list_of,
    literal,
    nested,
    non_empty_string,
    non_negative_int,
    non_negative_number,
    nullable,
    optional,
    required,
    string,
    string_or_list_of,
    tagged,
)

# --- header -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionHeader(Envelope):
    """Line 1: `{"type":"session","version":3,"id",...}`; not part of the entry tree."""

    type: Literal["session"] = required(literal("session"))
    version: Literal[3] = required(literal(3))
    id: str = required(non_empty_string)
    timestamp: str = required(iso_timestamp)
    cwd: str = required(string)
    parentSession: str | None = optional(nullable(string))


# --- message payloads ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TextContent(Payload):
    type: Literal["text"] = required(literal("text"))
    text: str = required(string)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingContent(Payload):
    type: Literal["thinking"] = required(literal("thinking"))
    thinking: str = required(string)


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageContent(Payload):
    type: Literal["image"] = required(literal("image"))
    data: str = required(string)
    mimeType: str = required(string)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall(Payload):
    type: Literal["toolCall"] = required(literal("toolCall"))
    id: str = required(string)
    name: str = required(string)
    arguments: dict[str, Any] = required(json_object)


UserBlock = TextContent | ImageContent
AssistantBlock = TextContent | ThinkingContent | ToolCall
AnyBlock = TextContent | ThinkingContent | ImageContent | ToolCall

_user_block = tagged("type", {"text": TextContent, "image": ImageContent})
_assistant_block = tagged("type", {"text": TextContent, "thinking": ThinkingContent, "toolCall": ToolCall})
_any_block = tagged(
    "type", {"text": TextContent, "thinking": ThinkingContent, "image": ImageContent, "toolCall": ToolCall}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cost(Payload):
    input: float = required(non_negative_number)
    output: float = required(non_negative_number)
    cacheRead: float = required(non_negative_number)
    cacheWrite: float = required(non_negative_number)
    total: float = required(non_negative_number)


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage(Payload):
    """pi-ai usage; `totalTokens` is the context size after the reply (input + output + cache)."""

    input: int = required(non_negative_int)
    output: int = required(non_negative_int)
    cacheRead: int = required(non_negative_int)
    cacheWrite: int = required(non_negative_int)
    totalTokens: int = required(non_negative_int)
    cost: Cost = required(nested(Cost))


@dataclass(frozen=True, slots=True, kw_only=True)
class UserMessage(Payload):
    role: Literal["user"] = required(literal("user"))
    content: str | list[UserBlock] = required(string_or_list_of(_user_block))
    timestamp: int = required(non_negative_int)


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessage(Payload):
    role: Literal["assistant"] = required(literal("assistant"))
    content: list[AssistantBlock] = required(list_of(_assistant_block))
    api: str = required(string)
    provider: str = required(string)
    model: str = required(string)
    usage: Usage = required(nested(Usage))
    stopReason: Literal["stop", "length", "toolUse", "error", "aborted"] = required(
        literal("stop", "length", "toolUse", "error", "aborted")
    )
    timestamp: int = required(non_negative_int)
    responseId: str | None = optional(nullable(string))
    errorMessage: str | None = optional(nullable(string))


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultMessage(Payload):
    role: Literal["toolResult"] = required(literal("toolResult"))
    toolCallId: str = required(string)
    toolName: str = required(string)
    content: list[UserBlock] = required(list_of(_user_block))
    isError: bool = required(boolean)
    timestamp: int = required(non_negative_int)
    details: Any = optional(anything)


@dataclass(frozen=True, slots=True, kw_only=True)
class BashExecutionMessage(Payload):
    role: Literal["bashExecution"] = required(literal("bashExecution"))
    command: str = required(string)
    output: str = required(string)
    exitCode: int | None = optional(nullable(integer))
    cancelled: bool = required(boolean)
    truncated: bool = required(boolean)
    timestamp: int = required(non_negative_int)
    fullOutputPath: str | None = optional(nullable(string))
    excludeFromContext: bool | None = optional(nullable(boolean))


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomRoleMessage(Payload):
    role: Literal["custom"] = required(literal("custom"))
    customType: str = required(string)
    content: str | list[UserBlock] = required(string_or_list_of(_user_block))
    display: bool = required(boolean)
    timestamp: int = required(non_negative_int)
    details: Any = optional(anything)


Message = UserMessage | AssistantMessage | ToolResultMessage | BashExecutionMessage | CustomRoleMessage

_message = tagged(
    "role",
    {
        "user": UserMessage,
        "assistant": AssistantMessage,
        "toolResult": ToolResultMessage,
        "bashExecution": BashExecutionMessage,
        "custom": CustomRoleMessage,
    },
)


# --- entries ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Entry(Envelope):
    id: str = required(non_empty_string)
    parentId: str | None = required(nullable(non_empty_string))
    timestamp: str = required(iso_timestamp)


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageEntry(_Entry):
    type: Literal["message"] = required(literal("message"))
    message: Message = required(_message)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelChangeEntry(_Entry):
    type: Literal["model_change"] = required(literal("model_change"))
    provider: str = required(string)
    modelId: str = required(string)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingLevelChangeEntry(_Entry):
    type: Literal["thinking_level_change"] = required(literal("thinking_level_change"))
    thinkingLevel: str = required(string)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionEntry(_Entry):
    """`details` is `{readFiles, modifiedFiles}` when pi wrote it, anything when a hook did."""

    type: Literal["compaction"] = required(literal("compaction"))
    summary: str = required(string)
    firstKeptEntryId: str | None = required(nullable(non_empty_string))
    tokensBefore: int = required(non_negative_int)
    details: Any = optional(anything)
    fromHook: bool | None = optional(nullable(boolean))
    usage: Usage | None = optional(nullable(nested(Usage)))
    systemMessage: dict[str, Any] | None = optional(nullable(json_object))


@dataclass(frozen=True, slots=True, kw_only=True)
class BranchSummaryEntry(_Entry):
    type: Literal["branch_summary"] = required(literal("branch_summary"))
    fromId: str = required(string)
    summary: str = required(string)
    details: Any = optional(anything)
    fromHook: bool | None = optional(nullable(boolean))
    usage: Usage | None = optional(nullable(nested(Usage)))


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomEntry(_Entry):
    """Extension state; never part of the model's context."""

    type: Literal["custom"] = required(literal("custom"))
    customType: str = required(string)
    data: Any = optional(anything)


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomMessageEntry(_Entry):
    """Extension-injected message; part of the context as a `custom` role message."""

    type: Literal["custom_message"] = required(literal("custom_message"))
    customType: str = required(string)
    content: str | list[UserBlock] = required(string_or_list_of(_user_block))
    display: bool = required(boolean)
    details: Any = optional(anything)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextEditReplacement(Envelope):
    content: str | list[AnyBlock] = required(string_or_list_of(_any_block))


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextEditEntry(_Entry):
    """Append-only edit of an earlier entry's context contribution; null replacement omits it."""

    type: Literal["context_edit"] = required(literal("context_edit"))
    targetId: str = required(non_empty_string)
    replacement: ContextEditReplacement | None = required(nullable(nested(ContextEditReplacement)))


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelEntry(_Entry):
    """A bookmark on `targetId`; an absent label clears it."""

    type: Literal["label"] = required(literal("label"))
    targetId: str = required(non_empty_string)
    label: str | None = optional(nullable(string))


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionInfoEntry(_Entry):
    type: Literal["session_info"] = required(literal("session_info"))
    name: str | None = optional(nullable(string))


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageEntry(_Entry):
    """Model usage outside the conversation (e.g. cache warming); never part of the context."""

    type: Literal["usage"] = required(literal("usage"))
    kind: str = required(string)
    provider: str = required(string)
    model: str = required(string)
    usage: Usage = required(nested(Usage))
    note: str | None = optional(nullable(string))


Entry = (
    MessageEntry
    | ModelChangeEntry
    | ThinkingLevelChangeEntry
    | CompactionEntry
    | BranchSummaryEntry
    | CustomEntry
    | CustomMessageEntry
    | ContextEditEntry
    | LabelEntry
    | SessionInfoEntry
    | UsageEntry
)

ENTRY_MODELS: dict[str, type[_Entry]] = {
    "message": MessageEntry,
    "model_change": ModelChangeEntry,
    "thinking_level_change": ThinkingLevelChangeEntry,
    "compaction": CompactionEntry,
    "branch_summary": BranchSummaryEntry,
    "custom": CustomEntry,
    "custom_message": CustomMessageEntry,
    "context_edit": ContextEditEntry,
    "label": LabelEntry,
    "session_info": SessionInfoEntry,
    "usage": UsageEntry,
}
