"""Typed payload (``data``) models, one per event type in the catalog.

One set of types, used end to end: publishers build them and hand them to
``EventBus.emit`` (each class names its event type in ``event_type``), the
bus encodes them straight to the log and the WebSocket, the Python SDK
parses ``data`` with them, and the bus's debug mode
(``EventBus(validate_payloads=True)`` or ``TOOLRELAY_EVENT_DEBUG=1``) checks
every published payload through ``eventbus.validation``.

Building a payload validates it (``python -m benchmarks.event_encoding``
measures what that costs; ``model_construct`` measured no faster, so the
class call is the one way to build one). Encoding reads the fields directly
(no ``model_dump``).

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
from typing import Annotated, Any, ClassVar, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Field, field_validator, with_config
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

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
    """Base of every payload model: extra keys kept, instances immutable.

    Each concrete class sets ``event_type``, the catalog type it is the data of.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    event_type: ClassVar[EventType]


class _Part(BaseModel):
    """A nested object inside a payload; extensible like payloads."""

    model_config = ConfigDict(extra="allow", frozen=True)


# -- session and presence --------------------------------------------------------


class SessionCreated(Payload):
    """A session exists; ``workspace`` is its root directory."""

    event_type = EventType.SESSION_CREATED

    workspace: str


class SessionDeleted(Payload):
    """The session is gone; its events stay in the log until pruned."""

    event_type = EventType.SESSION_DELETED

    reason: str | None = None
    deleted_by: str | None = None  # the client that deleted it


class ClientAttached(Payload):
    """A client opened the session's event stream (presence)."""

    event_type = EventType.CLIENT_ATTACHED

    client_id: NonEmpty
    client_name: str


class ClientDetached(Payload):
    """A client's event stream closed (it left, or was cut off)."""

    event_type = EventType.CLIENT_DETACHED

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

    event_type = EventType.TURN_STARTED

    source: str | None = None
    number: int | None = None
    created_by: str | None = None
    tool_use_ids: list[str] | None = None  # source "tool_uses": the calls it carries


class TurnEnded(Payload):
    """What every turn end may say: ``reason`` (null for a completed turn) and
    ``message`` (what went wrong), so a client can read both on any end."""

    reason: str | None = None
    message: str | None = None


class TurnCompleted(TurnEnded):
    """A turn ended normally; ``usage`` is null when no model was called."""

    event_type = EventType.TURN_COMPLETED

    usage: Usage | None
    results: int | None = None
    errors: int | None = None
    # A dry-run turn's planned actions: [{tool_use_id, tool_name, summary, input}].
    plan: list[dict[str, Any]] | None = None


class TurnFailed(TurnEnded):
    """A turn ended on an error outside any single tool call."""

    event_type = EventType.TURN_FAILED

    reason: str
    usage: Usage | None = None


class TurnCancelled(TurnEnded):
    """A turn was cancelled (by a client, or by the session being deleted)."""

    event_type = EventType.TURN_CANCELLED

    reason: str
    cancelled_by: str | None = None
    usage: Usage | None = None


class MessageDelta(Payload):
    """A fragment of assistant text as the model streams it."""

    event_type = EventType.MESSAGE_DELTA

    text: str
    index: Annotated[int, Field(ge=0)] | None = None
    step: int | None = None


class ModelRetry(Payload):
    """A model call failed with a retryable error; the adapter tries again after
    ``delay_s`` seconds. ``attempt`` counts the failed attempts so far (1, 2, ...)."""

    event_type = EventType.MODEL_RETRY

    attempt: Annotated[int, Field(ge=1)]
    error_kind: NonEmpty
    delay_s: Annotated[float, Field(ge=0)]
    provider: str | None = None
    status_code: int | None = None  # the provider's HTTP status, when it answered
    step: int | None = None  # the agent loop's step whose model call failed


# JSON-shaped parts stay plain dicts (TypedDicts, checked when validated, extra
# keys kept): readers index them like the JSON they are, and encoding them
# needs no conversion.


@with_config(ConfigDict(extra="allow"))
class BlockJson(TypedDict):
    """A canonical content block as JSON; only its ``type`` is checked here.

    The other keys are declared so that publishers' literals type-check."""

    type: Literal["text", "image", "tool_use", "tool_result"]
    text: NotRequired[str]
    media_type: NotRequired[str]
    data: NotRequired[str]
    id: NotRequired[str]
    name: NotRequired[str]
    input: NotRequired[dict[str, Any]]
    tool_use_id: NotRequired[str]
    content: NotRequired[list[Any]]
    is_error: NotRequired[bool]


@with_config(ConfigDict(extra="allow"))
class ResultBlockJson(TypedDict):
    """A block inside a tool result: text or image."""

    type: Literal["text", "image"]
    text: NotRequired[str]
    media_type: NotRequired[str]
    data: NotRequired[str]


@with_config(ConfigDict(extra="allow"))
class MessageJson(TypedDict):
    """A canonical message as JSON (see protocol.canonical.Message)."""

    role: Literal["user", "assistant", "tool", "system"]
    content: list[BlockJson]


class MessageCompleted(Payload):
    """A whole message was appended to the conversation."""

    event_type = EventType.MESSAGE_COMPLETED

    message: MessageJson


# -- tools -------------------------------------------------------------------------


class ToolCalled(Payload):
    """The dispatcher is about to run the tool (after validation and confirmation)."""

    event_type = EventType.TOOL_CALLED

    tool_use_id: NonEmpty
    tool_name: NonEmpty
    side_effects: SideEffectsName
    input: dict[str, Any]
    rating: CallRatingName | None


@with_config(ConfigDict(extra="allow"))
class InputError(TypedDict):
    """One schema violation: the JSON pointer of the bad value and why."""

    path: str
    message: str


class ToolInputInvalid(Payload):
    """The tool's input failed its schema; the tool did not run."""

    event_type = EventType.TOOL_INPUT_INVALID

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

    event_type = EventType.TOOL_CONFIRMATION_REQUESTED

    request_id: NonEmpty
    tool_use_id: NonEmpty
    tool_name: NonEmpty
    side_effects: SideEffectsName
    rating: CallRatingName | None
    input_summary: str
    projected_modifications: list[str]
    preview: Preview
    expires_at: str
    # What "allow for session" would grant ("allow 'npm test' for this session ...").
    scope_text: str = ""

    _expires_at_format = field_validator("expires_at")(_check_rfc3339)


class ToolConfirmationResolved(Payload):
    """The first answer to a confirmation request won; ``message`` goes to the model."""

    event_type = EventType.TOOL_CONFIRMATION_RESOLVED

    request_id: NonEmpty
    tool_use_id: NonEmpty
    decision: DecisionName
    scope: ScopeName
    # The client's chosen name; then the configured name of the token that
    # answered (None when the server settled it: timeout, cancel).
    resolved_by: str
    message: str | None
    resolved_by_token: str | None = None


class ToolOutputDelta(Payload):
    """A chunk of output a running tool produced on ``stream`` (e.g. stdout)."""

    event_type = EventType.TOOL_OUTPUT_DELTA

    tool_use_id: NonEmpty
    stream: NonEmpty
    text: str


class ToolCompleted(Payload):
    """The tool returned a result; ``content`` holds its text/image blocks."""

    event_type = EventType.TOOL_COMPLETED

    tool_use_id: NonEmpty
    tool_name: NonEmpty
    duration_ms: DurationMs
    content: list[ResultBlockJson]
    files_modified: list[str] | None
    command_executed: str | None
    metadata: dict[str, Any]
    # ``content`` was cut to the session's max_event_output_bytes; ``output_bytes``
    # is the full size (UTF-8 text plus base64 image data).
    truncated: bool = False
    output_bytes: Annotated[int, Field(ge=0)] | None = None
    # The tool's structured output (ToolOutput.data), checked against the
    # definition's output_schema when it has one; null when the tool gave none
    # or when its JSON exceeds max_event_output_bytes: then ``structured_truncated``
    # is true and ``structured_bytes`` its encoded size (the model's result keeps it).
    structured: dict[str, Any] | None = None
    structured_truncated: bool = False
    structured_bytes: Annotated[int, Field(ge=0)] | None = None


@with_config(ConfigDict(extra="allow"))
class BlockedBy(TypedDict):
    """What refused a call in the execution pipeline: a guardrail rule or a
    hook. A TypedDict: the dispatcher hands it over as the plain dict it holds."""

    kind: Literal["guardrail", "hook"]
    name: NonEmpty


class ToolFailed(Payload):
    """The call ended in an error of one of the eight classes."""

    event_type = EventType.TOOL_FAILED

    tool_use_id: NonEmpty
    tool_name: NonEmpty
    error_class: ErrorClassName
    message: str
    duration_ms: DurationMs
    partial_output: str | None
    # Set when a guardrail or a pre_tool_use hook refused the call
    # (error_class permission_denied).
    blocked_by: BlockedBy | None = None


class ToolPlanned(Payload):
    """Dry-run: the call was recorded as a planned action instead of running."""

    event_type = EventType.TOOL_PLANNED

    tool_use_id: NonEmpty
    tool_name: NonEmpty
    summary: str
    input: dict[str, Any]
    # The confirmation policy would have asked a person before running it.
    needs_confirmation: bool = False


class GuardrailWarning(Payload):
    """A ``warn`` guardrail rule matched; the call went on and the warning
    travels with its result."""

    event_type = EventType.GUARDRAIL_WARNING

    rule: NonEmpty
    message: str
    tool_use_id: str | None


class HookCompleted(Payload):
    """One lifecycle hook ran; ``tool_use_id`` is present for tool hooks."""

    event_type = EventType.HOOK_COMPLETED

    hook: NonEmpty
    event: NonEmpty
    decision: Literal["allow", "block", "error"]
    # None when the hook timed out or could not start.
    exit_code: int | None
    duration_ms: DurationMs
    tool_use_id: str | None = None


class QualityGateCompleted(Payload):
    """A quality gate ran at the end of a turn."""

    event_type = EventType.QUALITY_GATE_COMPLETED

    name: NonEmpty
    passed: bool
    exit_code: int | None
    output: str
    required: bool = True


class ToolsChanged(Payload):
    """The tool list changed at run time (an MCP server's tools came or went);
    ``added``/``removed`` are tool names, ``source`` says where the change came from."""

    event_type = EventType.TOOLS_CHANGED

    added: list[str]
    removed: list[str]
    source: str


class MemoryChanged(Payload):
    """A memory was added, replaced or deleted (by a tool or ``DELETE /memory``);
    ``preview`` is the start of its content. One class per type below."""

    memory_id: NonEmpty
    workspace: str
    owner: str
    tags: list[str]
    preview: str
    previous_preview: str | None = None  # memory.replaced: the content before
    deleted_by: str | None = None  # memory.deleted: "tool" or the token's name


class MemoryAdded(MemoryChanged):
    """``memory.added``."""

    event_type = EventType.MEMORY_ADDED


class MemoryReplaced(MemoryChanged):
    """``memory.replaced``: ``previous_preview`` is the content before."""

    event_type = EventType.MEMORY_REPLACED


class MemoryDeleted(MemoryChanged):
    """``memory.deleted``: ``deleted_by`` is ``tool`` or the token's name."""

    event_type = EventType.MEMORY_DELETED


class MemoryConsolidated(Payload):
    """memory_consolidate merged memories: per merge the kept id, the merged
    (deleted) ids and why (``identical`` or ``near_duplicate``)."""

    event_type = EventType.MEMORY_CONSOLIDATED

    workspace: str
    owner: str
    merges: list[dict[str, Any]]
    removed: int


PAYLOAD_CLASSES: tuple[type[Payload], ...] = (
    SessionCreated,
    SessionDeleted,
    ClientAttached,
    ClientDetached,
    TurnStarted,
    TurnCompleted,
    TurnFailed,
    TurnCancelled,
    MessageDelta,
    MessageCompleted,
    ModelRetry,
    ToolCalled,
    ToolInputInvalid,
    ToolConfirmationRequested,
    ToolConfirmationResolved,
    ToolOutputDelta,
    ToolCompleted,
    ToolFailed,
    ToolsChanged,
    MemoryAdded,
    MemoryReplaced,
    MemoryDeleted,
    MemoryConsolidated,
    HookCompleted,
    ToolPlanned,
    GuardrailWarning,
    QualityGateCompleted,
)
"""Every concrete payload class, one per catalog type."""

PAYLOAD_MODELS: Mapping[EventType, type[Payload]] = {cls.event_type: cls for cls in PAYLOAD_CLASSES}
"""The payload class of each catalog type."""
