"""Typed events as the SDK hands them out.

Every WebSocket message is one envelope (``seq``, ``session_seq``, ``id``,
``type``, ``session_id``, ``turn_id``, ``ts``, ``data``). :func:`parse_event`
picks a class by ``type``: known types get a typed ``data`` model (so
``event.data.request_id`` type-checks), anything else comes back as
:class:`GenericEvent` with ``data`` as a plain dict, so a newer server never
breaks an older client.

Payload models keep unknown keys (``extra="allow"``) and require only the
fields the contract promises and the clients read.

Example::

    async for event in client.events(session_id):
        if isinstance(event, ConfirmationRequested):
            print(event.data.tool_name, event.data.preview.text)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from clients.sdk.errors import ProtocolError

TERMINAL_TURN_EVENTS = frozenset({"turn.completed", "turn.failed", "turn.cancelled"})


class Payload(BaseModel):
    """Base of the typed ``data`` models: unknown keys kept, immutable."""

    model_config = ConfigDict(extra="allow", frozen=True)


class SessionCreatedData(Payload):
    """``session.created``: the session's workspace root."""

    workspace: str | None = None


class SessionDeletedData(Payload):
    """``session.deleted``."""

    reason: str | None = None


class ClientPresenceData(Payload):
    """``client.attached`` / ``client.detached``: who opened or closed a stream."""

    client_id: str | None = None
    client_name: str | None = None
    reason: str | None = None


class TurnData(Payload):
    """``turn.*``: ``reason`` on failure/cancel (``message`` on failure says
    what went wrong), ``usage`` on completion."""

    reason: str | None = None
    message: str | None = None
    usage: dict[str, Any] | None = None
    source: str | None = None


class MessageDeltaData(Payload):
    """``message.delta``: a fragment of streamed assistant text."""

    text: str
    index: int | None = None


class MessageCompletedData(Payload):
    """``message.completed``: a whole canonical message (as JSON)."""

    message: dict[str, Any]


class ToolCalledData(Payload):
    """``tool.called``: the dispatcher runs the tool with this input."""

    tool_use_id: str
    tool_name: str
    side_effects: str
    input: dict[str, Any]
    rating: str | None = None


class ToolInputInvalidData(Payload):
    """``tool.input_invalid``: the input failed the tool's schema."""

    tool_use_id: str
    tool_name: str
    errors: list[dict[str, Any]]


class Preview(Payload):
    """What a call would do: ``kind`` is ``diff``, ``command`` or ``text``."""

    kind: str
    text: str


class ConfirmationRequestedData(Payload):
    """``tool.confirmation_requested``: a call waits for a decision."""

    request_id: str
    tool_use_id: str
    tool_name: str
    side_effects: str
    input_summary: str
    projected_modifications: list[str]
    preview: Preview
    expires_at: str
    rating: str | None = None
    # What "allow for session" would grant ("allow 'npm test' for this session ...").
    scope_text: str = ""


class ConfirmationResolvedData(Payload):
    """``tool.confirmation_resolved``: the winning answer and who gave it."""

    request_id: str
    decision: Literal["allow", "deny", "timeout", "cancelled"]
    scope: str
    resolved_by: str
    tool_use_id: str | None = None
    message: str | None = None


class ToolOutputDeltaData(Payload):
    """``tool.output_delta``: a chunk a running tool wrote on ``stream``."""

    tool_use_id: str
    stream: str
    text: str


class ToolCompletedData(Payload):
    """``tool.completed``: the result blocks and how long the call took."""

    tool_use_id: str
    tool_name: str
    duration_ms: float
    content: list[dict[str, Any]]
    files_modified: list[str] | None = None
    command_executed: str | None = None
    metadata: dict[str, Any] = {}


class ToolFailedData(Payload):
    """``tool.failed``: one of the eight error classes and a message."""

    tool_use_id: str
    tool_name: str
    error_class: str
    message: str
    duration_ms: float | None = None
    partial_output: str | None = None


DataT = TypeVar("DataT")


class Event(BaseModel, Generic[DataT]):
    """One event envelope; ``data`` is typed in the subclasses below.

    ``seq`` orders events across the server; ``session_seq`` counts 1, 2, 3 ...
    within one session with no gaps.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    seq: int
    session_seq: int
    id: str
    type: str
    session_id: str
    turn_id: str | None
    ts: str
    data: DataT


class GenericEvent(Event[dict[str, Any]]):
    """An event whose type this SDK does not model; ``data`` is the raw dict."""


class SessionCreated(Event[SessionCreatedData]):
    """``session.created``."""


class SessionDeleted(Event[SessionDeletedData]):
    """``session.deleted``."""


class ClientAttached(Event[ClientPresenceData]):
    """``client.attached``."""


class ClientDetached(Event[ClientPresenceData]):
    """``client.detached``."""


class TurnStarted(Event[TurnData]):
    """``turn.started``."""


class TurnCompleted(Event[TurnData]):
    """``turn.completed``."""


class TurnFailed(Event[TurnData]):
    """``turn.failed``."""


class TurnCancelled(Event[TurnData]):
    """``turn.cancelled``."""


class MessageDelta(Event[MessageDeltaData]):
    """``message.delta``."""


class MessageCompleted(Event[MessageCompletedData]):
    """``message.completed``."""


class ToolCalled(Event[ToolCalledData]):
    """``tool.called``."""


class ToolInputInvalid(Event[ToolInputInvalidData]):
    """``tool.input_invalid``."""


class ConfirmationRequested(Event[ConfirmationRequestedData]):
    """``tool.confirmation_requested``."""


class ConfirmationResolved(Event[ConfirmationResolvedData]):
    """``tool.confirmation_resolved``."""


class ToolOutputDelta(Event[ToolOutputDeltaData]):
    """``tool.output_delta``."""


class ToolCompleted(Event[ToolCompletedData]):
    """``tool.completed``."""


class ToolFailed(Event[ToolFailedData]):
    """``tool.failed``."""


AnyEvent = Event[Any]

EVENT_CLASSES: Mapping[str, type[AnyEvent]] = {
    "session.created": SessionCreated,
    "session.deleted": SessionDeleted,
    "client.attached": ClientAttached,
    "client.detached": ClientDetached,
    "turn.started": TurnStarted,
    "turn.completed": TurnCompleted,
    "turn.failed": TurnFailed,
    "turn.cancelled": TurnCancelled,
    "message.delta": MessageDelta,
    "message.completed": MessageCompleted,
    "tool.called": ToolCalled,
    "tool.input_invalid": ToolInputInvalid,
    "tool.confirmation_requested": ConfirmationRequested,
    "tool.confirmation_resolved": ConfirmationResolved,
    "tool.output_delta": ToolOutputDelta,
    "tool.completed": ToolCompleted,
    "tool.failed": ToolFailed,
}


def parse_event(raw: str | bytes | Mapping[str, Any]) -> AnyEvent:
    """Decode one envelope (JSON text or a dict) into its typed event class.

    Raises :class:`ProtocolError` naming the event type and the bad fields when
    the envelope or a known payload does not match the contract.
    """
    if isinstance(raw, str | bytes):
        try:
            decoded = json.loads(raw)
        except ValueError as exc:
            raise ProtocolError(f"event is not valid JSON: {exc}") from None
    else:
        decoded = raw
    if not isinstance(decoded, Mapping):
        raise ProtocolError(f"event must be a JSON object, got {type(decoded).__name__}")
    event_type = decoded.get("type")
    cls = EVENT_CLASSES.get(event_type, GenericEvent) if isinstance(event_type, str) else None
    if cls is None:
        raise ProtocolError("event has no string 'type' field")
    try:
        return cls.model_validate(decoded)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
            for err in exc.errors(include_url=False)
        )
        raise ProtocolError(
            f"event {event_type!r} does not match the contract: {problems}"
        ) from None
