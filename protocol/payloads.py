"""Typed payload (``data``) models, one per event type in the catalog.

The bus does not validate payloads on its hot path: publishers build plain
dicts. These models are the written contract, used by tests, by clients that
want typed access, and by the bus's debug mode (``EventBus(validate_payloads=True)``
or ``TOOLRELAY_EVENT_DEBUG=1``), which checks every published payload through
``eventbus.validation``.

Payloads are extensible: unknown keys are kept (``extra="allow"``), so a
publisher may add fields without breaking older clients. Required fields are
required; a field typed ``X | None`` without a default must be present and may
be null, so clients can rely on the key.

This package depends on nothing else of ours, so the value sets of
``side_effects``, ``rating`` and ``error_class`` are restated here as literals;
a test keeps them equal to the dispatcher's enums.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from protocol.catalog import EventType

SideEffectsName = Literal["none", "read", "write", "execute", "network"]
CallRatingName = Literal["safe", "dev", "dangerous"]
ErrorClassName = Literal[
    "not_found",
    "validation_error",
    "permission_denied",
    "user_denied",
    "timeout",
    "execution_error",
    "cancelled",
    "confirmation_timeout",
]
DecisionName = Literal["allow", "deny", "timeout", "cancelled"]
ScopeName = Literal["once", "session"]
PreviewKind = Literal["diff", "command", "text"]

NonEmpty = Annotated[str, Field(min_length=1)]
DurationMs = Annotated[float, Field(ge=0)]


class Payload(BaseModel):
    """Base of every payload model: extra keys kept, instances immutable."""

    model_config = ConfigDict(extra="allow", frozen=True)


class _Part(BaseModel):
    """A nested object inside a payload; extensible like payloads."""

    model_config = ConfigDict(extra="allow", frozen=True)


# -- session and presence --------------------------------------------------------


class SessionCreated(Payload):
    """A session exists; ``workspace`` is its root directory."""

    workspace: str


class SessionDeleted(Payload):
    """The session is gone; its events stay in the log until pruned."""

    reason: str | None = None


class ClientAttached(Payload):
    """A client opened the session's event stream (presence)."""

    client_id: NonEmpty
    client_name: str


class ClientDetached(Payload):
    """A client's event stream closed (it left, or was cut off)."""

    client_id: NonEmpty
    client_name: str
    reason: str | None = None


# -- turns and messages --------------------------------------------------------------


class Usage(_Part):
    """Token counts a provider reported for a turn."""

    input_tokens: Annotated[int, Field(ge=0)] = 0
    output_tokens: Annotated[int, Field(ge=0)] = 0


class TurnStarted(Payload):
    """A turn began. ``source`` says what drives it: ``message`` or ``tool_uses``."""

    source: str | None = None


class TurnCompleted(Payload):
    """A turn ended normally; ``usage`` is null when no model was called."""

    usage: Usage | None


class TurnFailed(Payload):
    """A turn ended on an error outside any single tool call."""

    reason: str


class TurnCancelled(Payload):
    """A turn was cancelled (by a client, or by the session being deleted)."""

    reason: str


class MessageDelta(Payload):
    """A fragment of assistant text as the model streams it."""

    text: str
    index: Annotated[int, Field(ge=0)] | None = None


class ModelRetry(Payload):
    """A model call failed with a retryable error; the adapter tries again after
    ``delay_s`` seconds. ``attempt`` counts the failed attempts so far (1, 2, ...)."""

    attempt: Annotated[int, Field(ge=1)]
    error_kind: NonEmpty
    delay_s: Annotated[float, Field(ge=0)]
    provider: str | None = None


class BlockJson(_Part):
    """A canonical content block as JSON; only its ``type`` is checked here."""

    type: Literal["text", "image", "tool_use", "tool_result"]


class ResultBlockJson(_Part):
    """A block inside a tool result: text or image."""

    type: Literal["text", "image"]


class MessageJson(_Part):
    """A canonical message as JSON (see protocol.canonical.Message)."""

    role: Literal["user", "assistant", "tool", "system"]
    content: list[BlockJson]


class MessageCompleted(Payload):
    """A whole message was appended to the conversation."""

    message: MessageJson


# -- tools -------------------------------------------------------------------------


class ToolCalled(Payload):
    """The dispatcher is about to run the tool (after validation and confirmation)."""

    tool_use_id: NonEmpty
    tool_name: NonEmpty
    side_effects: SideEffectsName
    input: dict[str, Any]
    rating: CallRatingName | None


class InputError(_Part):
    """One schema violation: the JSON pointer of the bad value and why."""

    path: str
    message: str


class ToolInputInvalid(Payload):
    """The tool's input failed its schema; the tool did not run."""

    tool_use_id: NonEmpty
    tool_name: NonEmpty
    errors: Annotated[list[InputError], Field(min_length=1)]


class Preview(_Part):
    """What a call would do: a diff, a command line, or plain text."""

    kind: PreviewKind
    text: str


def _check_rfc3339(value: str) -> str:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"not an RFC 3339 timestamp: {value!r}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no UTC offset")
    return value


class ToolConfirmationRequested(Payload):
    """A call waits for a person's decision, until ``expires_at`` (RFC 3339)."""

    request_id: NonEmpty
    tool_use_id: NonEmpty
    tool_name: NonEmpty
    side_effects: SideEffectsName
    rating: CallRatingName | None
    input_summary: str
    projected_modifications: list[str]
    preview: Preview
    expires_at: str

    _expires_at_format = field_validator("expires_at")(_check_rfc3339)


class ToolConfirmationResolved(Payload):
    """The first answer to a confirmation request won; ``message`` goes to the model."""

    request_id: NonEmpty
    tool_use_id: NonEmpty
    decision: DecisionName
    scope: ScopeName
    resolved_by: str
    message: str | None


class ToolOutputDelta(Payload):
    """A chunk of output a running tool produced on ``stream`` (e.g. stdout)."""

    tool_use_id: NonEmpty
    stream: NonEmpty
    text: str


class ToolCompleted(Payload):
    """The tool returned a result; ``content`` holds its text/image blocks."""

    tool_use_id: NonEmpty
    tool_name: NonEmpty
    duration_ms: DurationMs
    content: list[ResultBlockJson]
    files_modified: list[str] | None
    command_executed: str | None
    metadata: dict[str, Any]


class ToolFailed(Payload):
    """The call ended in an error of one of the eight classes."""

    tool_use_id: NonEmpty
    tool_name: NonEmpty
    error_class: ErrorClassName
    message: str
    duration_ms: DurationMs
    partial_output: str | None


class ToolsChanged(Payload):
    """The tool list changed at run time (an MCP server's tools came or went);
    ``added``/``removed`` are tool names, ``source`` says where the change came from."""

    added: list[str]
    removed: list[str]
    source: str


class MemoryChanged(Payload):
    """A memory was added, replaced or deleted (by a tool or ``DELETE /memory``);
    ``preview`` is the start of its content."""

    memory_id: NonEmpty
    workspace: str
    owner: str
    tags: list[str]
    preview: str
    previous_preview: str | None = None  # memory.replaced: the content before
    deleted_by: str | None = None  # memory.deleted: "tool" or the token's name


class MemoryConsolidated(Payload):
    """memory_consolidate merged memories: per merge the kept id, the merged
    (deleted) ids and why (``identical`` or ``near_duplicate``)."""

    workspace: str
    owner: str
    merges: list[dict[str, Any]]
    removed: int


PAYLOAD_MODELS: Mapping[EventType, type[Payload]] = {
    EventType.SESSION_CREATED: SessionCreated,
    EventType.SESSION_DELETED: SessionDeleted,
    EventType.CLIENT_ATTACHED: ClientAttached,
    EventType.CLIENT_DETACHED: ClientDetached,
    EventType.TURN_STARTED: TurnStarted,
    EventType.TURN_COMPLETED: TurnCompleted,
    EventType.TURN_FAILED: TurnFailed,
    EventType.TURN_CANCELLED: TurnCancelled,
    EventType.MESSAGE_DELTA: MessageDelta,
    EventType.MESSAGE_COMPLETED: MessageCompleted,
    EventType.MODEL_RETRY: ModelRetry,
    EventType.TOOL_CALLED: ToolCalled,
    EventType.TOOL_INPUT_INVALID: ToolInputInvalid,
    EventType.TOOL_CONFIRMATION_REQUESTED: ToolConfirmationRequested,
    EventType.TOOL_CONFIRMATION_RESOLVED: ToolConfirmationResolved,
    EventType.TOOL_OUTPUT_DELTA: ToolOutputDelta,
    EventType.TOOL_COMPLETED: ToolCompleted,
    EventType.TOOL_FAILED: ToolFailed,
    EventType.TOOLS_CHANGED: ToolsChanged,
    EventType.MEMORY_ADDED: MemoryChanged,
    EventType.MEMORY_REPLACED: MemoryChanged,
    EventType.MEMORY_DELETED: MemoryChanged,
    EventType.MEMORY_CONSOLIDATED: MemoryConsolidated,
}
