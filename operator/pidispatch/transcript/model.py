"""Typed models of pi's v3 session file (one JSON object per line).

Sources: pi-cli-behaviour.md §4, the real pi 0.73.1 samples, and pi's `session-manager.ts` /
`messages.ts` / pi-ai message types for the entry types plain `-p` runs do not produce
(`custom_message`, `branch_summary`, `context_edit`, `usage`, `custom`, `label`, `session_info`).

Strictness, and where it is relaxed on purpose:

- Values are validated strictly (no "3" for 3, no true for 1).
- **Envelopes** (the header and each entry's top-level fields) forbid unknown fields. They are pi's
  own file format, small and versioned; an unknown field there means a format this checker does not
  know, which is what `transcript check` exists to report. Optional fields that later pi versions
  add to an entry type (`usage` and `systemMessage` on `compaction`, `usage` on `branch_summary`, a
  null `firstKeptEntryId`) are declared, so files from those versions still pass.
- **Message payloads** (`message`, content blocks, `usage`) allow unknown fields: they are pi-ai's
  provider-facing types, which gain fields with providers (signatures on text/thinking blocks,
  diagnostics on assistant messages) without the session format changing.
- Message roles accepted in a `message` entry: `user`, `assistant`, `toolResult`, and also
  `bashExecution` (pi's `!command`) and `custom` (what v2 `hookMessage` became), which pi persists
  as message entries. `branchSummary` / `compactionSummary` exist only in rebuilt context, never on disk.
- Entry ids are non-empty strings; pi writes 8 hex characters but falls back to a full UUID on a
  collision, so the shape is not enforced. Timestamps must be ISO-8601 with a zone (what pi writes).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from pidispatch.transcript.header import parse_iso_timestamp_ms


def _iso_timestamp(value: str) -> str:
    if parse_iso_timestamp_ms(value) is None:
        raise ValueError("not an ISO-8601 timestamp with Z or an offset")
    return value


IsoTimestamp = Annotated[str, AfterValidator(_iso_timestamp)]
NonNegativeInt = Annotated[int, Field(ge=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
EntryId = Annotated[str, Field(min_length=1)]


class _Envelope(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class _Payload(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


# --- header -------------------------------------------------------------------------------------


class SessionHeader(_Envelope):
    """Line 1: `{"type":"session","version":3,"id",...}`; not part of the entry tree."""

    type: Literal["session"]
    version: Literal[3]
    id: Annotated[str, Field(min_length=1)]
    timestamp: IsoTimestamp
    cwd: str
    parentSession: str | None = None


# --- message payloads ---------------------------------------------------------------------------


class TextContent(_Payload):
    type: Literal["text"]
    text: str


class ThinkingContent(_Payload):
    type: Literal["thinking"]
    thinking: str


class ImageContent(_Payload):
    type: Literal["image"]
    data: str
    mimeType: str


class ToolCall(_Payload):
    type: Literal["toolCall"]
    id: str
    name: str
    arguments: dict[str, Any]


UserBlock = Annotated[TextContent | ImageContent, Field(discriminator="type")]
AssistantBlock = Annotated[TextContent | ThinkingContent | ToolCall, Field(discriminator="type")]
AnyBlock = Annotated[TextContent | ThinkingContent | ImageContent | ToolCall, Field(discriminator="type")]


class Cost(_Payload):
    input: NonNegativeFloat
    output: NonNegativeFloat
    cacheRead: NonNegativeFloat
    cacheWrite: NonNegativeFloat
    total: NonNegativeFloat


class Usage(_Payload):
    """pi-ai usage; `totalTokens` is the context size after the reply (input + output + cache)."""

    input: NonNegativeInt
    output: NonNegativeInt
    cacheRead: NonNegativeInt
    cacheWrite: NonNegativeInt
    totalTokens: NonNegativeInt
    cost: Cost


class UserMessage(_Payload):
    role: Literal["user"]
    content: str | list[UserBlock]
    timestamp: NonNegativeInt


class AssistantMessage(_Payload):
    role: Literal["assistant"]
    content: list[AssistantBlock]
    api: str
    provider: str
    model: str
    usage: Usage
    stopReason: Literal["stop", "length", "toolUse", "error", "aborted"]
    timestamp: NonNegativeInt
    responseId: str | None = None
    errorMessage: str | None = None


class ToolResultMessage(_Payload):
    role: Literal["toolResult"]
    toolCallId: str
    toolName: str
    content: list[UserBlock]
    isError: bool
    timestamp: NonNegativeInt
    details: Any = None


class BashExecutionMessage(_Payload):
    role: Literal["bashExecution"]
    command: str
    output: str
    exitCode: int | None = None
    cancelled: bool
    truncated: bool
    timestamp: NonNegativeInt
    fullOutputPath: str | None = None
    excludeFromContext: bool | None = None


class CustomRoleMessage(_Payload):
    role: Literal["custom"]
    customType: str
    content: str | list[UserBlock]
    display: bool
    timestamp: NonNegativeInt
    details: Any = None


Message = Annotated[
    UserMessage | AssistantMessage | ToolResultMessage | BashExecutionMessage | CustomRoleMessage,
    Field(discriminator="role"),
]


# --- entries ------------------------------------------------------------------------------------


class _Entry(_Envelope):
    id: EntryId
    parentId: EntryId | None
    timestamp: IsoTimestamp


class MessageEntry(_Entry):
    type: Literal["message"]
    message: Message


class ModelChangeEntry(_Entry):
    type: Literal["model_change"]
    provider: str
    modelId: str


class ThinkingLevelChangeEntry(_Entry):
    type: Literal["thinking_level_change"]
    thinkingLevel: str


class CompactionEntry(_Entry):
    """`details` is `{readFiles, modifiedFiles}` when pi wrote it, anything when a hook did."""

    type: Literal["compaction"]
    summary: str
    firstKeptEntryId: EntryId | None
    tokensBefore: NonNegativeInt
    details: Any = None
    fromHook: bool | None = None
    usage: Usage | None = None
    systemMessage: dict[str, Any] | None = None


class BranchSummaryEntry(_Entry):
    type: Literal["branch_summary"]
    fromId: str
    summary: str
    details: Any = None
    fromHook: bool | None = None
    usage: Usage | None = None


class CustomEntry(_Entry):
    """Extension state; never part of the model's context."""

    type: Literal["custom"]
    customType: str
    data: Any = None


class CustomMessageEntry(_Entry):
    """Extension-injected message; part of the context as a `custom` role message."""

    type: Literal["custom_message"]
    customType: str
    content: str | list[UserBlock]
    display: bool
    details: Any = None


class ContextEditReplacement(_Envelope):
    content: str | list[AnyBlock]


class ContextEditEntry(_Entry):
    """Append-only edit of an earlier entry's context contribution; null replacement omits it."""

    type: Literal["context_edit"]
    targetId: EntryId
    replacement: ContextEditReplacement | None


class LabelEntry(_Entry):
    """A bookmark on `targetId`; an absent label clears it."""

    type: Literal["label"]
    targetId: EntryId
    label: str | None = None


class SessionInfoEntry(_Entry):
    type: Literal["session_info"]
    name: str | None = None


class UsageEntry(_Entry):
    """Model usage outside the conversation (e.g. cache warming); never part of the context."""

    type: Literal["usage"]
    kind: str
    provider: str
    model: str
    usage: Usage
    note: str | None = None


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
